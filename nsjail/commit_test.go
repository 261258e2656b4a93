package nsjail_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/neonbox/neonbox-ns/internal/testutil"
	"github.com/neonbox/neonbox-ns/nsjail"
)

// makeFixture fills dir with one of each kind of entry a commit handles.
func makeFixture(t *testing.T, dir string) {
	t.Helper()
	writeFile(t, filepath.Join(dir, "f.txt"), "hello\n", 0o644)
	writeFile(t, filepath.Join(dir, "exec.sh"), "#!/bin/sh\necho hi\n", 0o755)
	writeFile(t, filepath.Join(dir, "dir/a.txt"), "a\n", 0o644)
	writeFile(t, filepath.Join(dir, "dir/b.txt"), "b\n", 0o644)
	writeFile(t, filepath.Join(dir, "dir/sub/c.txt"), "c\n", 0o644)
	writeFile(t, filepath.Join(dir, "xa.txt"), "x\n", 0o644)
	require.NoError(t, unix.Setxattr(filepath.Join(dir, "xa.txt"), "user.color", []byte("blue"), 0))
	require.NoError(t, os.Symlink("f.txt", filepath.Join(dir, "link")))
	writeFile(t, filepath.Join(dir, "hard1"), "linked\n", 0o644)
	require.NoError(t, os.Link(filepath.Join(dir, "hard1"), filepath.Join(dir, "hard2")))
	require.NoError(t, os.Mkdir(filepath.Join(dir, "empty"), 0o755))
	testutil.SetTreeTimes(t, dir)
}

const py = "/usr/bin/python3"

// commitCases are changes a run can make, one kind each. Each script runs
// once in a jail and once directly on a copy of the fixture; after the
// commit both trees must be the same.
var commitCases = []struct {
	name, script string
}{
	{"add file", "echo new > n.txt"},
	{"add tree", "mkdir -p x/y/z && echo d > x/y/z/d.txt && echo e > x/e.txt && ln -s y x/l"},
	{"append", "echo more >> f.txt"},
	{"truncate", ": > f.txt"},
	{"overwrite in subdir", "echo changed > dir/sub/c.txt"},
	{"delete file", "rm f.txt"},
	{"delete tree", "rm -rf dir"},
	{"delete empty dir", "rmdir empty"},
	{"replace dir with new dir", "rm -rf dir && mkdir dir && echo z > dir/z.txt"},
	{"replace dir keeping a name", "rm -rf dir && mkdir -p dir/sub && echo new-a > dir/a.txt"},
	{"file to dir", "rm f.txt && mkdir f.txt && echo in > f.txt/in"},
	{"dir to file", "rm -rf dir && echo now-a-file > dir"},
	{"new symlink out of the workspace", "ln -s ../../../etc/passwd evil"},
	{"retarget symlink", "ln -sfn dir link"},
	{"symlink to file", "rm link && echo real > link"},
	{"file to symlink", "rm f.txt && ln -s exec.sh f.txt"},
	{"chmod file", "chmod 0600 exec.sh"},
	{"chmod dir", "chmod 0700 dir"},
	{"set mtime", "touch -d '2001-01-01 00:00:00Z' f.txt"},
	{"set mtime of dir", "touch -d '2001-01-02 00:00:00Z' dir"},
	{"set user xattr", py + ` -c "import os; os.setxattr('f.txt', 'user.k', b'v')"`},
	{"set user.overlay xattr", py + ` -c "import os; os.setxattr('f.txt', 'user.overlay.k', b'v')"`},
	{"set dir xattr", py + ` -c "import os; os.setxattr('dir', 'user.k', b'v')"`},
	{"remove xattr", py + ` -c "import os; os.removexattr('xa.txt', 'user.color')"`},
	{"new hard link", "ln f.txt f2.txt"},
	{"new hard-linked files", "echo n > n1 && ln n1 n2 && ln n1 dir/n3"},
	{"rename file", "mv f.txt g.txt"},
	{"rename dir", "mv dir dir2"},
	{"move into new dir", "mkdir m && mv dir/a.txt m/ && mv exec.sh m/"},
	{"name with spaces and newline", "echo s > 'a b' && echo n > \"$(printf 'nl\\nx')\""},
	{"everything at once", "echo a >> f.txt; rm -rf dir/sub; mkdir dir/sub2; echo q > dir/sub2/q; ln -sfn x link; chmod 700 exec.sh; rm hard2"},
}

