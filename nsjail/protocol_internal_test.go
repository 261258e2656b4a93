package nsjail

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/assert"
)

// decodeMessage reads what encoding/json reads, the messages it decodes
// itself included.
func TestDecodeMessageAgreesWithJSON(t *testing.T) {
	for _, in := range []string{
		`{"pid":1234}`, `{"pid":1}`, `{"pid":2147483647}`, `{"mapped":true}`,
		`{"pid":0}`, `{"pid":01}`, `{"pid":+5}`, `{"pid":-5}`, `{"pid":2147483648}`,
		`{"pid":}`, `{"pid":12`, `{"pid":1.5}`, `{"mapped":false}`, `{"mapped":true} `,
		`{"ready":true,"steps":[{"name":"exec","at":42}]}`,
		`{"error":{"stage":"rootfs","op":"mount","path":"/x","errno":2,"message":""}}`,
	} {
		var got, want childMessage
		gotErr := decodeMessage([]byte(in), &got)
		wantErr := json.Unmarshal([]byte(in), &want)
		assert.Equal(t, wantErr == nil, gotErr == nil, in)
		if wantErr == nil {
			assert.Equal(t, want, got, in)
		}
	}
}
