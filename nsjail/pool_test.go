package nsjail_test

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/neonbox/neonbox-ns/internal/testutil"
	"github.com/neonbox/neonbox-ns/nsjail"
	"github.com/neonbox/neonbox-ns/policies"
)

func newPool(t *testing.T, e jailEnv) *nsjail.Pool {
	t.Helper()
	p, err := nsjail.NewPool(context.Background(), nsjail.Options{Workspace: e.ws, StateDir: e.state, HostEnv: []string{"PATH=/usr/bin:/bin"}}, 2)
	require.NoError(t, err)
	t.Cleanup(func() {
		require.NoError(t, p.Close())
		e.requireClean(t)
	})
	return p
}

func TestPoolRunsFreshJails(t *testing.T) {
	e := newJailEnv(t)
	makeFixture(t, e.ws)
	p := newPool(t, e)
	exec := func(argv ...string) (*nsjail.Receipt, string) {
		var out bytes.Buffer
		r, err := p.Exec(context.Background(), nsjail.Options{Command: argv, Stdout: &out, Stderr: &out})
		require.NoError(t, err)
		return r, out.String()
	}
	// Each call: its own pid namespace, /tmp, hostname, and a commit.
	r1, out1 := exec("sh", "-c", "echo $$; echo secret > /tmp/leak; echo one > one.txt; cat f.txt")
	require.Equal(t, nsjail.StatusSuccess, r1.Status, "%v %s", r1.Error, out1)
	assert.Equal(t, "1\nhello\n", out1)
	assert.True(t, r1.Committed)
	r2, out2 := exec("sh", "-c", "ls /tmp/leak 2>/dev/null; echo $$; cat one.txt; hostname; id -u")
	require.Equal(t, nsjail.StatusSuccess, r2.Status, "%v %s", r2.Error, out2)
	assert.Equal(t, "1\none\nneonbox\n0\n", out2, "nothing of the first call but its commit")
	assert.NotEqual(t, r1.ID, r2.ID)

	// Failure rolls back; capture works; the filter is in force.
	r3, _ := exec("sh", "-c", "echo junk > one.txt; exit 4")
	assert.Equal(t, nsjail.StatusExecutionError, r3.Status)
	assert.Equal(t, 4, r3.ExitCode)
	b, err := os.ReadFile(filepath.Join(e.ws, "one.txt"))
	require.NoError(t, err)
	assert.Equal(t, "one\n", string(b))
	// The init waits for each call with its privileges already gone.
	r4, err := p.Exec(context.Background(), nsjail.Options{Command: []string{"grep", "-E", "^(CapPrm|CapEff|NoNewPrivs|Seccomp):", "/proc/self/status"}, CaptureOutput: true})
	require.NoError(t, err)
	require.Equal(t, nsjail.StatusSuccess, r4.Status, r4.Error)
	assert.Equal(t, "CapPrm:\t0000000000000000\nCapEff:\t0000000000000000\nNoNewPrivs:\t1\nSeccomp:\t2", strings.TrimSpace(*r4.Stdout))
	// Its own network namespace, with only lo; on v1, its run's cgroup
	// (joined through the tasks files that come with the call).
	r5, err := p.Exec(context.Background(), nsjail.Options{Command: []string{"sh", "-c", "tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' '; echo --; cat /proc/self/cgroup"}, CaptureOutput: true})
	require.NoError(t, err)
	require.Equal(t, nsjail.StatusSuccess, r5.Status, r5.Error)
	ifaces, cgroups, _ := strings.Cut(*r5.Stdout, "--\n")
	assert.Equal(t, "lo\n", ifaces)
	if r5.Cgroup == "v1" {
		assert.Contains(t, cgroups, "run-"+r5.ID)
	}
	for i := 0; i < 20; i++ {
		r, out := exec("true")
		require.Equal(t, nsjail.StatusSuccess, r.Status, "call %d: %v %s", i, r.Error, out)
	}
}