func TestCommitMatchesDirectOperations(t *testing.T) {
	e := newJailEnv(t)
	base := filepath.Dir(e.ws)
	for i, c := range commitCases {
		t.Run(c.name, func(t *testing.T) {
			if strings.Contains(c.script, "user.overlay.") && !kernelAtLeast(6, 7) {
				t.Skip("overlayfs with userxattr refuses user.overlay.* xattrs through the merged view before Linux 6.7")
			}
			ws := filepath.Join(base, "case", string(rune('a'+i%26))+filepath.Base(t.Name()))
			direct := ws + "-direct"
			require.NoError(t, os.MkdirAll(ws, 0o755))
			makeFixture(t, ws)
			testutil.CopyTree(t, ws, direct)

			out, err := exec.Command("sh", "-c", "cd \"$1\" && "+c.script, "sh", direct).CombinedOutput()
			require.NoError(t, err, "direct run: %s", out)

			r, stdout, stderr := jailEnv{ws: ws, state: e.state}.run(t, func(o *nsjail.Options) { o.Cwd = ws }, "sh", "-c", c.script)
			require.Equal(t, nsjail.StatusSuccess, r.Status, "%v\n%s%s", r.Error, stdout, stderr)
			require.True(t, r.Committed)
			require.True(t, r.FilesystemModified)
			require.Empty(t, r.Warnings)
			assert.Equal(t, testutil.Snapshot(t, direct), testutil.Snapshot(t, ws))
		})
	}
}

func TestCommitReportsChanges(t *testing.T) {
	e := newJailEnv(t)
	makeFixture(t, e.ws)
	r, _, _ := e.run(t, nil, "sh", "-c", "echo n > n.txt; echo m >> f.txt; rm -rf dir; rm -f link")
	require.Equal(t, nsjail.StatusSuccess, r.Status, r.Error)
	paths := func(cs []struct{ Path, Type string }) []string { return nil }
	_ = paths
	var added, modified, deleted []string
	for _, c := range r.Changes.Added {
		added = append(added, c.Type+":"+c.Path)
	}
	for _, c := range r.Changes.Modified {
		modified = append(modified, c.Type+":"+c.Path)
	}
	for _, c := range r.Changes.Deleted {
		deleted = append(deleted, c.Type+":"+c.Path)
	}
	assert.Equal(t, []string{"file:n.txt"}, added)
	assert.Equal(t, []string{"file:f.txt"}, modified)
	assert.Equal(t, []string{"dir:dir", "file:dir/a.txt", "file:dir/b.txt", "dir:dir/sub", "file:dir/sub/c.txt", "symlink:link"}, deleted)
}

func TestOpenWithoutWritingIsNoChange(t *testing.T) {
	e := newJailEnv(t)
	makeFixture(t, e.ws)
	before := testutil.Snapshot(t, e.ws)
	r, _, _ := e.run(t, nil, py, "-c", "open('f.txt', 'r+').close()")
	require.Equal(t, nsjail.StatusSuccess, r.Status, r.Error)
	assert.False(t, r.FilesystemModified, "%+v", r.Changes)
	assert.Equal(t, before, testutil.Snapshot(t, e.ws))
}

func TestCommitStripsSetuidBits(t *testing.T) {
	e := newJailEnv(t)
	makeFixture(t, e.ws)
	r, _, _ := e.run(t, nil, "sh", "-c", "chmod 6755 exec.sh && cp exec.sh new.sh && chmod 4755 new.sh")
	require.Equal(t, nsjail.StatusSuccess, r.Status, r.Error)
	for _, name := range []string{"exec.sh", "new.sh"} {
		st, err := os.Stat(filepath.Join(e.ws, name))
		require.NoError(t, err)
		assert.Equal(t, os.FileMode(0o755), st.Mode(), "%s: setuid/setgid must not reach the host", name)
	}
}

func TestCommitRefusesSpecialFiles(t *testing.T) {
	e := newJailEnv(t)
	makeFixture(t, e.ws)
	before := testutil.Snapshot(t, e.ws)
	r, _, _ := e.run(t, nil, "sh", "-c", "echo x > f.txt; mkfifo dir/pipe")
	assert.Equal(t, nsjail.StatusSecurityViolation, r.Status)
	assert.Equal(t, nsjail.ExitViolation, r.ExitStatus())
	require.NotNil(t, r.Error)
	assert.Contains(t, r.Error.Message, "dir/pipe")
	assert.False(t, r.Committed)
	assert.True(t, r.RollbackPerformed)
	assert.Equal(t, before, testutil.Snapshot(t, e.ws))
}

