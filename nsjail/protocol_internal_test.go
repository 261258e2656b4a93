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
		`{"ready":true,"steps":[]}`, `{"prepared":true,"steps":[]}`,
		`{"ready":true,"steps":[{"name":"rest","at":1},{"name":"final_2","at":9223372036854775807}]}`,
		`{"prepared":true,"steps":[{"name":"rootfs","at":0}]}`,
		`{"ready":true,"steps":[{"name":"a","at":9223372036854775808}]}`,
		`{"ready":true,"steps":[{"name":"a","at":01}]}`, `{"ready":true,"steps":[{"name":"a","at":-1}]}`,
		`{"ready":true,"steps":[{"name":"a","at":1.5}]}`, `{"ready":true,"steps":[{"name":"a","at":}]}`,
		`{"ready":true,"steps":[{"name":"a\"b","at":1}]}`, `{"ready":true,"steps":[{"name":"A b","at":1}]}`,
		`{"ready":true,"steps":[{"name":"a","at":1},]}`, `{"ready":true,"steps":[{"name":"a","at":1}{"name":"b","at":2}]}`,
		`{"ready":true,"steps":[{"name":"a","at":1}]} `, `{"ready":true,"steps":[{"name":"a","at":1}]`,
		`{"ready":true,"steps":[{"name":"a","at":1}]}}`, `{"ready":true,"steps":[{"name":"","at":1}]}`,
		`{"ready":true,"steps":[{"name":"a","at":1 }]}`, `{"ready":true,"steps":[`,
		`{"error":{"stage":"rootfs","op":"mount","path":"/x","errno":2,"message":""}}`,
	} {
		agreesWithJSON(t, []byte(in))
	}
	// The reports are read without encoding/json.
	var m childMessage
	assert.True(t, decodeReport([]byte(`{"ready":true,"steps":[{"name":"exec","at":42}]}`), &m))
	assert.True(t, decodeReport([]byte(`{"prepared":true,"steps":[]}`), &m))
}

func agreesWithJSON(t *testing.T, in []byte) {
	t.Helper()
	var got, want childMessage
	gotErr := decodeMessage(in, &got)
	wantErr := json.Unmarshal(in, &want)
	assert.Equal(t, wantErr == nil, gotErr == nil, "%q", in)
	if wantErr == nil {
		assert.Equal(t, want, got, "%q", in)
	}
}

func FuzzDecodeMessage(f *testing.F) {
	f.Add([]byte(`{"pid":1234}`))
	f.Add([]byte(`{"mapped":true}`))
	f.Add([]byte(`{"ready":true,"steps":[{"name":"rest","at":1},{"name":"exec","at":42}]}`))
	f.Add([]byte(`{"prepared":true,"steps":[]}`))
	f.Fuzz(func(t *testing.T, in []byte) {
		agreesWithJSON(t, in)
	})
}
