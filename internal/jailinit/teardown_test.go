package jailinit_test

import (
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/neonbox/neonbox-ns/internal/jailinit"
	"github.com/neonbox/neonbox-ns/internal/testutil"
)

// fakeRun makes a run dir as a run leaves it: an upper dir with what CMD
// wrote, overlay's work dir (work/work with mode 0) and the owner file;
// and, for its cgroup, a directory with a shared parent.
func fakeRun(t *testing.T) (runDir, cg, shared, outside string) {
	base := t.TempDir()
	outside = filepath.Join(base, "outside")
	require.NoError(t, os.MkdirAll(outside, 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(outside, "keep"), []byte("keep"), 0o644))
	runDir = filepath.Join(base, "runs", "0123456789abcdef")
	require.NoError(t, os.MkdirAll(filepath.Join(runDir, "upper", "a", "b"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(runDir, "upper", "a", "b", "f"), []byte("x"), 0o644))
	require.NoError(t, os.Symlink(outside, filepath.Join(runDir, "upper", "link")))
	require.NoError(t, os.MkdirAll(filepath.Join(runDir, "work", "work", "incompat", "volatile"), 0o755))
	require.NoError(t, os.Chmod(filepath.Join(runDir, "work", "work"), 0))
	require.NoError(t, os.WriteFile(filepath.Join(runDir, "owner"), []byte("1 2"), 0o600))
	shared = filepath.Join(base, "cgroup", "neonbox")
	cg = filepath.Join(shared, "run-0123456789abcdef")
	require.NoError(t, os.MkdirAll(cg, 0o755))
	return runDir, cg, shared, outside
}

// closeAndWait lets the helper h do its job and reports whether it did
// all of it.
func closeAndWait(t *testing.T, h *jailinit.Teardown) bool {
	t.Helper()
	require.NoError(t, h.Close())
	ok, err := h.Wait()
	require.NoError(t, err)
	return ok
}

func startTeardown(t *testing.T) *jailinit.Teardown {
	h, err := jailinit.StartTeardown()
	require.NoError(t, err)
	_, err = h.Pid()
	require.NoError(t, err)
	return h
}

func TestTeardownRemovesItsJob(t *testing.T) {
	runDir, cg, shared, outside := fakeRun(t)
	h := startTeardown(t)
	require.NoError(t, h.Hand(jailinit.TeardownJob{Cgroups: []string{cg}, Shared: []string{shared}, RunDir: runDir}))
	// The job waits for the socket's end (neonbox-ns's exit).
	time.Sleep(50 * time.Millisecond)
	assert.DirExists(t, runDir, "the helper started before Close")
	assert.DirExists(t, cg, "the helper started before Close")
	ok := closeAndWait(t, h)
	assert.True(t, ok, "the helper did its whole job")
	assert.NoDirExists(t, runDir)
	assert.NoDirExists(t, cg)
	assert.NoDirExists(t, shared, "the shared parent, left empty, goes")
	assert.FileExists(t, filepath.Join(outside, "keep"), "not through a symlink")
}

// The jail's mount namespace is handed over, so that its unmount (and
// RCU grace period) is the helper's: it lets go of it before its other
// work. Here the helper is kept busy by a cgroup that stays busy (a
// mount point: rmdir says EBUSY, retried for a second).
func TestTeardownTakesTheMountNamespace(t *testing.T) {
	testutil.RequireRoot(t)
	runDir, cg, _, outside := fakeRun(t)
	require.NoError(t, unix.Mount(outside, cg, "", unix.MS_BIND, ""))
	t.Cleanup(func() { _ = unix.Unmount(cg, unix.MNT_DETACH) })
	ns, err := os.Open("/proc/self/ns/mnt")
	require.NoError(t, err)
	defer ns.Close()
	var before unix.Stat_t
	require.NoError(t, unix.Fstat(int(ns.Fd()), &before))

	h := startTeardown(t)
	pid, _ := h.Pid()
	require.NoError(t, h.Hand(jailinit.TeardownJob{Cgroups: []string{cg}, RunDir: runDir, MountNS: ns}))
	require.NoError(t, h.Close())
	_, err = ns.Stat()
	assert.ErrorIs(t, err, os.ErrClosed, "Hand closed the caller's descriptor")
	// Once the helper sleeps between its retries of the busy cgroup, it
	// holds no descriptor of the namespace.
	waitSleeping(t, pid)
	fds, err := os.ReadDir(filepath.Join("/proc", strconv.Itoa(pid), "fd"))
	require.NoError(t, err)
	for _, fd := range fds {
		var st unix.Stat_t
		if unix.Stat(filepath.Join("/proc", strconv.Itoa(pid), "fd", fd.Name()), &st) == nil {
			assert.False(t, st.Ino == before.Ino && st.Dev == before.Dev, "the helper holds the mount namespace while it works")
		}
	}
	ok, err := h.Wait()
	require.NoError(t, err)
	assert.False(t, ok, "the busy cgroup stayed")
	assert.FileExists(t, filepath.Join(runDir, "owner"))
}

// What the helper cannot remove stays with the owner file, so that a
// later run's sweep finds and removes it.
func TestTeardownKeepsTheOwnerOfWhatStays(t *testing.T) {
	t.Run("a cgroup that will not go", func(t *testing.T) {
		runDir, cg, shared, _ := fakeRun(t)
		require.NoError(t, os.Mkdir(filepath.Join(cg, "child"), 0o755)) // rmdir: ENOTEMPTY
		h := startTeardown(t)
		require.NoError(t, h.Hand(jailinit.TeardownJob{Cgroups: []string{cg}, Shared: []string{shared}, RunDir: runDir}))
		ok := closeAndWait(t, h)
		assert.False(t, ok)
		assert.DirExists(t, cg)
		assert.FileExists(t, filepath.Join(runDir, "owner"))
		assert.NoDirExists(t, filepath.Join(runDir, "upper"), "the rest of the run dir goes")
	})

	t.Run("a mount in the run dir", func(t *testing.T) {
		testutil.RequireRoot(t)
		runDir, cg, shared, outside := fakeRun(t)
		mnt := filepath.Join(runDir, "upper", "a", "b")
		require.NoError(t, unix.Mount(outside, mnt, "", unix.MS_BIND, ""))
		t.Cleanup(func() { _ = unix.Unmount(mnt, unix.MNT_DETACH) })
		h := startTeardown(t)
		require.NoError(t, h.Hand(jailinit.TeardownJob{Cgroups: []string{cg}, Shared: []string{shared}, RunDir: runDir}))
		ok := closeAndWait(t, h)
		assert.False(t, ok)
		assert.FileExists(t, filepath.Join(outside, "keep"), "nothing below a mount point is removed")
		assert.FileExists(t, filepath.Join(runDir, "owner"))
		assert.NoDirExists(t, cg, "the cgroup goes")
	})
}

func TestTeardownWithoutAJobExits(t *testing.T) {
	runDir, cg, _, _ := fakeRun(t)
	h := startTeardown(t)
	ok := closeAndWait(t, h)
	assert.True(t, ok)
	assert.DirExists(t, runDir, "nothing was handed over")
	assert.DirExists(t, cg)
}

// The helper outlives neonbox-ns: once it has its job it must not hold
// the caller's pipes (a caller reading neonbox-ns's output to its end
// would wait for it). Here it is kept busy by a cgroup that stays busy
// (a mount point: rmdir says EBUSY, retried for a second).
func TestTeardownHoldsNoDescriptorOfItsParent(t *testing.T) {
	testutil.RequireRoot(t)
	runDir, cg, _, outside := fakeRun(t)
	require.NoError(t, unix.Mount(outside, cg, "", unix.MS_BIND, ""))
	t.Cleanup(func() { _ = unix.Unmount(cg, unix.MNT_DETACH) })
	r, w, err := os.Pipe()
	require.NoError(t, err)
	defer r.Close()
	h := startTeardown(t) // forked while w is open
	w.Close()
	require.NoError(t, h.Hand(jailinit.TeardownJob{Cgroups: []string{cg}, RunDir: runDir}))
	require.NoError(t, h.Close())
	pid, _ := h.Pid()
	waitSleeping(t, pid) // at work: retrying the busy cgroup
	require.NoError(t, r.SetReadDeadline(time.Now().Add(time.Millisecond)))
	_, err = r.Read(make([]byte, 1))
	assert.ErrorIs(t, err, io.EOF, "the helper let go of the pipe")
	sid, err := unix.Getsid(pid)
	require.NoError(t, err)
	assert.Equal(t, pid, sid, "a session of its own")
	_, _ = h.Wait()
}

// waitSleeping waits until the helper pid sleeps in (clock_)nanosleep,
// between two tries of a busy cgroup.
func waitSleeping(t *testing.T, pid int) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(time.Millisecond) {
		b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "syscall"))
		require.NoError(t, err)
		if f := strings.Fields(string(b)); len(f) > 0 && (f[0] == strconv.Itoa(unix.SYS_NANOSLEEP) || f[0] == strconv.Itoa(unix.SYS_CLOCK_NANOSLEEP)) {
			return
		}
		require.True(t, time.Now().Before(deadline), "the helper never slept")
	}
}