// A jail prepared before an earlier call committed still sees the
// workspace as it is now: the commit's files, and the root's times, so
// a call that changes nothing commits nothing, and undo reverts the
// call that did.
func TestPoolJailSeesEarlierCommits(t *testing.T) {
	e := newJailEnv(t)
	makeFixture(t, e.ws)
	before := testutil.Snapshot(t, e.ws)
	p := newPool(t, e)
	r1, err := p.Exec(context.Background(), nsjail.Options{Command: []string{"sh", "-c", "echo new > added.txt"}})
	require.NoError(t, err)
	require.True(t, r1.Committed)
	// The next jail's overlay was mounted before that commit: it sees
	// the commit all the same, and a file written to the workspace
	// from outside since.
	require.NoError(t, os.WriteFile(filepath.Join(e.ws, "outside.txt"), []byte("outside\n"), 0o644))
	var out bytes.Buffer
	r2, err := p.Exec(context.Background(), nsjail.Options{Command: []string{"cat", "added.txt", "outside.txt"}, Stdout: &out})
	require.NoError(t, err)
	require.Equal(t, nsjail.StatusSuccess, r2.Status, r2.Error)
	assert.Equal(t, "new\noutside\n", out.String())
	require.NoError(t, os.Remove(filepath.Join(e.ws, "outside.txt")))
	assert.False(t, r2.FilesystemModified)
	assert.Zero(t, r2.CommitMS, "nothing to commit")
	res, err := nsjail.Undo(context.Background(), e.workspaceOptions())
	require.NoError(t, err)
	assert.Equal(t, r1.ID, res.RunID)
	assert.Equal(t, before, testutil.Snapshot(t, e.ws))
}

// A jail prepared before the workspace root was made read-only does not
// let a call write there: overlay checks permissions against the mode
// it took when mounted, so such a jail is replaced by a fresh one.
func TestPoolHonoursAChangedWorkspaceRoot(t *testing.T) {
	e := newJailEnv(t)
	makeFixture(t, e.ws)
	p := newPool(t, e)
	st, err := os.Stat(e.ws)
	require.NoError(t, err)
	require.NoError(t, os.Chmod(e.ws, 0o555))
	defer os.Chmod(e.ws, st.Mode().Perm())
	var out bytes.Buffer
	r, err := p.Exec(context.Background(), nsjail.Options{Command: []string{"sh", "-c", "touch newfile"}, Stdout: &out, Stderr: &out})
	require.NoError(t, err)
	assert.Equal(t, nsjail.StatusExecutionError, r.Status, "%v %s", r.Error, out.String())
	assert.Contains(t, out.String(), "Permission denied")
	assert.NoFileExists(t, filepath.Join(e.ws, "newfile"))
}

// A policy's own filter is written for the command: it applies to the
// command only, not to the init's handling of a call (taking the
// command's streams, its directory, its lookup), even where it denies
// what that handling does.
func TestPoolCallsUnderAPolicysFilter(t *testing.T) {
	e := newJailEnv(t)
	policy, err := policies.Builtin("default")
	require.NoError(t, err)
	eperm := uint(unix.EPERM)
	policy.Seccomp = &specs.LinuxSeccomp{
		DefaultAction: specs.ActAllow,
		Syscalls:      []specs.LinuxSyscall{{Names: []string{"recvmsg", "chdir"}, Action: specs.ActErrno, ErrnoRet: &eperm}},
	}
	p, err := nsjail.NewPool(context.Background(), nsjail.Options{Workspace: e.ws, StateDir: e.state, Policy: policy, HostEnv: []string{"PATH=/usr/bin:/bin"}}, 1)
	require.NoError(t, err)
	t.Cleanup(func() {
		require.NoError(t, p.Close())
		e.requireClean(t)
	})
	for range 2 {
		r, err := p.Exec(context.Background(), nsjail.Options{Command: []string{"true"}})
		require.NoError(t, err)
		require.Equal(t, nsjail.StatusSuccess, r.Status, "%v", r.Error)
	}
	// The command is under it.
	r, err := p.Exec(context.Background(), nsjail.Options{Command: []string{"sh", "-c", "cd /tmp"}, CaptureOutput: true})
	require.NoError(t, err)
	assert.Equal(t, nsjail.StatusExecutionError, r.Status, "%v", r.Error)
	assert.Contains(t, *r.Stderr, "can't cd")
}
