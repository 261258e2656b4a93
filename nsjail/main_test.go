package nsjail_test

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/neonbox/neonbox-ns/internal/testutil"
	"github.com/neonbox/neonbox-ns/nsjail"
	"github.com/neonbox/neonbox-ns/reexec"
)

func TestMain(m *testing.M) {
	// The jail's init is this test binary re-executed (its C part runs
	// before this); Doctor's helpers go through reexec.
	if reexec.Init() {
		return
	}
	os.Exit(m.Run())
}

// jailEnv is a workspace and a state dir for privileged tests.
type jailEnv struct {
	ws, state string
}

func newJailEnv(t *testing.T) jailEnv {
	t.Helper()
	testutil.RequireRoot(t)
	testutil.RequireUserNS(t)
	base := testutil.WorldTraversableTempDir(t)
	e := jailEnv{ws: filepath.Join(base, "ws"), state: filepath.Join(base, "state")}
	require.NoError(t, os.Mkdir(e.ws, 0o755))
	return e
}

// run runs argv in a jail over e.ws, capturing output; edit may adjust
// the options first.
func (e jailEnv) run(t *testing.T, edit func(*nsjail.Options), argv ...string) (*nsjail.Receipt, string, string) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	o := nsjail.Options{
		Command:   argv,
		Workspace: e.ws,
		StateDir:  e.state,
		Cwd:       e.ws,
		Stdout:    &stdout,
		Stderr:    &stderr,
		HostEnv:   []string{"PATH=/usr/bin:/bin", "LANG=C.UTF-8"},
	}
	if edit != nil {
		edit(&o)
	}
	r, err := nsjail.Run(context.Background(), o)
	require.NoError(t, err)
	e.requireClean(t)
	return r, stdout.String(), stderr.String()
}

// requireClean checks that a finished run left no run directory and no
// mount below the state dir.
func (e jailEnv) requireClean(t *testing.T) {
	t.Helper()
	entries, err := os.ReadDir(filepath.Join(e.state, "runs"))
	if !os.IsNotExist(err) {
		require.NoError(t, err)
		require.Empty(t, entries, "run directories left behind")
	}
	mi, err := os.ReadFile("/proc/self/mountinfo")
	require.NoError(t, err)
	require.NotContains(t, string(mi), e.state, "mounts left behind")
}

func writeFile(t *testing.T, path, content string, mode os.FileMode) {
	t.Helper()
	require.NoError(t, os.MkdirAll(filepath.Dir(path), 0o755))
	require.NoError(t, os.WriteFile(path, []byte(content), mode))
}