// With a spare path the helper keeps the run dir for a later run: its
// upper and work dirs emptied (never through the symlink the run left),
// everything else removed, the owner file too, and the directory moved
// to the spare path.
func TestTeardownRecyclesTheRunDir(t *testing.T) {
	runDir, cg, shared, outside := fakeRun(t)
	require.NoError(t, os.WriteFile(filepath.Join(runDir, "committing"), []byte("txn"), 0o600))
	spares := filepath.Join(filepath.Dir(filepath.Dir(runDir)), "spare")
	require.NoError(t, os.Mkdir(spares, 0o700))
	spare := filepath.Join(spares, filepath.Base(runDir))
	h := startTeardown(t)
	require.NoError(t, h.Hand(jailinit.TeardownJob{Cgroups: []string{cg}, Shared: []string{shared}, RunDir: runDir, Spare: spare}))
	ok := closeAndWait(t, h)
	assert.True(t, ok, "the helper did its whole job")
	assert.NoDirExists(t, runDir)
	assert.NoDirExists(t, cg)
	assert.Equal(t, []string{"upper", "work"}, names(t, spare))
	assert.Empty(t, names(t, filepath.Join(spare, "upper")))
	assert.Empty(t, names(t, filepath.Join(spare, "work")))
	assert.FileExists(t, filepath.Join(outside, "keep"), "not through a symlink")
}

