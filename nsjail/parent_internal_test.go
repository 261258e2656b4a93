package nsjail

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/neonbox/neonbox-ns/internal/testutil"
)

// A step that fails in the base of the init's program (which the init
// builds while the parent still prepares the run) is reported as that
// step, not as the parent's failure to reach an init that is gone.
func TestBaseStepFailureIsReported(t *testing.T) {
	testutil.RequireRoot(t)
	testutil.RequireUserNS(t)
	base := testutil.WorldTraversableTempDir(t)
	o := Options{Command: []string{"true"}, Workspace: filepath.Join(base, "ws"), StateDir: filepath.Join(base, "state")}
	require.NoError(t, os.Mkdir(o.Workspace, 0o755))
	ws, ids, err := o.prepare()
	require.NoError(t, err)
	rd, err := createRunDir(o.StateDir, newRunID(), o.Workspace, ids, &ws, 0)
	require.NoError(t, err)
	defer func() { assert.NoError(t, rd.remove()) }()
	filters, err := compileFilters(o.Policy, o.StateDir)
	require.NoError(t, err)
	cfg, err := jailConfig(&o, ids)
	require.NoError(t, err)
	mnt := cfg.RootMount
	missing := filepath.Join(base, "no-such-dir") // never checked: not a policy's
	cfg.Argv, cfg.Cwd, cfg.RunDir, cfg.Seccomp = o.Command, o.Workspace, rd.path, filters
	cfg.Binds = []bind{{Path: missing, ReadOnly: true}}

	j, err := startJail(nil, nil, nil, false, ids, nil)
	require.NoError(t, err)
	require.Nil(t, j.sendBase(cfg))
	<-j.exited // the init failed in the base and is gone
	se := j.configure(cfg, nil)
	j.sock.Close()
	j.res.releaseMountNS()
	require.NotNil(t, se)
	assert.Equal(t, "binds", se.Stage, "%+v", se)
	assert.Equal(t, filepath.Join(mnt, missing), se.Path)
	assert.Equal(t, int(unix.ENOENT), se.Errno)
}
