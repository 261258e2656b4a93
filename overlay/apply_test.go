package overlay

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/neonbox/neonbox-ns/internal/linux"
	"github.com/neonbox/neonbox-ns/internal/testutil"
)

// commitDirs plans the commit of upper directory up onto workspace ws and
// applies it.
func commitDirs(t *testing.T, up, ws string) *Plan {
	t.Helper()
	p, err := PlanCommit(openTree(t, up, true), openTree(t, ws, false), Identity)
	require.NoError(t, err)
	require.NoError(t, Apply(p, up, ws, Identity))
	return p
}

func lstatT(t *testing.T, p string) unix.Stat_t {
	t.Helper()
	var st unix.Stat_t
	require.NoError(t, unix.Lstat(p, &st), "lstat %s", p)
	return st
}

func readFile(t *testing.T, p string) string {
	t.Helper()
	b, err := os.ReadFile(p)
	require.NoError(t, err)
	return string(b)
}

func assertMissing(t *testing.T, p string) {
	t.Helper()
	_, err := os.Lstat(p)
	assert.ErrorIs(t, err, os.ErrNotExist, "%s should be gone", p)
}

// userXattrs lists the user.* xattrs of p (not following it).
func userXattrs(t *testing.T, p string) map[string]string {
	t.Helper()
	raw, err := listXattrs(p, false)
	require.NoError(t, err)
	out := map[string]string{}
	for k, v := range raw {
		if len(k) > 5 && k[:5] == "user." {
			out[k] = v
		}
	}
	return out
}

func assertNoWhiteouts(t *testing.T, dir string) {
	t.Helper()
	require.NoError(t, filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.Type()&os.ModeCharDevice != 0 {
			t.Errorf("whiteout left in the workspace: %s", p)
		}
		return nil
	}))
}

var fixtureTime1 = testutil.FixtureTime.Add(time.Hour)

