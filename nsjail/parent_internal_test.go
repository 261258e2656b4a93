package nsjail

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/neonbox/neonbox-ns/internal/testutil"
)

// failingBase returns the config of a jail whose base fails (a bind of a
// missing host directory) and the path it fails on.
func failingBase(t *testing.T) (*childConfig, idPlan, string) {
	t.Helper()
	testutil.RequireUserNS(t)
	o, ws, ids := preparedRun(t, 0o755)
	base := filepath.Dir(o.Workspace)
	rd, err := createRunDir(o.StateDir, newRunID(), o.Workspace, ids, &ws, 0)
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, rd.remove()) })
	filters, err := compileFilters(o.Policy, o.StateDir)
	require.NoError(t, err)
	cfg, err := jailConfig(&o, ids)
	require.NoError(t, err)
	missing := filepath.Join(base, "no-such-dir") // a host directory gone since the survey
	cfg.Argv, cfg.Cwd, cfg.RunDir, cfg.Seccomp = o.Command, o.Workspace, rd.path, filters
	cfg.ReadOnly = append(slices.Clip(cfg.ReadOnly), missing)
	return cfg, ids, filepath.Join(cfg.RootMount, missing)
}

// preparedRun returns the options of a run of true over a fresh
// workspace with mode and a fresh state dir, prepared, with the
// workspace root's stat and the run's ids.
func preparedRun(t *testing.T, mode os.FileMode) (Options, unix.Stat_t, idPlan) {
	t.Helper()
	testutil.RequireRoot(t)
	base := testutil.WorldTraversableTempDir(t)
	o := Options{Command: []string{"true"}, Workspace: filepath.Join(base, "ws"), StateDir: filepath.Join(base, "state")}
	require.NoError(t, os.Mkdir(o.Workspace, mode))
	ws, ids, err := o.prepare()
	require.NoError(t, err)
	return o, ws, ids
}

func mustBase(t *testing.T, cfg *childConfig) []byte {
	t.Helper()
	base, err := baseProgram(cfg)
	require.NoError(t, err)
	return base
}

func assertBindFailed(t *testing.T, se *StepError, path string) {
	t.Helper()
	require.NotNil(t, se)
	assert.Equal(t, "binds", se.Stage, "%+v", se)
	assert.Equal(t, path, se.Path)
	assert.Equal(t, int(unix.ENOENT), se.Errno)
}

// A step that fails in the base of the init's program (which the init
// builds while the parent still prepares the run) is reported as that
// step, not as the parent's failure to reach an init that is gone.
func TestBaseStepFailureIsReported(t *testing.T) {
	cfg, ids, path := failingBase(t)
	j, err := startJail(nil, nil, nil, false, ids, nil, nil)
	require.NoError(t, err)
	require.Nil(t, j.sendBase(mustBase(t, cfg)))
	j.ended() // the init failed in the base and is gone
	se := j.configure(cfg, nil)
	j.sock.Close()
	j.res.releaseMountNS()
	assertBindFailed(t, se, path)
}

// So it is when the parent sends the whole program at once and waits
// for the jail.
func TestBaseStepFailureIsReportedToAwait(t *testing.T) {
	cfg, ids, path := failingBase(t)
	j, err := startJail(nil, nil, nil, false, ids, nil, nil)
	require.NoError(t, err)
	_ = j.configure(cfg, nil)
	res := j.await(context.Background())
	res.releaseMountNS()
	assertBindFailed(t, res.setupErr, path)
}

// A step that fails in the rest of the program (sent once the run dir is
// made, while the parent still makes the cgroup) is reported as that
// step by the final part's send, not as a failure to reach a gone init;
// and no final part goes.
func TestRestStepFailureIsReported(t *testing.T) {
	cfg, ids, _ := failingBase(t)
	cfg.ReadOnly = cfg.ReadOnly[:len(cfg.ReadOnly)-1] // the base succeeds
	// The overlay cannot be mounted without its upper dir.
	require.NoError(t, os.RemoveAll(filepath.Join(cfg.RunDir, "upper")))
	j, err := startJail(nil, nil, nil, false, ids, nil, nil)
	require.NoError(t, err)
	require.Nil(t, j.sendBase(mustBase(t, cfg)))
	require.Nil(t, j.configureRest(cfg, nil))
	j.ended() // the init failed in the rest and is gone
	se := j.configureFinal(cfg, nil)
	j.sock.Close()
	j.res.releaseMountNS()
	require.NotNil(t, se)
	assert.Equal(t, "workspace", se.Stage, "%+v", se)
	assert.NotEqual(t, "config", se.Stage)
	assert.Same(t, se, j.configureFinal(cfg, nil), "kept for await")
}

// peakRSS is this process's VmHWM: at most getrusage's maxrss, which also
// counts what the process had before its execve, and more than nothing.
func TestPeakRSSIsTheHighWaterMark(t *testing.T) {
	got := peakRSS()
	var ru unix.Rusage
	require.NoError(t, unix.Getrusage(unix.RUSAGE_SELF, &ru))
	assert.Positive(t, got)
	assert.LessOrEqual(t, got, ru.Maxrss)
}