// The helper removes the run dir instead of recycling it when the spare
// dir is full, when it is missing, and when a cgroup stays (the owner
// file then stays too, for a later run's sweep).
func TestTeardownRecyclesOnlyWhatItMay(t *testing.T) {
	for _, tc := range []struct {
		name    string
		prepare func(t *testing.T, spares, cg string)
		removed bool
	}{
		{"spare dir full", func(t *testing.T, spares, _ string) {
			require.NoError(t, os.Mkdir(spares, 0o700))
			for i := range jailinit.MaxSpares {
				require.NoError(t, os.Mkdir(filepath.Join(spares, strconv.Itoa(i)), 0o700))
			}
		}, true},
		{"no spare dir", func(*testing.T, string, string) {}, true},
		{"a cgroup that will not go", func(t *testing.T, spares, cg string) {
			require.NoError(t, os.Mkdir(spares, 0o700))
			require.NoError(t, os.Mkdir(filepath.Join(cg, "child"), 0o755)) // rmdir: ENOTEMPTY
		}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			runDir, cg, _, _ := fakeRun(t)
			spares := filepath.Join(filepath.Dir(filepath.Dir(runDir)), "spare")
			spare := filepath.Join(spares, filepath.Base(runDir))
			tc.prepare(t, spares, cg)
			h := startTeardown(t)
			require.NoError(t, h.Hand(jailinit.TeardownJob{Cgroups: []string{cg}, RunDir: runDir, Spare: spare}))
			ok := closeAndWait(t, h)
			assert.NoDirExists(t, spare)
			if tc.removed {
				assert.True(t, ok)
				assert.NoDirExists(t, runDir)
			} else {
				assert.False(t, ok)
				assert.Equal(t, []string{"owner"}, names(t, runDir))
			}
		})
	}
}

// names lists dir, sorted.
func names(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	out := []string{}
	for _, e := range entries {
		out = append(out, e.Name())
	}
	return out
}