// applyCases each build a workspace and an upper directory, commit them
// and check the workspace. Every case runs with the upper directory on the
// workspace's filesystem (entries are renamed) and, as root, on a tmpfs
// (entries are copied), where the result must be the same.
var applyCases = []struct {
	name string
	// build fills ws and up; then every entry gets FixtureTime.
	build func(t *testing.T, ws, up string)
	// times are mtimes for upper entries, set after build.
	times map[string]time.Time
	check func(t *testing.T, ws string)
}{
	{
		name: "new files and dirs moved in",
		build: func(t *testing.T, ws, up string) {
			mkFile(t, filepath.Join(ws, "a"), "a", 0o644)
			mkFile(t, filepath.Join(up, "n.txt"), "new", 0o600)
			mkFile(t, filepath.Join(up, "nd/x"), "x", 0o644)
			mkFile(t, filepath.Join(up, "nd/sub/y"), "y", 0o640)
			mkSymlink(t, filepath.Join(up, "nd/l"), "x")
			mkSymlink(t, filepath.Join(up, "evil"), "../../../etc/passwd")
			mkDir(t, filepath.Join(up, "nd"), 0o750)
		},
		check: func(t *testing.T, ws string) {
			assert.Equal(t, "a", readFile(t, filepath.Join(ws, "a")))
			assert.Equal(t, "new", readFile(t, filepath.Join(ws, "n.txt")))
			assert.Equal(t, uint32(unix.S_IFREG|0o600), lstatT(t, filepath.Join(ws, "n.txt")).Mode)
			assert.Equal(t, uint32(unix.S_IFDIR|0o750), lstatT(t, filepath.Join(ws, "nd")).Mode)
			assert.Equal(t, "x", readFile(t, filepath.Join(ws, "nd/x")))
			assert.Equal(t, "y", readFile(t, filepath.Join(ws, "nd/sub/y")))
			target, err := os.Readlink(filepath.Join(ws, "nd/l"))
			require.NoError(t, err)
			assert.Equal(t, "x", target)
			target, err = os.Readlink(filepath.Join(ws, "evil"))
			require.NoError(t, err)
			assert.Equal(t, "../../../etc/passwd", target, "a symlink is committed as it is, never followed")
		},
	},
	{
		name: "whiteouts remove files and trees",
		build: func(t *testing.T, ws, up string) {
			mkFile(t, filepath.Join(ws, "f"), "f", 0o644)
			mkFile(t, filepath.Join(ws, "d/x"), "x", 0o644)
			mkFile(t, filepath.Join(ws, "d/s/y"), "y", 0o644)
			mkSymlink(t, filepath.Join(ws, "d/s/l"), "/")
			mkFile(t, filepath.Join(ws, "keep"), "k", 0o644)
			mkWhiteout(t, filepath.Join(up, "f"))
			mkWhiteout(t, filepath.Join(up, "d"))
			mkWhiteout(t, filepath.Join(up, "absent"))
		},
		check: func(t *testing.T, ws string) {
			assertMissing(t, filepath.Join(ws, "f"))
			assertMissing(t, filepath.Join(ws, "d"))
			assertMissing(t, filepath.Join(ws, "absent"))
			assert.Equal(t, "k", readFile(t, filepath.Join(ws, "keep")))
		},
	},
	{
		name: "opaque dir replaces a dir",
		build: func(t *testing.T, ws, up string) {
			mkFile(t, filepath.Join(ws, "d/old"), "o", 0o644)
			mkFile(t, filepath.Join(ws, "d/keep"), "k", 0o644)
			mkFile(t, filepath.Join(ws, "d/sub/deep"), "x", 0o644)
			mkFile(t, filepath.Join(up, "d/keep"), "k2", 0o644)
			mkFile(t, filepath.Join(up, "d/sub/fresh"), "f", 0o644)
			mkWhiteout(t, filepath.Join(up, "d/old"))
			markOpaque(t, filepath.Join(up, "d"))
		},
		check: func(t *testing.T, ws string) {
			assertMissing(t, filepath.Join(ws, "d/old"))
			assertMissing(t, filepath.Join(ws, "d/sub/deep"))
			assert.Equal(t, "k2", readFile(t, filepath.Join(ws, "d/keep")))
			assert.Equal(t, "f", readFile(t, filepath.Join(ws, "d/sub/fresh")))
			assert.Empty(t, userXattrs(t, filepath.Join(ws, "d")), "the opaque marker is overlay's, not the workspace's")
		},
	},
	{
		name: "file to dir and dir to file",
		build: func(t *testing.T, ws, up string) {
			mkFile(t, filepath.Join(ws, "f2d"), "file", 0o644)
			mkFile(t, filepath.Join(ws, "d2f/a"), "a", 0o644)
			mkFile(t, filepath.Join(ws, "d2f/s/b"), "b", 0o644)
			mkFile(t, filepath.Join(up, "f2d/in"), "in", 0o644)
			markOpaque(t, filepath.Join(up, "f2d"))
			mkFile(t, filepath.Join(up, "d2f"), "now a file", 0o644)
		},
		check: func(t *testing.T, ws string) {
			assert.Equal(t, "in", readFile(t, filepath.Join(ws, "f2d/in")))
			assert.Equal(t, "now a file", readFile(t, filepath.Join(ws, "d2f")))
		},
	},
	{
		name: "symlink retarget and chmod",
		build: func(t *testing.T, ws, up string) {
			mkSymlink(t, filepath.Join(ws, "l"), "a")
			mkFile(t, filepath.Join(ws, "run.sh"), "#!/bin/sh\n", 0o755)
			mkSymlink(t, filepath.Join(up, "l"), "b")
			mkFile(t, filepath.Join(up, "run.sh"), "#!/bin/sh\n", 0o700)
		},
		check: func(t *testing.T, ws string) {
			target, err := os.Readlink(filepath.Join(ws, "l"))
			require.NoError(t, err)
			assert.Equal(t, "b", target)
			assert.Equal(t, uint32(unix.S_IFREG|0o700), lstatT(t, filepath.Join(ws, "run.sh")).Mode)
		},
	},
	{
		name: "setuid and setgid stripped",
		build: func(t *testing.T, ws, up string) {
			mkFile(t, filepath.Join(ws, "m"), "m", 0o755)
			mkFile(t, filepath.Join(up, "m"), "m", 0o755|os.ModeSetuid|os.ModeSetgid)
			mkFile(t, filepath.Join(up, "s"), "s", 0o755|os.ModeSetuid)
			mkFile(t, filepath.Join(up, "sd/g"), "g", 0o755|os.ModeSetgid)
			mkDir(t, filepath.Join(up, "sd"), 0o775|os.ModeSetgid|os.ModeSetuid)
		},
		check: func(t *testing.T, ws string) {
			for _, name := range []string{"m", "s", "sd/g"} {
				assert.Equal(t, uint32(unix.S_IFREG|0o755), lstatT(t, filepath.Join(ws, name)).Mode, name)
			}
			// A directory keeps setgid, which only passes its group on.
			assert.Equal(t, uint32(unix.S_IFDIR|unix.S_ISGID|0o775), lstatT(t, filepath.Join(ws, "sd")).Mode)
		},
	},
	{
		name: "overlay xattrs removed, escaped ones restored",
		build: func(t *testing.T, ws, up string) {
			mkFile(t, filepath.Join(ws, "m"), "m", 0o644)
			mkFile(t, filepath.Join(ws, "d/x"), "x", 0o644)
			for _, p := range []string{filepath.Join(up, "n"), filepath.Join(up, "m")} {
				mkFile(t, p, "changed", 0o644)
				setXattr(t, p, "user.overlay.origin", "\x00\xfb\x01")
				setXattr(t, p, "user.overlay.overlay.foo", "bar")
				setXattr(t, p, "user.x", "1")
			}
			mkFile(t, filepath.Join(up, "nd/f"), "f", 0o644)
			setXattr(t, filepath.Join(up, "nd/f"), "user.overlay.overlay.nested", "n")
			markOpaque(t, filepath.Join(up, "nd"))
			setXattr(t, filepath.Join(up, "nd"), "user.overlay.impure", "y")
			// A merged dir whose own xattr the run set.
			mkDir(t, filepath.Join(up, "d"), 0o755)
			setXattr(t, filepath.Join(up, "d"), "user.overlay.overlay.dk", "dv")
			setXattr(t, filepath.Join(up, "d"), "user.overlay.impure", "y")
		},
		check: func(t *testing.T, ws string) {
			want := map[string]string{"user.overlay.foo": "bar", "user.x": "1"}
			assert.Equal(t, want, userXattrs(t, filepath.Join(ws, "n")))
			assert.Equal(t, want, userXattrs(t, filepath.Join(ws, "m")))
			assert.Equal(t, map[string]string{"user.overlay.nested": "n"}, userXattrs(t, filepath.Join(ws, "nd/f")))
			assert.Empty(t, userXattrs(t, filepath.Join(ws, "nd")))
			assert.Equal(t, map[string]string{"user.overlay.dk": "dv"}, userXattrs(t, filepath.Join(ws, "d")))
		},
	},
	{
		name: "xattrs of the root",
		build: func(t *testing.T, ws, up string) {
			mkFile(t, filepath.Join(up, "n"), "n", 0o644)
			setXattr(t, up, "user.r", "1") // setfattr on the merged root
			setXattr(t, up, "user.overlay.impure", "y")
		},
		check: func(t *testing.T, ws string) {
			assert.Equal(t, map[string]string{"user.r": "1"}, userXattrs(t, ws))
		},
	},
	{
		name: "nested whiteouts in a placed dir are deleted",
		build: func(t *testing.T, ws, up string) {
			mkFile(t, filepath.Join(ws, "od/x"), "x", 0o644)
			mkFile(t, filepath.Join(up, "nd/f"), "f", 0o644)
			mkWhiteout(t, filepath.Join(up, "nd/wh"))
			mkWhiteout(t, filepath.Join(up, "nd/sub/wh2"))
			mkWhiteout(t, filepath.Join(up, "od/x"))
			mkFile(t, filepath.Join(up, "od/y"), "y", 0o644)
			markOpaque(t, filepath.Join(up, "od"))
		},
		times: map[string]time.Time{"nd": fixtureTime1, "nd/sub": fixtureTime1},
		check: func(t *testing.T, ws string) {
			assertNoWhiteouts(t, ws)
			assertMissing(t, filepath.Join(ws, "nd/wh"))
			assertMissing(t, filepath.Join(ws, "nd/sub/wh2"))
			assertMissing(t, filepath.Join(ws, "od/x"))
			assert.Equal(t, "f", readFile(t, filepath.Join(ws, "nd/f")))
			assert.Equal(t, "y", readFile(t, filepath.Join(ws, "od/y")))
			for _, d := range []string{"nd", "nd/sub"} {
				st := lstatT(t, filepath.Join(ws, d))
				assert.Equal(t, fixtureTime1.UnixNano(), st.Mtim.Nano(), "%s keeps its mtime", d)
			}
		},
	},
	{
		name: "hard links stay one inode",
		build: func(t *testing.T, ws, up string) {
			mkFile(t, filepath.Join(ws, "f"), "f", 0o644)
			// Two new names of one new file.
			mkFile(t, filepath.Join(up, "h1"), "h", 0o644)
			mkLink(t, filepath.Join(up, "h1"), filepath.Join(up, "nd/h2"))
			// A new link to a workspace file: the file is copied up.
			mkFile(t, filepath.Join(up, "f"), "f", 0o644)
			mkLink(t, filepath.Join(up, "f"), filepath.Join(up, "f2"))
		},
		check: func(t *testing.T, ws string) {
			for _, pair := range [][2]string{{"h1", "nd/h2"}, {"f", "f2"}} {
				a, b := lstatT(t, filepath.Join(ws, pair[0])), lstatT(t, filepath.Join(ws, pair[1]))
				assert.Equal(t, a.Ino, b.Ino, "%s and %s are one inode", pair[0], pair[1])
				assert.Equal(t, uint64(2), uint64(a.Nlink), pair[0])
			}
			assert.Equal(t, "h", readFile(t, filepath.Join(ws, "nd/h2")))
		},
	},
	{
		name: "merged dir gets the recorded mtime back",
		build: func(t *testing.T, ws, up string) {
			mkFile(t, filepath.Join(ws, "d/x"), "x", 0o644)
			mkFile(t, filepath.Join(ws, "d/y"), "y", 0o644)
			mkFile(t, filepath.Join(up, "d/new"), "n", 0o644)
			mkFile(t, filepath.Join(up, "d/sub/new2"), "n", 0o644)
			mkWhiteout(t, filepath.Join(up, "d/y"))
		},
		times: map[string]time.Time{"d": fixtureTime1, "": fixtureTime1},
		check: func(t *testing.T, ws string) {
			assert.Equal(t, fixtureTime1.UnixNano(), mtimeOf(t, filepath.Join(ws, "d")))
			assert.Equal(t, fixtureTime1.UnixNano(), mtimeOf(t, ws))
			assert.Equal(t, testutil.FixtureTime.UnixNano(), mtimeOf(t, filepath.Join(ws, "d/sub")))
			assertMissing(t, filepath.Join(ws, "d/y"))
		},
	},
}

