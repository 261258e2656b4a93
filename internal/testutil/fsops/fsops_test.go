package fsops

import (
	"bytes"
	"cmp"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/neonbox/neonbox-ns/internal/testutil"
)

func TestGenerateIsDeterministic(t *testing.T) {
	for seed := range int64(20) {
		a, b := Generate(seed, 40), Generate(seed, 40)
		require.Equal(t, a.Python(), b.Python(), "seed %d", seed)
		require.Equal(t, a.Final, b.Final, "seed %d", seed)
		require.Equal(t, Fixture(seed), a.Fixture, "seed %d", seed)
		require.Len(t, a.Ops, 40, "seed %d", seed)
	}
	require.NotEqual(t, Generate(1, 40).Python(), Generate(2, 40).Python())
}

func TestGenerateCoversEveryOp(t *testing.T) {
	seen := map[OpKind]bool{}
	for seed := range int64(100) {
		for _, op := range Generate(seed, 40).Ops {
			seen[op.Kind] = true
		}
	}
	for k := range opNames {
		require.True(t, seen[k], "no script in 100 has a %s", k)
	}
}

// checker replays a script on a model of its own, which knows only the
// type of each path, which files share an inode and whether a file is
// the fixture's untouched original, and checks that every operation is
// valid where it runs.
type checker struct {
	t     *testing.T
	seed  int64
	i     int
	paths map[string]Type
	orig  map[string]bool
	ino   map[string]int
	inos  int
}

func (c *checker) newInode(p string) {
	c.inos++
	c.ino[p] = c.inos
}

func (c *checker) sameInode(a, b string) bool {
	return c.paths[a] == File && c.paths[b] == File && c.ino[a] == c.ino[b]
}

func (c *checker) failf(format string, args ...any) {
	c.t.Helper()
	c.t.Fatalf("seed %d, op %d: "+format, append([]any{c.seed, c.i}, args...)...)
}

func (c *checker) valid(p string) {
	c.t.Helper()
	if p == "." {
		return
	}
	parts := strings.Split(p, "/")
	if len(parts) > MaxDepth {
		c.failf("%q deeper than %d", p, MaxDepth)
	}
	for _, name := range parts {
		if !slices.Contains(Names, name) {
			c.failf("%q: name %q not in the alphabet", p, name)
		}
	}
}

func parentOf(p string) string {
	if i := strings.LastIndexByte(p, '/'); i >= 0 {
		return p[:i]
	}
	return "."
}

func (c *checker) is(p string, want ...Type) {
	c.t.Helper()
	c.valid(p)
	if !slices.Contains(want, c.paths[p]) {
		c.failf("%q is %v, want one of %v", p, c.paths[p], want)
	}
}

// free checks that p is absent and its parent is a directory.
func (c *checker) free(p string) {
	c.t.Helper()
	c.valid(p)
	if p == "." {
		c.failf("the root as a new name")
	}
	if _, ok := c.paths[p]; ok {
		c.failf("%q exists", p)
	}
	if c.paths[parentOf(p)] != Dir {
		c.failf("parent of %q is %v, not a directory", p, c.paths[parentOf(p)])
	}
}

func (c *checker) notRoot(p string) {
	c.t.Helper()
	if p == "." {
		c.failf("operation on the root")
	}
}

// below lists p's descendants.
func (c *checker) below(p string) []string {
	var out []string
	for q := range c.paths {
		if strings.HasPrefix(q, p+"/") {
			out = append(out, q)
		}
	}
	return out
}

func (c *checker) drop(p string) {
	for _, q := range c.below(p) {
		delete(c.paths, q)
		delete(c.orig, q)
		delete(c.ino, q)
	}
	delete(c.paths, p)
	delete(c.orig, p)
	delete(c.ino, p)
}

