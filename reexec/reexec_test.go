package reexec_test

import (
	"fmt"
	"os"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/neonbox/neonbox-ns/reexec"
)

func init() {
	reexec.Register("reexec-test-echo", func() {
		fmt.Print("child:", os.Args[1])
	})
}

func TestMain(m *testing.M) {
	if reexec.Init() {
		return
	}
	os.Exit(m.Run())
}

func TestCommandRunsRegisteredEntryPoint(t *testing.T) {
	out, err := reexec.Command("reexec-test-echo", "hello").Output()
	require.NoError(t, err)
	require.Equal(t, "child:hello", string(out))
}

func TestRegisterTwicePanics(t *testing.T) {
	reexec.Register("reexec-test-dup", func() {})
	require.Panics(t, func() { reexec.Register("reexec-test-dup", func() {}) })
}

func TestInitIgnoresUnknownName(t *testing.T) {
	require.False(t, reexec.Init(), "the test binary's own argv[0] is not registered")
}