// buildApplyCase makes the case's workspace ws and upper directory up.
func buildApplyCase(t *testing.T, build func(t *testing.T, ws, up string), times map[string]time.Time, ws, up string) {
	t.Helper()
	mkDir(t, ws, 0o755)
	mkDir(t, up, 0o755)
	build(t, ws, up)
	testutil.SetTreeTimes(t, ws)
	testutil.SetTreeTimes(t, up)
	for rel, tm := range times {
		setMTime(t, filepath.Join(up, rel), tm)
	}
}

func TestApply(t *testing.T) {
	for _, c := range applyCases {
		t.Run(c.name, func(t *testing.T) {
			base := t.TempDir()
			ws, up := filepath.Join(base, "ws"), filepath.Join(base, "up")
			buildApplyCase(t, c.build, c.times, ws, up)
			commitDirs(t, up, ws)
			c.check(t, ws)
			assertNoWhiteouts(t, ws)

		})
	}
}

// On one filesystem Apply moves inodes: nothing is copied.
func TestApplyMovesByRename(t *testing.T) {
	base := t.TempDir()
	ws, up := filepath.Join(base, "ws"), filepath.Join(base, "up")
	mkDir(t, ws, 0o755)
	mkFile(t, filepath.Join(up, "n"), "n", 0o644)
	mkFile(t, filepath.Join(up, "nd/x"), "x", 0o644)
	n, nd := lstatT(t, filepath.Join(up, "n")), lstatT(t, filepath.Join(up, "nd"))
	commitDirs(t, up, ws)
	assert.Equal(t, n.Ino, lstatT(t, filepath.Join(ws, "n")).Ino)
	assert.Equal(t, nd.Ino, lstatT(t, filepath.Join(ws, "nd")).Ino)
	assertMissing(t, filepath.Join(up, "n"))
	assertMissing(t, filepath.Join(up, "nd"))
}