func (c *checker) apply(op Op) {
	c.t.Helper()
	switch op.Kind {
	case OpCreate:
		c.free(op.Path)
		c.paths[op.Path] = File
		c.newInode(op.Path)
	case OpOverwrite:
		c.is(op.Path, File)
		delete(c.orig, op.Path)
	case OpAppend, OpTruncate:
		c.is(op.Path, File)
	case OpPatch:
		c.is(op.Path, File)
		if !op.MTime.IsZero() && !op.MTime.Equal(testutil.FixtureTime) {
			c.failf("patch restores mtime %v, not the fixture time", op.MTime)
		}
	case OpRemove:
		c.is(op.Path, File, Symlink)
		c.drop(op.Path)
	case OpMkdir:
		c.free(op.Path)
		c.paths[op.Path] = Dir
	case OpRmdir:
		c.notRoot(op.Path)
		c.is(op.Path, Dir)
		if len(c.below(op.Path)) > 0 {
			c.failf("rmdir of non-empty %q", op.Path)
		}
		c.drop(op.Path)
	case OpRmtree:
		c.notRoot(op.Path)
		c.is(op.Path, Dir)
		c.drop(op.Path)
	case OpRename:
		c.is(op.Path, File, Symlink)
		if op.To == op.Path {
			c.failf("rename onto itself")
		}
		if _, ok := c.paths[op.To]; ok {
			c.is(op.To, File, Symlink)
		} else {
			c.free(op.To)
		}
		if c.sameInode(op.Path, op.To) {
			c.failf("rename of %q onto %q, another link of it", op.Path, op.To)
		}
		typ, orig, ino := c.paths[op.Path], c.orig[op.Path], c.ino[op.Path]
		c.drop(op.Path)
		c.drop(op.To)
		c.paths[op.To] = typ
		if typ == File {
			c.ino[op.To] = ino
		}
		if orig {
			c.orig[op.To] = true
		} else {
			delete(c.orig, op.To)
		}
	case OpRenameDir:
		c.notRoot(op.Path)
		c.is(op.Path, Dir)
		c.free(op.To)
		if strings.HasPrefix(op.To, op.Path+"/") {
			c.failf("%q moved below itself to %q", op.Path, op.To)
		}
		moved := map[string]Type{op.To: Dir}
		for _, q := range c.below(op.Path) {
			moved[op.To+strings.TrimPrefix(q, op.Path)] = c.paths[q]
		}
		c.drop(op.Path)
		for q, typ := range moved {
			c.valid(q)
			c.paths[q] = typ // copies: none is an original
			if typ == File {
				c.newInode(q)
			}
		}
	case OpFileToDir:
		c.is(op.Path, File, Symlink)
		c.drop(op.Path)
		c.paths[op.Path] = Dir
	case OpDirToFile:
		c.notRoot(op.Path)
		c.is(op.Path, Dir)
		c.drop(op.Path)
		c.paths[op.Path] = File
		c.newInode(op.Path)
	case OpSymlink, OpReplaceSymlink:
		if op.Kind == OpSymlink {
			c.free(op.Path)
		} else {
			c.is(op.Path, File, Symlink)
			c.drop(op.Path)
		}
		if op.Target == "" || strings.HasPrefix(op.Target, "/") {
			c.failf("symlink target %q is not relative", op.Target)
		}
		c.paths[op.Path] = Symlink
	case OpLink:
		c.is(op.Path, File)
		if c.orig[op.Path] {
			c.failf("hard link to %q, a file of the fixture", op.Path)
		}
		c.free(op.To)
		c.paths[op.To] = File
		c.ino[op.To] = c.ino[op.Path]
	case OpChmod:
		c.is(op.Path, File, Dir)
		modes := FileModes
		if c.paths[op.Path] == Dir {
			modes = DirModes
		}
		if !slices.Contains(modes, op.Mode) {
			c.failf("mode %o for a %v", op.Mode, c.paths[op.Path])
		}
	case OpUtime:
		c.is(op.Path, File, Dir, Symlink)
		if op.MTime.Year() != 2001 || op.MTime.After(testutil.FixtureTime) {
			c.failf("mtime %v not in 2001 up to the fixture time", op.MTime)
		}
	case OpSetxattr, OpRemovexattr:
		c.is(op.Path, File, Dir)
		if !slices.Contains(XattrNames, op.Name) || strings.HasPrefix(op.Name, "user.overlay.") {
			c.failf("xattr %q", op.Name)
		}
	default:
		c.failf("unknown op %v", op.Kind)
	}
}

func TestScriptsReferenceValidPaths(t *testing.T) {
	for seed := range int64(500) {
		s := Generate(seed, 60)
		c := &checker{t: t, seed: seed, i: -1, paths: map[string]Type{}, orig: map[string]bool{}, ino: map[string]int{}}
		for _, e := range s.Fixture {
			c.valid(e.Path)
			require.Empty(t, e.Link, "seed %d: the fixture has a hard link", seed)
			c.paths[e.Path] = e.Type
			if e.Type == File {
				c.orig[e.Path] = true
				c.newInode(e.Path)
			}
			if e.Path != "." {
				require.Equal(t, Dir, c.paths[parentOf(e.Path)], "seed %d: parent of %q", seed, e.Path)
			}
		}
		require.Equal(t, Dir, c.paths["."], "seed %d: no root", seed)
		for i, op := range s.Ops {
			c.i = i
			c.apply(op)
		}
		// The model's final tree has the same paths, types and
		// hard-link groups.
		want, group := map[string]Type{}, map[string]string{}
		for _, e := range s.Final {
			want[e.Path] = e.Type
			if e.Type == File {
				group[e.Path] = cmp.Or(e.Link, e.Path)
			}
		}
		require.Equal(t, want, c.paths, "seed %d", seed)
		first := map[int]string{}
		for _, e := range s.Final {
			if e.Type == File {
				if _, ok := first[c.ino[e.Path]]; !ok {
					first[c.ino[e.Path]] = e.Path
				}
				require.Equal(t, group[e.Path], first[c.ino[e.Path]], "seed %d: hard links of %q", seed, e.Path)
			}
		}
	}
}

