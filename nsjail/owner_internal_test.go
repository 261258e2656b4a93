package nsjail

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/neonbox/neonbox-ns/internal/testutil"
)

// An owner file names this process and, for `neonbox-ns exec`, its
// teardown helper, which outlives it: the run dir is abandoned only when
// every owner is gone. A zombie is gone (a helper's new parent may be
// slow to reap it).
func TestOwnerAliveWhileAnyOwnerLives(t *testing.T) {
	self := selfIdentity()
	require.NotEmpty(t, self)

	zombie := exec.Command("true")
	require.NoError(t, zombie.Start())
	defer zombie.Wait()
	stat := "/proc/" + strconv.Itoa(zombie.Process.Pid) + "/stat"
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) {
		b, err := os.ReadFile(stat)
		require.NoError(t, err)
		if strings.Contains(string(b), ") Z ") {
			break
		}
		require.True(t, time.Now().Before(deadline), "the child never became a zombie")
	}
	assert.Empty(t, processIdentity(zombie.Process.Pid), "a zombie has no identity")
	// A pid that is alive but was reused: its start time differs.
	recycled := strconv.Itoa(os.Getpid()) + " 1"

	assert.True(t, ownerAlive(self))
	assert.True(t, ownerAlive(recycled+"\n"+self), "the helper lives on")
	assert.False(t, ownerAlive(recycled))
	assert.False(t, ownerAlive(recycled+"\n"+strconv.Itoa(zombie.Process.Pid)+" 5"), "both gone")
	assert.True(t, ownerAlive("not an owner"), "an unreadable owner is not taken for gone")
}

// A run dir is abandoned when its owners died and left the owner file.
// One whose owner file went after it was read (its last owner's cleanup,
// racing a sweep) is not, nor is one whose file names an owner alive now
// that the first read missed (neonbox-ns adds its helper, then exits).
func TestAbandonedRereadsTheOwnerFile(t *testing.T) {
	d := runDir{path: t.TempDir()}
	dead := strconv.Itoa(os.Getpid()) + " 1" // a pid reused: gone
	owner := filepath.Join(d.path, "owner")
	require.NoError(t, os.WriteFile(owner, []byte(dead), 0o600))
	assert.True(t, abandoned(d, dead))
	assert.False(t, abandoned(d, dead+"\n"+selfIdentity()), "an owner lives")
	require.NoError(t, os.WriteFile(owner, []byte(dead+"\n"+selfIdentity()), 0o600))
	assert.False(t, abandoned(d, dead), "an owner was added since the first read")
	require.NoError(t, os.Remove(owner))
	assert.False(t, abandoned(d, dead), "the owner file went since it was read")
}

// The teardown helper becomes an owner by an append to the owner file.
func TestAddOwner(t *testing.T) {
	d := runDir{path: t.TempDir()}
	require.NoError(t, d.writeOwner())
	require.NoError(t, d.addOwner("1 2"))
	b, err := os.ReadFile(d.path + "/owner")
	require.NoError(t, err)
	assert.Equal(t, selfIdentity()+"\n1 2", string(b))
	assert.True(t, ownerAlive(string(b)))
	assert.ErrorIs(t, runDir{path: d.path + "/gone"}.addOwner("1 2"), os.ErrNotExist)
}

// The teardown fallback (neonbox-teardown) removes only a run dir that
// names it among its owners.
func TestTeardownFallbackTakesOnlyItsOwnRun(t *testing.T) {
	runs := filepath.Join(t.TempDir(), "runs")
	mine := filepath.Join(runs, "0123456789abcdef")
	other := filepath.Join(runs, "fedcba9876543210")
	for _, d := range []string{mine, other} {
		require.NoError(t, os.MkdirAll(d, 0o711))
	}
	require.NoError(t, os.WriteFile(filepath.Join(mine, "owner"), []byte("1 2\n"+selfIdentity()), 0o600))
	require.NoError(t, os.WriteFile(filepath.Join(other, "owner"), []byte("1 2\n3 4"), 0o600))
	require.NoError(t, os.Symlink(mine, filepath.Join(runs, "0000000000000000")))
	notRun := filepath.Join(filepath.Dir(runs), "0123456789abcdef")
	require.NoError(t, os.Mkdir(notRun, 0o711))
	require.NoError(t, os.WriteFile(filepath.Join(notRun, "owner"), []byte(selfIdentity()), 0o600))

	assert.True(t, helperOwns(mine))
	assert.False(t, helperOwns(other), "another process's run")
	assert.False(t, helperOwns(filepath.Join(runs, "0000000000000000")), "a symlink")
	assert.False(t, helperOwns(notRun), "not in a runs dir")
	assert.False(t, helperOwns(filepath.Join(runs, "nothex")))
}

