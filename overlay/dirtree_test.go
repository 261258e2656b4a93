package overlay

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/neonbox/neonbox-ns/internal/testutil"
)

// Fixture helpers: they build upper and workspace directories on disk the
// way overlayfs (mounted with userxattr) leaves them, without a mount.

func mkFile(t testing.TB, p, content string, perm os.FileMode) {
	t.Helper()
	require.NoError(t, os.MkdirAll(filepath.Dir(p), 0o755))
	require.NoError(t, os.WriteFile(p, []byte(content), perm))
	require.NoError(t, os.Chmod(p, perm)) // umask and setuid bits
}

func mkDir(t testing.TB, p string, perm os.FileMode) {
	t.Helper()
	require.NoError(t, os.MkdirAll(p, 0o755))
	require.NoError(t, os.Chmod(p, perm))
}

func mkSymlink(t testing.TB, p, target string) {
	t.Helper()
	require.NoError(t, os.MkdirAll(filepath.Dir(p), 0o755))
	require.NoError(t, os.Symlink(target, p))
}

func mkLink(t testing.TB, oldp, newp string) {
	t.Helper()
	require.NoError(t, os.MkdirAll(filepath.Dir(newp), 0o755))
	require.NoError(t, os.Link(oldp, newp))
}

// mkWhiteout makes an overlay whiteout, a character device 0/0. Linux
// allows that without privilege since 5.8.
func mkWhiteout(t testing.TB, p string) {
	t.Helper()
	require.NoError(t, os.MkdirAll(filepath.Dir(p), 0o755))
	err := unix.Mknod(p, unix.S_IFCHR, 0)
	if errors.Is(err, unix.EPERM) {
		testutil.Skip(t, "cannot create a whiteout (mknod c 0 0): "+err.Error()+"; needs Linux 5.8 or CAP_MKNOD")
	}
	require.NoError(t, err, "mknod %s", p)
}

func setXattr(t testing.TB, p, name, value string) {
	t.Helper()
	require.NoError(t, unix.Lsetxattr(p, name, []byte(value), 0), "setxattr %s %s", p, name)
}

// markOpaque gives the upper directory p overlay's opaque marker.
func markOpaque(t testing.TB, p string) { setXattr(t, p, xattrOpaque, "y") }

func setMTime(t testing.TB, p string, tm time.Time) {
	t.Helper()
	ts := unix.NsecToTimespec(tm.UnixNano())
	require.NoError(t, unix.UtimesNanoAt(unix.AT_FDCWD, p, []unix.Timespec{ts, ts}, unix.AT_SYMLINK_NOFOLLOW))
}

func openTree(t testing.TB, dir string, layer bool) *DirTree {
	t.Helper()
	tr, err := OpenDirTree(dir, layer)
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, tr.Close()) })
	return tr
}

// nodeView is the part of a Node that does not depend on when and by whom
// the fixture was made.
type nodeView struct {
	Name   string
	Type   NodeType
	Mode   fs.FileMode
	Size   int64
	Target string
	Opaque bool
	Xattrs map[string]string
}

func viewOf(n Node) nodeView {
	return nodeView{n.Name, n.Type, n.Mode, n.Size, n.Target, n.Opaque, n.Xattrs}
}

func viewsOf(ns []Node) []nodeView {
	out := make([]nodeView, 0, len(ns))
	for _, n := range ns {
		out = append(out, viewOf(n))
	}
	return out
}