// Every way a run can fail leaves the workspace exactly as it was.
func TestFailedRunsRollBack(t *testing.T) {
	const mess = "echo x >> f.txt; rm -rf dir; mkdir newdir; echo y > newdir/y; chmod 700 exec.sh; ln -sfn /etc link; "
	cases := []struct {
		name   string
		script string
		edit   func(*nsjail.Options)
		status nsjail.Status
	}{
		{"exit non-zero", mess + "exit 3", nil, nsjail.StatusExecutionError},
		{"killed by a fault", mess + "exec " + py + " -c 'import ctypes; ctypes.string_at(0)'", nil, nsjail.StatusExecutionError},
		{"timeout", mess + "sleep 30", func(o *nsjail.Options) { o.Timeout = 2e9 }, nsjail.StatusTimeout},
		{"commit never", mess + "exit 0", func(o *nsjail.Options) { o.Commit = nsjail.CommitNever }, nsjail.StatusSuccess},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e := newJailEnv(t)
			makeFixture(t, e.ws)
			before := testutil.Snapshot(t, e.ws)
			r, _, _ := e.run(t, c.edit, "sh", "-c", c.script)
			assert.Equal(t, c.status, r.Status)
			assert.False(t, r.Committed)
			assert.True(t, r.RollbackPerformed)
			assert.True(t, r.FilesystemModified, "the receipt still says what the run changed")
			assert.Equal(t, before, testutil.Snapshot(t, e.ws))
		})
	}
}

func TestCommitAlwaysKeepsChangesOfFailedRun(t *testing.T) {
	e := newJailEnv(t)
	r, _, _ := e.run(t, func(o *nsjail.Options) { o.Commit = nsjail.CommitAlways }, "sh", "-c", "echo partial > out; exit 1")
	assert.Equal(t, nsjail.StatusExecutionError, r.Status)
	assert.True(t, r.Committed)
	b, err := os.ReadFile(filepath.Join(e.ws, "out"))
	require.NoError(t, err)
	assert.Equal(t, "partial\n", string(b))
}

// A process the command leaves behind dies with the jail, before the
// commit, so its late write never lands.
func TestLeftoverProcessDiesBeforeCommit(t *testing.T) {
	e := newJailEnv(t)
	r, _, _ := e.run(t, nil, "sh", "-c", "(sleep 1; echo late > f) & (setsid sh -c 'sleep 1; echo late > g' &) ; exit 0")
	require.Equal(t, nsjail.StatusSuccess, r.Status, r.Error)
	time.Sleep(1500 * time.Millisecond)
	for _, name := range []string{"f", "g"} {
		_, err := os.Stat(filepath.Join(e.ws, name))
		assert.True(t, os.IsNotExist(err), "%s appeared after the run", name)
	}
	assertNoJailProcesses(t, r.ID)
}