// TestScriptsRunAsModelled runs scripts directly on a temporary directory
// and checks the result against the generator's model, so that the model
// (which decides what is valid) does not drift from what Python does.
func TestScriptsRunAsModelled(t *testing.T) {
	// The system's Python (also the one a jail sees), not a shim
	// earlier in PATH.
	py, err := exec.LookPath("/usr/bin/python3")
	if err != nil {
		t.Skip("no /usr/bin/python3")
	}
	for seed := range int64(60) {
		s := Generate(seed, 60)
		dir := filepath.Join(t.TempDir(), "ws")
		require.NoError(t, os.Mkdir(dir, 0o755))
		require.NoError(t, Write(dir, s.Fixture))
		require.Equal(t, normalize(s.Fixture), readTree(t, dir), "seed %d: fixture", seed)

		cmd := exec.Command(py, slices.Concat(PythonFlags, []string{"-c", s.Python()})...)
		cmd.Dir = dir
		cmd.Env = []string{"PATH=/usr/bin:/bin", "LANG=C.UTF-8"}
		out, err := cmd.CombinedOutput()
		require.NoError(t, err, "seed %d: %s\n%s", seed, out, s.Python())
		require.Equal(t, normalize(s.Final), readTree(t, dir), "seed %d:\n%s", seed, s.Python())
		checkTimes(t, dir, s)
	}
}

// checkTimes checks the mtime the last utime gave each path that nothing
// changed afterwards.
func checkTimes(t *testing.T, dir string, s Script) {
	t.Helper()
	want := map[string]time.Time{}
	for _, op := range s.Ops {
		switch {
		case op.Kind == OpUtime, op.Kind == OpPatch && !op.MTime.IsZero():
			want[op.Path] = op.MTime
		default:
			// Anything else may touch the path, its parent or (for
			// renames and links) its destination; forget all.
			for _, p := range []string{op.Path, op.To, parentOf(op.Path), parentOf(op.To)} {
				delete(want, p)
			}
			for p := range want {
				if strings.HasPrefix(p, op.Path+"/") || op.To != "" && strings.HasPrefix(p, op.To+"/") {
					delete(want, p)
				}
			}
		}
	}
	// A write through another name of a hard-link group changes the
	// mtime too; with hard links around, check only what has none.
	linked := slices.ContainsFunc(s.Ops, func(op Op) bool { return op.Kind == OpLink })
	for p, mt := range want {
		var st unix.Stat_t
		require.NoError(t, unix.Lstat(filepath.Join(dir, p), &st))
		if linked && st.Mode&unix.S_IFMT == unix.S_IFREG {
			continue
		}
		require.Equal(t, mt.UnixNano(), st.Mtim.Nano(), "seed %d: mtime of %q", s.Seed, p)
	}
}

func normalize(entries []Entry) []Entry {
	out := slices.Clone(entries)
	for i := range out {
		if len(out[i].Data) == 0 {
			out[i].Data = nil
		}
	}
	return out
}

// readTree describes dir the way the model does.
func readTree(t *testing.T, dir string) []Entry {
	t.Helper()
	var out []Entry
	first := map[uint64]string{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		rel = filepath.ToSlash(rel)
		fi, err := os.Lstat(p)
		if err != nil {
			return err
		}
		e := Entry{Path: rel, Mode: fi.Mode().Perm()}
		switch {
		case fi.Mode().IsRegular():
			e.Type = File
			if e.Data, err = os.ReadFile(p); err != nil {
				return err
			}
			if len(e.Data) == 0 {
				e.Data = nil
			}
			st := fi.Sys().(*syscall.Stat_t)
			if f, ok := first[st.Ino]; ok {
				e.Link = f
			} else {
				first[st.Ino] = rel
			}
		case fi.IsDir():
			e.Type = Dir
		case fi.Mode()&fs.ModeSymlink != 0:
			e.Type, e.Mode = Symlink, 0
			if e.Target, err = os.Readlink(p); err != nil {
				return err
			}
			out = append(out, e)
			return nil
		default:
			t.Fatalf("unexpected %s at %s", fi.Mode().Type(), rel)
		}
		e.Xattrs = userXattrs(t, p)
		out = append(out, e)
		return nil
	})
	require.NoError(t, err)
	return out
}

func userXattrs(t *testing.T, p string) map[string]string {
	t.Helper()
	buf := make([]byte, 4096)
	n, err := unix.Llistxattr(p, buf)
	require.NoError(t, err)
	var out map[string]string
	for _, name := range bytes.Split(buf[:n], []byte{0}) {
		if !bytes.HasPrefix(name, []byte("user.")) {
			continue
		}
		val := make([]byte, 4096)
		m, err := unix.Lgetxattr(p, string(name), val)
		require.NoError(t, err)
		if out == nil {
			out = map[string]string{}
		}
		out[string(name)] = string(val[:m])
	}
	return out
}