// Nothing is handed over without a run dir (a held one is moved away):
// later runs find a run's cgroup only through its run dir.
func TestNoHandOverWithoutARunDir(t *testing.T) {
	rd := runDir{path: t.TempDir()}
	require.NoError(t, rd.writeOwner())
	assert.Error(t, handTeardown(nil, "1 2", nil, runDir{}, false, nil))
	assert.Error(t, handTeardown(nil, "1 2", nil, rd, true, nil), "held")
	assert.Error(t, handTeardown(nil, "", nil, rd, false, nil), "no helper")
	assert.Error(t, handTeardown(nil, "1 2", nil, runDir{path: rd.path + "/gone"}, false, nil), "no owner file")
	b, err := os.ReadFile(filepath.Join(rd.path, "owner"))
	require.NoError(t, err)
	assert.Equal(t, selfIdentity(), string(b), "the owners are left alone")
}

// A run that waits for its workspace's lock writes its owner file first:
// a sweep takes a run dir without one for abandoned once it is
// abandonedAfter old, and the wait may be longer.
func TestRunWaitingForTheLockOwnsItsRunDir(t *testing.T) {
	o, held := lockedWorkspace(t)
	done := make(chan *Receipt, 1)
	go func() {
		r, err := Run(context.Background(), o)
		assert.NoError(t, err)
		done <- r
	}()
	owned := func() bool {
		runs := filepath.Join(o.StateDir, "runs")
		entries, _ := os.ReadDir(runs)
		for _, e := range entries {
			b, err := os.ReadFile(filepath.Join(runs, e.Name(), "owner"))
			if err == nil && string(b) == selfIdentity() {
				return true
			}
		}
		return false
	}
	assert.Eventually(t, owned, 10*time.Second, time.Millisecond, "the waiting run's dir has its owner file")
	select {
	case r := <-done:
		t.Fatalf("the run did not wait for the lock: %+v", r)
	default:
	}
	require.NoError(t, held.release())
	r := <-done
	require.NotNil(t, r)
	assert.Equal(t, StatusSuccess, r.Status, "%+v", r.Error)
}

// A run whose context ends while it waits for its workspace's lock is
// canceled, not a sandbox error; it says where it was.
func TestRunCanceledWaitingForTheLock(t *testing.T) {
	o, held := lockedWorkspace(t)
	defer held.release()
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	r, err := Run(ctx, o)
	require.NoError(t, err)
	assert.Equal(t, StatusCanceled, r.Status)
	assert.Equal(t, ExitCanceled, r.ExitCode)
	require.NotNil(t, r.Error)
	assert.Equal(t, "lock", r.Error.Stage)
	assert.False(t, r.Committed)
}

// lockedWorkspace makes a workspace and a state dir for a run of true
// that waits up to a minute for the lock, which it takes first.
func lockedWorkspace(t *testing.T) (Options, *workspaceLock) {
	t.Helper()
	testutil.RequireRoot(t)
	base := testutil.WorldTraversableTempDir(t)
	o := Options{Command: []string{"true"}, Workspace: filepath.Join(base, "ws"), StateDir: filepath.Join(base, "state"), LockTimeout: time.Minute}
	require.NoError(t, os.Mkdir(o.Workspace, 0o755))
	require.NoError(t, os.Mkdir(o.StateDir, 0o711))
	held, err := lockWorkspace(context.Background(), o.StateDir, o.Workspace, time.Second, false, nil)
	require.NoError(t, err)
	return o, held
}

func TestRunIDAndTxnNames(t *testing.T) {
	for i := 0; i < 100; i++ {
		id := newRunID()
		require.True(t, isRunID(id), id)
		require.True(t, isTxnName("00000001764600000000-"+id))
	}
	for _, s := range []string{"", "0123456789abcde", "0123456789abcdef0", "0123456789ABCDEF", "0123456789abcdeg", "../3456789abcdef"} {
		assert.False(t, isRunID(s), "%q", s)
	}
	for _, s := range []string{
		"0123456789abcdef",                       // a run id alone
		"0000000176460000000-0123456789abcdef",   // 19 digits
		"000000017646000000000-0123456789abcdef", // 21
		"0000000176460000000x-0123456789abcdef",
		"00000001764600000000-0123456789abcdeX",
		"00000001764600000000_0123456789abcdef",
		"00000001764600000000-0123456789abcdef.undo", // an undo's scratch dir
	} {
		assert.False(t, isTxnName(s), "%q", s)
	}
}