// makeLayerFixture fills dir with one entry of each kind DirTree tells
// apart.
func makeLayerFixture(t *testing.T, dir string) {
	t.Helper()
	mkFile(t, filepath.Join(dir, "f"), "hello", 0o640)
	setXattr(t, filepath.Join(dir, "f"), "user.x", "1")
	setXattr(t, filepath.Join(dir, "f"), "user.overlay.origin", "\x00\xfb\x21\x00\x01")
	setXattr(t, filepath.Join(dir, "f"), "user.overlay.overlay.foo", "bar")
	// trusted.* (root only) and security.* are never content.
	if err := unix.Lsetxattr(filepath.Join(dir, "f"), "trusted.k", []byte("v"), 0); err != nil {
		t.Logf("fixture without trusted.* xattr: %v", err)
	}
	mkFile(t, filepath.Join(dir, "suid"), "s", 0o755|os.ModeSetuid)
	mkDir(t, filepath.Join(dir, "od"), 0o750)
	markOpaque(t, filepath.Join(dir, "od"))
	setXattr(t, filepath.Join(dir, "od"), "user.k", "v")
	mkDir(t, filepath.Join(dir, "notopaque"), 0o755)
	setXattr(t, filepath.Join(dir, "notopaque"), xattrOpaque, "n")
	mkFile(t, filepath.Join(dir, "plain/x"), "x", 0o644)
	mkFile(t, filepath.Join(dir, "plain/sub/y"), "yy", 0o644)
	mkWhiteout(t, filepath.Join(dir, "wh"))
	mkFile(t, filepath.Join(dir, "xwh"), "", 0o644)
	setXattr(t, filepath.Join(dir, "xwh"), xattrWhiteout, "")
	mkSymlink(t, filepath.Join(dir, "l"), "f")
	mkSymlink(t, filepath.Join(dir, "linkdir"), "plain")
	mkSymlink(t, filepath.Join(dir, "escape"), "/")
	require.NoError(t, unix.Mkfifo(filepath.Join(dir, "p"), 0o600))
	require.NoError(t, os.Chmod(filepath.Join(dir, "p"), 0o644))
	require.NoError(t, os.Chmod(dir, 0o750))
	setXattr(t, dir, "user.r", "1")
	setXattr(t, dir, "user.overlay.impure", "y")
}

func TestDirTreeLayer(t *testing.T) {
	for _, layer := range []bool{true, false} {
		name := map[bool]string{true: "layer", false: "plain"}[layer]
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			makeLayerFixture(t, dir)
			tr := openTree(t, dir, layer)

			fx := map[string]string{"user.x": "1", "user.overlay.foo": "bar"}
			odx := map[string]string{"user.k": "v"}
			notx := map[string]string(nil)
			rootx := map[string]string{"user.r": "1"}
			wh, xwh := TypeWhiteout, TypeWhiteout
			xwhx := map[string]string(nil)
			if !layer {
				fx = map[string]string{"user.x": "1", "user.overlay.origin": "\x00\xfb\x21\x00\x01", "user.overlay.overlay.foo": "bar"}
				odx = map[string]string{"user.k": "v", xattrOpaque: "y"}
				notx = map[string]string{xattrOpaque: "n"}
				rootx = map[string]string{"user.r": "1", "user.overlay.impure": "y"}
				wh, xwh = TypeSpecial, TypeFile
				xwhx = map[string]string{xattrWhiteout: ""}
			}
			want := []nodeView{
				{Name: "escape", Type: TypeSymlink, Size: 1, Target: "/"},
				{Name: "f", Type: TypeFile, Mode: 0o640, Size: 5, Xattrs: fx},
				{Name: "l", Type: TypeSymlink, Size: 1, Target: "f"},
				{Name: "linkdir", Type: TypeSymlink, Size: 5, Target: "plain"},
				{Name: "notopaque", Type: TypeDir, Mode: 0o755, Xattrs: notx},
				{Name: "od", Type: TypeDir, Mode: 0o750, Opaque: layer, Xattrs: odx},
				{Name: "p", Type: TypeSpecial, Mode: 0o644},
				{Name: "plain", Type: TypeDir, Mode: 0o755},
				{Name: "suid", Type: TypeFile, Mode: 0o755 | fs.ModeSetuid, Size: 1},
				{Name: "wh", Type: wh},
				{Name: "xwh", Type: xwh, Mode: 0o644, Xattrs: xwhx},
			}
			nodes, err := tr.ReadDir("")
			require.NoError(t, err)
			assert.Equal(t, want, viewsOf(nodes))

			// Lstat agrees with ReadDir entry by entry.
			for _, n := range nodes {
				got, err := tr.Lstat(n.Name)
				require.NoError(t, err)
				assert.Equal(t, n, got, "Lstat(%q)", n.Name)
			}

			root, err := tr.Lstat("")
			require.NoError(t, err)
			assert.Equal(t, nodeView{Type: TypeDir, Mode: 0o750, Xattrs: rootx}, viewOf(root), "root")

			sub, err := tr.ReadDir("plain")
			require.NoError(t, err)
			assert.Equal(t, []nodeView{
				{Name: "sub", Type: TypeDir, Mode: 0o755},
				{Name: "x", Type: TypeFile, Mode: 0o644, Size: 1},
			}, viewsOf(sub))
			y, err := tr.Lstat("plain/sub/y")
			require.NoError(t, err)
			assert.Equal(t, nodeView{Name: "y", Type: TypeFile, Mode: 0o644, Size: 2}, viewOf(y))

			var st unix.Stat_t
			require.NoError(t, unix.Lstat(filepath.Join(dir, "plain/x"), &st))
			x, err := tr.Lstat("plain/x")
			require.NoError(t, err)
			assert.Equal(t, st.Ino, x.Ino)
			assert.Equal(t, uint64(1), x.Nlink)
			assert.Equal(t, st.Uid, x.UID)
			assert.Equal(t, st.Mtim.Nano(), x.MTime)

			r, err := tr.Open("f")
			require.NoError(t, err)
			b, err := io.ReadAll(r)
			require.NoError(t, err)
			require.NoError(t, r.Close())
			assert.Equal(t, "hello", string(b))
		})
	}
}