func TestApplyRejectsBadOps(t *testing.T) {
	base := t.TempDir()
	ws, up := filepath.Join(base, "ws"), filepath.Join(base, "up")
	mkDir(t, ws, 0o755)
	mkDir(t, filepath.Join(up, "d"), 0o755)
	require.NoError(t, unix.Mkfifo(filepath.Join(up, "p"), 0o644))
	mkSymlink(t, filepath.Join(up, "l"), "d")
	for _, c := range []struct {
		name string
		op   Op
	}{
		{"place root", Op{Kind: OpPlace, Path: ""}},
		{"setmeta without meta", Op{Kind: OpSetMeta, Path: "d"}},
		{"unknown kind", Op{Kind: 99, Path: "d"}},
		{"place a FIFO", Op{Kind: OpPlace, Path: "p"}},
		{"place through a symlink", Op{Kind: OpPlace, Path: "l/x"}},
		{"place out of the root", Op{Kind: OpPlace, Path: "../up/d"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			assert.Error(t, Apply(&Plan{Ops: []Op{c.op}}, up, ws, Identity))
		})
	}
	_, err := os.Lstat(filepath.Join(ws, "p"))
	assert.ErrorIs(t, err, os.ErrNotExist, "a FIFO must not reach the workspace")
}

// Removing a directory never goes into a mount point below it: the host
// mounted something in the workspace that the jail could not see (its
// lower layer is the workspace without submounts), and a run that
// deleted the directory must not delete what is mounted there.
func TestApplyRemoveStopsAtMountPoints(t *testing.T) {
	testutil.RequireRoot(t)
	base := t.TempDir()
	ws, up, other := filepath.Join(base, "ws"), filepath.Join(base, "up"), filepath.Join(base, "other")
	mkDir(t, up, 0o755)
	mkFile(t, filepath.Join(ws, "d", "f"), "f", 0o644)
	mkDir(t, filepath.Join(ws, "d", "m"), 0o755)
	mkFile(t, filepath.Join(other, "keep"), "keep", 0o644)
	require.NoError(t, unix.Mount(other, filepath.Join(ws, "d", "m"), "", unix.MS_BIND, ""))
	t.Cleanup(func() { _ = unix.Unmount(filepath.Join(ws, "d", "m"), unix.MNT_DETACH) })

	err := Apply(&Plan{Ops: []Op{{Kind: OpRemove, Path: "d"}}}, up, ws, Identity)
	require.ErrorIs(t, err, linux.ErrMountPoint)
	assert.FileExists(t, filepath.Join(other, "keep"), "what is mounted in the workspace stays")
}

