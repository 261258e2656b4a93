package nsjail_test

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/neonbox/neonbox-ns/nsjail"
)

// streamsScript reads stdin and says which descriptors stdout and stderr
// are: one writer given for both gets one pipe, as with os/exec.
const streamsScript = `read line; echo "in: $line"; ` +
	`if [ "$(readlink /proc/$$/fd/1)" = "$(readlink /proc/$$/fd/2)" ]; then echo one pipe; else echo two pipes; fi; ` +
	`echo to-stderr >&2`

func TestStreamsOfARun(t *testing.T) {
	e := newJailEnv(t)
	var out bytes.Buffer
	r, _, _ := e.run(t, func(o *nsjail.Options) {
		o.Stdin = strings.NewReader("from a reader\n")
		o.Stdout, o.Stderr = &out, &out
	}, "sh", "-c", streamsScript)
	require.Equal(t, nsjail.StatusSuccess, r.Status, r.Error)
	assert.Equal(t, "in: from a reader\none pipe\nto-stderr\n", out.String())
}

func TestStreamsOfAPoolCall(t *testing.T) {
	e := newJailEnv(t)
	p := newPool(t, e)
	var out bytes.Buffer
	r, err := p.Exec(context.Background(), nsjail.Options{
		Command: []string{"sh", "-c", streamsScript},
		Stdin:   strings.NewReader("from a reader\n"),
		Stdout:  &out, Stderr: &out,
	})
	require.NoError(t, err)
	require.Equal(t, nsjail.StatusSuccess, r.Status, r.Error)
	assert.Equal(t, "in: from a reader\none pipe\nto-stderr\n", out.String())
}