func TestDirTreeMissing(t *testing.T) {
	dir := t.TempDir()
	mkFile(t, filepath.Join(dir, "d/x"), "x", 0o644)
	tr := openTree(t, dir, true)
	for _, rel := range []string{"missing", "d/missing", "nodir/x"} {
		_, err := tr.Lstat(rel)
		assert.ErrorIs(t, err, fs.ErrNotExist, "Lstat(%q)", rel)
	}
	_, err := tr.ReadDir("missing")
	assert.ErrorIs(t, err, fs.ErrNotExist)
	_, err = tr.ReadDir("d/x")
	assert.ErrorIs(t, err, unix.ENOTDIR)
	_, err = OpenDirTree(filepath.Join(dir, "missing"), true)
	assert.ErrorIs(t, err, fs.ErrNotExist)
}

// DirTree never resolves a path through a symlink, nor out of its root:
// a run could plant either in its upper directory.
func TestDirTreeDoesNotFollowSymlinks(t *testing.T) {
	dir := t.TempDir()
	mkFile(t, filepath.Join(dir, "plain/x"), "x", 0o644)
	mkFile(t, filepath.Join(dir, "plain/sub/y"), "y", 0o644)
	mkSymlink(t, filepath.Join(dir, "linkdir"), "plain")
	mkSymlink(t, filepath.Join(dir, "l"), "plain/x")
	mkSymlink(t, filepath.Join(dir, "escape"), "/")
	tr := openTree(t, dir, true)

	_, err := tr.ReadDir("plain/sub")
	require.NoError(t, err, "the real path works")
	// A symlink in the middle of a path gives ELOOP (RESOLVE_NO_SYMLINKS),
	// one at the end ENOTDIR (O_DIRECTORY|O_NOFOLLOW) or ELOOP (O_NOFOLLOW).
	for _, rel := range []string{"linkdir/sub", "linkdir", "escape", "escape/etc"} {
		_, err = tr.ReadDir(rel)
		assertNotFollowed(t, err, "ReadDir(%q)", rel)
	}
	for _, rel := range []string{"linkdir/x", "linkdir/sub/y", "escape/etc"} {
		_, err = tr.Lstat(rel)
		assertNotFollowed(t, err, "Lstat(%q)", rel)
	}
	for _, rel := range []string{"linkdir/x", "l", "escape"} {
		_, err = tr.Open(rel)
		assertNotFollowed(t, err, "Open(%q)", rel)
	}
	_, err = tr.Lstat("../" + filepath.Base(dir))
	assert.ErrorIs(t, err, unix.EXDEV, "a path out of the root")
	_, err = tr.ReadDir("..")
	assert.ErrorIs(t, err, unix.EXDEV)

	l, err := tr.Lstat("linkdir")
	require.NoError(t, err, "the symlink itself is described")
	assert.Equal(t, TypeSymlink, l.Type)
}

func assertNotFollowed(t *testing.T, err error, msg string, args ...any) {
	t.Helper()
	if !errors.Is(err, unix.ELOOP) && !errors.Is(err, unix.ENOTDIR) {
		t.Errorf("%s: want ELOOP or ENOTDIR, got %v", fmt.Sprintf(msg, args...), err)
	}
}