// assertNoJailProcesses checks that no process is left in the cgroups of
// the given runs (other tests may be running jails at the same time, so
// "any process with a jail id" would not do).
func assertNoJailProcesses(t *testing.T, runIDs ...string) {
	t.Helper()
	entries, err := os.ReadDir("/proc")
	require.NoError(t, err)
	for _, ent := range entries {
		if ent.Name()[0] < '0' || ent.Name()[0] > '9' {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", ent.Name(), "cgroup"))
		if err != nil {
			continue
		}
		for _, id := range runIDs {
			assert.NotContains(t, string(b), "run-"+id, "process %s is still in the cgroup of run %s", ent.Name(), id)
		}
	}
}

// Canceling the context kills the run and rolls it back.
func TestCanceledRunRollsBack(t *testing.T) {
	e := newJailEnv(t)
	makeFixture(t, e.ws)
	before := testutil.Snapshot(t, e.ws)
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	r, err := nsjail.Run(ctx, nsjail.Options{
		Command:   []string{"sh", "-c", "echo x >> f.txt; rm -rf dir; sleep 30"},
		Workspace: e.ws,
		StateDir:  e.state,
		HostEnv:   []string{"PATH=/usr/bin:/bin"},
	})
	require.NoError(t, err)
	assert.Equal(t, nsjail.StatusCanceled, r.Status)
	assert.Equal(t, nsjail.ExitCanceled, r.ExitStatus())
	assert.True(t, r.RollbackPerformed)
	assert.Equal(t, before, testutil.Snapshot(t, e.ws))
	e.requireClean(t)
	assertNoJailProcesses(t, r.ID)
}

// The workspace root's own xattrs survive commits, including one in
// overlay's namespace.
func TestWorkspaceRootXattrsSurvive(t *testing.T) {
	e := newJailEnv(t)
	require.NoError(t, unix.Setxattr(e.ws, "user.project", []byte("neonbox"), 0))
	require.NoError(t, unix.Setxattr(e.ws, "user.overlay.note", []byte("mine"), 0))
	before := testutil.Snapshot(t, e.ws)["."]
	r, out, _ := e.run(t, nil, py, "-c", "import os; print(os.getxattr('.', 'user.project').decode()); open('new', 'w').close()")
	require.Equal(t, nsjail.StatusSuccess, r.Status, r.Error)
	assert.Equal(t, "neonbox\n", out, "the jail sees the root's xattrs")
	assert.Equal(t, before, testutil.Snapshot(t, e.ws)["."])
}

// kernelAtLeast reports whether the running kernel is major.minor or newer.
func kernelAtLeast(major, minor int) bool {
	var u unix.Utsname
	if unix.Uname(&u) != nil {
		return false
	}
	var ma, mi int
	if _, err := fmt.Sscanf(unix.ByteSliceToString(u.Release[:]), "%d.%d", &ma, &mi); err != nil {
		return false
	}
	return ma > major || ma == major && mi >= minor
}

// uuid=off only where the workspace and the upper dir share a
// filesystem: over two, the kernel would ignore it and log a warning at
// every mount.
func TestOverlayUUIDOffOnlyOnOneFilesystem(t *testing.T) {
	testutil.RequireRoot(t)
	base := testutil.WorldTraversableTempDir(t)
	options := func(t *testing.T, ws string) string {
		t.Helper()
		r, err := nsjail.Run(context.Background(), nsjail.Options{
			Command:       []string{"grep", " - overlay ", "/proc/self/mountinfo"},
			Workspace:     ws,
			StateDir:      filepath.Join(base, "state"),
			CaptureOutput: true,
		})
		require.NoError(t, err)
		require.Equal(t, nsjail.StatusSuccess, r.Status, "%+v", r.Error)
		require.NotNil(t, r.Stdout)
		return *r.Stdout
	}
	same := filepath.Join(base, "ws")
	require.NoError(t, os.Mkdir(same, 0o755))
	assert.Contains(t, options(t, same), ",uuid=off,", "the workspace is on the state dir's filesystem")

	if !kernelAtLeast(6, 3) {
		t.Log("the other filesystem here is a tmpfs, which Linux idmaps from 6.3 on: not tried")
		return
	}
	other := filepath.Join(base, "tmpfs")
	require.NoError(t, os.Mkdir(other, 0o755))
	require.NoError(t, unix.Mount("tmpfs", other, "tmpfs", 0, "size=1m,mode=0755"))
	t.Cleanup(func() { assert.NoError(t, unix.Unmount(other, unix.MNT_DETACH)) })
	assert.NotContains(t, options(t, other), "uuid=off")
}

// A workspace whose path overlay's options cannot carry (a comma) is
// mounted through a lower layer in the new root instead of at its own
// path: it commits and rolls back as any other.
func TestWorkspaceWithACommaInItsPath(t *testing.T) {
	testutil.RequireRoot(t)
	base := testutil.WorldTraversableTempDir(t)
	ws := filepath.Join(base, "a,b")
	require.NoError(t, os.Mkdir(ws, 0o755))
	o := nsjail.Options{Workspace: ws, StateDir: filepath.Join(base, "state")}
	o.Command = []string{"sh", "-c", "echo kept > kept.txt"}
	r, err := nsjail.Run(context.Background(), o)
	require.NoError(t, err)
	require.Equal(t, nsjail.StatusSuccess, r.Status, "%+v", r.Error)
	assert.FileExists(t, filepath.Join(ws, "kept.txt"))
	o.Command = []string{"sh", "-c", "echo gone > gone.txt; exit 3"}
	r, err = nsjail.Run(context.Background(), o)
	require.NoError(t, err)
	assert.Equal(t, 3, r.ExitCode)
	assert.NoFileExists(t, filepath.Join(ws, "gone.txt"))
}