// With the upper directory on another filesystem Apply copies; the
// workspace must end up exactly as when it renames.
func TestApplyAcrossFilesystems(t *testing.T) {
	testutil.RequireRoot(t)
	mnt := t.TempDir()
	if err := unix.Mount("tmpfs", mnt, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "mode=0755,size=16m"); err != nil {
		testutil.Skip(t, "cannot mount a tmpfs: "+err.Error())
	}
	t.Cleanup(func() {
		if err := unix.Unmount(mnt, 0); err != nil {
			t.Errorf("unmount %s: %v", mnt, err)
		}
	})
	probe := filepath.Join(mnt, "probe")
	mkFile(t, probe, "", 0o644)
	if err := unix.Setxattr(probe, "user.probe", []byte("1"), 0); err != nil {
		testutil.Skip(t, "tmpfs without user xattrs (Linux < 6.6): "+err.Error())
	}

	for i, c := range applyCases {
		t.Run(c.name, func(t *testing.T) {
			base := t.TempDir()
			var snaps [2]map[string]string
			var plans [2]*Plan
			for j, upBase := range []string{base, filepath.Join(mnt, string(rune('a'+i)))} {
				ws := filepath.Join(base, []string{"ws-same", "ws-cross"}[j])
				up := filepath.Join(upBase, "up")
				buildApplyCase(t, c.build, c.times, ws, up)
				plans[j] = commitDirs(t, up, ws)
				c.check(t, ws)
				snaps[j] = testutil.Snapshot(t, ws)
			}
			assert.Equal(t, plans[0].Changes, plans[1].Changes)
			assert.Equal(t, snaps[0], snaps[1], "same filesystem vs across filesystems")
		})
	}
}

func mtimeOf(t *testing.T, p string) int64 {
	t.Helper()
	st := lstatT(t, p)
	return st.Mtim.Nano()
}