// makeCommitFixture builds a workspace and an upper directory holding one
// change of each kind, as a run under overlayfs with userxattr leaves them.
func makeCommitFixture(t *testing.T, ws, up string) {
	t.Helper()
	j := filepath.Join
	mkDir(t, ws, 0o755)
	mkDir(t, up, 0o755)
	mkFile(t, j(ws, "a.txt"), "a", 0o644)
	mkFile(t, j(ws, "keep.txt"), "k", 0o644)
	mkFile(t, j(ws, "d/x"), "x", 0o644)
	mkFile(t, j(ws, "d/y"), "y", 0o644)
	mkFile(t, j(ws, "gone.txt"), "g", 0o644)
	mkFile(t, j(ws, "gonedir/z"), "z", 0o644)
	mkFile(t, j(ws, "opq/old"), "o", 0o644)
	mkFile(t, j(ws, "f2d"), "file", 0o644)
	mkFile(t, j(ws, "d2f/in"), "in", 0o644)
	mkSymlink(t, j(ws, "link"), "a.txt")

	mkFile(t, j(up, "new.txt"), "new", 0o644)
	mkFile(t, j(up, "a.txt"), "changed", 0o644)
	mkFile(t, j(up, "keep.txt"), "k", 0o644) // copied up, left alone
	setXattr(t, j(up, "keep.txt"), "user.overlay.origin", "\x00\x01")
	mkDir(t, j(up, "d"), 0o755)
	setXattr(t, j(up, "d"), "user.overlay.impure", "y")
	mkWhiteout(t, j(up, "d/x"))
	mkFile(t, j(up, "d/y"), "yy", 0o644)
	mkFile(t, j(up, "d/new"), "n", 0o644)
	mkWhiteout(t, j(up, "gone.txt"))
	mkWhiteout(t, j(up, "gonedir"))
	mkWhiteout(t, j(up, "never-existed"))
	mkDir(t, j(up, "opq"), 0o755)
	markOpaque(t, j(up, "opq"))
	mkFile(t, j(up, "opq/fresh"), "f", 0o644)
	mkDir(t, j(up, "f2d"), 0o755)
	markOpaque(t, j(up, "f2d"))
	mkFile(t, j(up, "f2d/in"), "in", 0o644)
	mkFile(t, j(up, "d2f"), "now a file", 0o644)
	mkSymlink(t, j(up, "link"), "d")
	mkFile(t, j(up, "nd/f"), "nf", 0o644)
	setXattr(t, j(up, "nd/f"), "user.overlay.overlay.foo", "bar")
	mkWhiteout(t, j(up, "nd/wh"))

	testutil.SetTreeTimes(t, ws)
	testutil.SetTreeTimes(t, up)
	setMTime(t, j(up, "d"), testutil.FixtureTime.Add(time.Hour))
}

func TestPlanCommitDirTrees(t *testing.T) {
	base := t.TempDir()
	ws, up := filepath.Join(base, "ws"), filepath.Join(base, "up")
	makeCommitFixture(t, ws, up)

	p, err := PlanCommit(openTree(t, up, true), openTree(t, ws, false), Identity)
	require.NoError(t, err)
	assert.Equal(t, []string{
		`place "a.txt"`,
		`place "d/new"`, `remove "d/x"`, `place "d/y"`, `setmeta "d"`,
		`remove "d2f"`, `place "d2f"`,
		`remove "f2d"`, `place "f2d"`,
		`remove "gone.txt"`,
		`remove "gonedir"`,
		`place "link"`,
		`place "nd"`,
		`place "new.txt"`,
		`remove "opq"`, `place "opq"`,
		`setmeta ""`,
	}, opStrings(p.Ops))
	assert.Equal(t, []string{"file:d/new", "file:f2d/in", "dir:nd", "file:nd/f", "file:new.txt", "file:opq/fresh"}, changeStrings(p.Changes.Added))
	assert.Equal(t, []string{"file:a.txt", "file:d/y", "file:d2f", "dir:f2d", "symlink:link"}, changeStrings(p.Changes.Modified))
	assert.Equal(t, []string{"file:d/x", "file:d2f/in", "file:gone.txt", "dir:gonedir", "file:gonedir/z", "file:opq/old"}, changeStrings(p.Changes.Deleted))

	m := metaOf(t, p, "d")
	assert.Equal(t, testutil.FixtureTime.Add(time.Hour).UnixNano(), m.MTime)
	assert.Empty(t, m.Xattrs, "overlay's impure marker is not content")
}

func TestPlanCommitDirTreesRefusesFIFO(t *testing.T) {
	base := t.TempDir()
	ws, up := filepath.Join(base, "ws"), filepath.Join(base, "up")
	mkDir(t, ws, 0o755)
	mkDir(t, filepath.Join(up, "nd"), 0o755)
	require.NoError(t, unix.Mkfifo(filepath.Join(up, "nd/pipe"), 0o644))
	_, err := PlanCommit(openTree(t, up, true), openTree(t, ws, false), Identity)
	var re *RefusedError
	require.ErrorAs(t, err, &re)
	assert.Equal(t, []string{"nd/pipe"}, re.Paths)
}
