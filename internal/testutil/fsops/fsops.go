// Package fsops generates random but valid sequences of filesystem
// operations on a workspace tree, for differential tests: the same script
// runs once through neonbox-ns and once directly, and the two resulting
// trees must be equal.
//
// Generate keeps an in-memory model of the tree (types, modes, contents,
// symlink targets, user xattrs and hard-link groups) and only emits
// operations that are valid in it, so a script never needs try/except.
// Everything is derived from the seed: a failure reproduces from its seed
// alone.
//
// Some operations are shaped around overlayfs semantics that differ from a
// plain filesystem on purpose, so that the two runs stay comparable:
//
//   - Directory renames are done as copy then delete in the script itself
//     (like shutil.copytree(symlinks=True, copy_function=shutil.copy2)
//     and shutil.rmtree). Our mounts use userxattr, which rules out
//     redirect_dir=on, so rename(2) of a directory that exists in the
//     lower layer fails with EXDEV (Documentation/filesystems/
//     overlayfs.rst, "Renaming directories"); tools like mv fall back to
//     copying, and the script does the same in both runs.
//   - Hard links are only made to files created or fully rewritten by the
//     same script. Without index=on, copying up one name of a lower
//     hard-link group breaks the group ("Hardlinks" in overlayfs.rst).
//   - Modes always leave the owner rw (files) or rwx (directories): the
//     jailed process has no CAP_DAC_OVERRIDE, the direct run is root.
//   - xattrs are user.* but never user.overlay.*, which overlayfs
//     reserves (escaped) with userxattr, and are never set on symlinks
//     (Linux refuses user.* xattrs there).
//   - A file is never renamed onto another hard link of itself. rename(2)
//     does nothing then, but overlayfs fails it with ESTALE when the inode
//     was copied up from the lower layer (a fixture file rewritten, then
//     linked): a difference in the kernel, not in the commit.
//   - Nothing writes through or follows a symlink.
package fsops

import (
	"bytes"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/neonbox/neonbox-ns/internal/testutil"
)

// MaxDepth is the deepest an entry may lie below the root ("a/b/c/d").
const MaxDepth = 4

// Names are the entry names the generator picks from: few, so that paths
// collide often. One has a space and one is not ASCII.
var Names = []string{"a", "b", "c", "d e", "é"}

// XattrNames are the xattr names the generator sets and removes.
var XattrNames = []string{"user.a", "user.b", "user.mime_type"}

// FileModes and DirModes are the permission bits chmod picks from.
var (
	FileModes = []fs.FileMode{0o644, 0o600, 0o640, 0o755, 0o700}
	DirModes  = []fs.FileMode{0o755, 0o750, 0o700}
)

// Type is the kind of an entry.
type Type uint8

// Entry kinds.
const (
	File Type = iota + 1
	Dir
	Symlink
)

func (t Type) String() string {
	switch t {
	case File:
		return "file"
	case Dir:
		return "dir"
	case Symlink:
		return "symlink"
	}
	return "unknown"
}

// Entry describes one entry of a tree.
type Entry struct {
	// Path is slash-separated and relative to the root; "." is the root.
	Path string
	Type Type
	// Mode is the permission bits of a file or directory.
	Mode fs.FileMode
	// Data is a file's content.
	Data []byte
	// Target is a symlink's target.
	Target string
	// Xattrs are the user.* xattrs of a file or directory; nil if none.
	Xattrs map[string]string
	// Link is, for a file, the first path (in walk order) of its
	// hard-link group when that is not Path itself.
	Link string
}

// Data is file content: Chunk repeated Repeat times, so that large files
// stay short in a script.
type Data struct {
	Chunk  []byte
	Repeat int
}

// Bytes returns the content.
func (d Data) Bytes() []byte { return bytes.Repeat(d.Chunk, d.Repeat) }

func (d Data) python() string {
	if d.Repeat == 1 {
		return pyBytes(d.Chunk)
	}
	return fmt.Sprintf("%s * %d", pyBytes(d.Chunk), d.Repeat)
}

// OpKind says what an operation does.
type OpKind uint8

// Operations.
const (
	// OpCreate creates the file Path (absent before) with Data.
	OpCreate OpKind = iota + 1
	// OpOverwrite replaces the content of the file Path with Data.
	OpOverwrite
	// OpAppend appends Data to the file Path.
	OpAppend
	// OpTruncate truncates or extends the file Path to Size bytes.
	OpTruncate
	// OpPatch writes Data into the file Path at offset Size, in place,
	// and then, unless MTime is zero, sets its mtime back to MTime: a
	// change that keeps size and mtime when both are the fixture's.
	OpPatch
	// OpRemove deletes the file or symlink Path.
	OpRemove
	// OpMkdir creates the directory Path.
	OpMkdir
	// OpRmdir deletes the empty directory Path.
	OpRmdir
	// OpRmtree deletes the directory Path and everything below it.
	OpRmtree
	// OpRename renames the file or symlink Path to To, replacing a file
	// or symlink there.
	OpRename
	// OpRenameDir moves the directory Path to the absent To, by copy and
	// delete (see the package comment).
	OpRenameDir
	// OpFileToDir replaces the file or symlink Path by an empty
	// directory.
	OpFileToDir
	// OpDirToFile replaces the directory tree Path by a file with Data.
	OpDirToFile
	// OpSymlink creates the symlink Path pointing at Target.
	OpSymlink
	// OpReplaceSymlink replaces the file or symlink Path by a symlink
	// pointing at Target.
	OpReplaceSymlink
	// OpLink makes To a new hard link of the file Path.
	OpLink
	// OpChmod sets the mode of the file or directory Path.
	OpChmod
	// OpUtime sets the atime and mtime of Path (not following a
	// symlink) to MTime.
	OpUtime
	// OpSetxattr sets the xattr Name of the file or directory Path to
	// Value.
	OpSetxattr
	// OpRemovexattr removes the xattr Name of the file or directory Path.
	OpRemovexattr
)

var opNames = map[OpKind]string{
	OpCreate: "create", OpOverwrite: "overwrite", OpAppend: "append", OpTruncate: "truncate",
	OpPatch:  "patch",
	OpRemove: "remove", OpMkdir: "mkdir", OpRmdir: "rmdir", OpRmtree: "rmtree",
	OpRename: "rename", OpRenameDir: "rename dir", OpFileToDir: "file to dir",
	OpDirToFile: "dir to file", OpSymlink: "symlink", OpReplaceSymlink: "replace by symlink",
	OpLink: "hard link", OpChmod: "chmod", OpUtime: "utime", OpSetxattr: "setxattr",
	OpRemovexattr: "removexattr",
}

func (k OpKind) String() string {
	if s, ok := opNames[k]; ok {
		return s
	}
	return "unknown"
}

// Op is one operation of a script.
type Op struct {
	Kind   OpKind
	Path   string
	To     string
	Data   Data
	Size   int64
	Target string
	Mode   fs.FileMode
	MTime  time.Time
	Name   string
	Value  string
}

// Script is a fixture and the operations a run does on it.
type Script struct {
	Seed    int64
	Fixture []Entry
	Ops     []Op
	// Final is the tree the model expects after the operations, in
	// walk order (depth first, names sorted), root first.
	Final []Entry
}

// Fixture returns the initial tree for seed: the root (its mode) and then
// files, directories and symlinks, parents before children, some with
// xattrs, no hard links. All of it is derived from seed.
func Fixture(seed int64) []Entry {
	return fixtureModel(seed).entries()
}

// Write creates entries (as returned by Fixture, or a Script's Final)
// below dir, which must exist. The "." entry sets dir's own mode and
// xattrs.
func Write(dir string, entries []Entry) error {
	var dirs []Entry
	for _, e := range entries {
		p := filepath.Join(dir, filepath.FromSlash(e.Path))
		var err error
		switch e.Type {
		case Dir:
			if e.Path != "." {
				err = os.Mkdir(p, 0o700)
			}
			dirs = append(dirs, e) // chmod last: modes may be narrower
		case File:
			if e.Link != "" {
				err = os.Link(filepath.Join(dir, filepath.FromSlash(e.Link)), p)
				break
			}
			if err = os.WriteFile(p, e.Data, 0o600); err == nil {
				err = os.Chmod(p, e.Mode)
			}
		case Symlink:
			err = os.Symlink(e.Target, p)
		default:
			err = fmt.Errorf("unknown type %d", e.Type)
		}
		if err == nil && e.Link == "" {
			err = setXattrs(p, e.Xattrs)
		}
		if err != nil {
			return fmt.Errorf("fixture %q: %w", e.Path, err)
		}
	}
	for i := len(dirs) - 1; i >= 0; i-- {
		p := filepath.Join(dir, filepath.FromSlash(dirs[i].Path))
		if err := os.Chmod(p, dirs[i].Mode); err != nil {
			return fmt.Errorf("fixture %q: %w", dirs[i].Path, err)
		}
	}
	return nil
}

func setXattrs(p string, xattrs map[string]string) error {
	names := make([]string, 0, len(xattrs))
	for n := range xattrs {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		if err := unix.Lsetxattr(p, n, []byte(xattrs[n]), 0); err != nil {
			return &os.PathError{Op: "lsetxattr " + n, Path: p, Err: err}
		}
	}
	return nil
}

// Generate returns a script of n operations on Fixture(seed).
func Generate(seed int64, n int) Script {
	g := &gen{
		r: rand.New(rand.NewPCG(uint64(seed), 2)),
		m: fixtureModel(seed),
	}
	s := Script{Seed: seed, Fixture: g.m.entries()}
	steps := g.steps()
	total := 0
	for _, st := range steps {
		total += st.weight
	}
	// A step that finds nothing to act on emits nothing; try again.
	for attempts := 0; len(g.ops) < n && attempts < 100*n; attempts++ {
		pick := g.r.IntN(total)
		for _, st := range steps {
			if pick < st.weight {
				st.do()
				break
			}
			pick -= st.weight
		}
	}
	s.Ops = g.ops
	s.Final = g.m.entries()
	return s
}

// PythonFlags are the flags to run scripts with (python3 -I -S -c
// SCRIPT): isolated from the environment, and without the site import,
// which would double the start-up time. Scripts need only the os module.
var PythonFlags = []string{"-I", "-S"}

// Python renders the operations as a Python 3 program to run with the
// workspace root as its working directory.
func (s Script) Python() string {
	var b strings.Builder
	fmt.Fprintf(&b, "# neonbox-ns differential test, seed %d\n", s.Seed)
	b.WriteString(pyPrelude)
	for i, op := range s.Ops {
		fmt.Fprintf(&b, "# %d %s\n", i, op.Kind)
		p, to := pyStr(op.Path), pyStr(op.To)
		switch op.Kind {
		case OpCreate:
			fmt.Fprintf(&b, "put(%s, %s, 'xb')\n", p, op.Data.python())
		case OpOverwrite:
			fmt.Fprintf(&b, "put(%s, %s, 'wb')\n", p, op.Data.python())
		case OpAppend:
			fmt.Fprintf(&b, "put(%s, %s, 'ab')\n", p, op.Data.python())
		case OpTruncate:
			fmt.Fprintf(&b, "os.truncate(%s, %d)\n", p, op.Size)
		case OpPatch:
			fmt.Fprintf(&b, "patch(%s, %d, %s)\n", p, op.Size, op.Data.python())
			if !op.MTime.IsZero() {
				ns := op.MTime.UnixNano()
				fmt.Fprintf(&b, "os.utime(%s, ns=(%d, %d), follow_symlinks=False)\n", p, ns, ns)
			}
		case OpRemove:
			fmt.Fprintf(&b, "os.remove(%s)\n", p)
		case OpMkdir:
			fmt.Fprintf(&b, "os.mkdir(%s)\n", p)
		case OpRmdir:
			fmt.Fprintf(&b, "os.rmdir(%s)\n", p)
		case OpRmtree:
			fmt.Fprintf(&b, "rmtree(%s)\n", p)
		case OpRename:
			fmt.Fprintf(&b, "os.rename(%s, %s)\n", p, to)
		case OpRenameDir:
			fmt.Fprintf(&b, "mvdir(%s, %s)\n", p, to)
		case OpFileToDir:
			fmt.Fprintf(&b, "os.remove(%s)\nos.mkdir(%s)\n", p, p)
		case OpDirToFile:
			fmt.Fprintf(&b, "rmtree(%s)\nput(%s, %s, 'xb')\n", p, p, op.Data.python())
		case OpSymlink:
			fmt.Fprintf(&b, "os.symlink(%s, %s)\n", pyStr(op.Target), p)
		case OpReplaceSymlink:
			fmt.Fprintf(&b, "os.remove(%s)\nos.symlink(%s, %s)\n", p, pyStr(op.Target), p)
		case OpLink:
			fmt.Fprintf(&b, "os.link(%s, %s)\n", p, to)
		case OpChmod:
			fmt.Fprintf(&b, "os.chmod(%s, 0o%o)\n", p, op.Mode)
		case OpUtime:
			ns := op.MTime.UnixNano()
			fmt.Fprintf(&b, "os.utime(%s, ns=(%d, %d), follow_symlinks=False)\n", p, ns, ns)
		case OpSetxattr:
			fmt.Fprintf(&b, "os.setxattr(%s, %s, %s)\n", p, pyStr(op.Name), pyBytes([]byte(op.Value)))
		case OpRemovexattr:
			fmt.Fprintf(&b, "os.removexattr(%s, %s)\n", p, pyStr(op.Name))
		default:
			panic(fmt.Sprintf("fsops: unknown op %d", op.Kind))
		}
	}
	return b.String()
}

// pyPrelude defines the helpers scripts use. They do what shutil does
// (shutil.rmtree; shutil.copytree with symlinks=True and copy2, minus
// non-user xattrs) with the os module alone: importing shutil would
// double Python's start-up time, paid twice per test case.
const pyPrelude = `import os, stat
os.umask(0o022)
def put(p, d, m):
    with open(p, m) as f:
        f.write(d)
def patch(p, off, d):
    with open(p, 'r+b') as f:
        f.seek(off)
        f.write(d)
def rmtree(p):
    for e in os.scandir(p):
        if e.is_dir(follow_symlinks=False):
            rmtree(e.path)
        else:
            os.remove(e.path)
    os.rmdir(p)
def copymeta(s, d):
    st = os.lstat(s)
    for n in os.listxattr(s, follow_symlinks=False):
        if n.startswith('user.'):
            os.setxattr(d, n, os.getxattr(s, n, follow_symlinks=False), follow_symlinks=False)
    if not stat.S_ISLNK(st.st_mode):
        os.chmod(d, stat.S_IMODE(st.st_mode))
    os.utime(d, ns=(st.st_atime_ns, st.st_mtime_ns), follow_symlinks=False)
def copytree(s, d):
    os.mkdir(d)
    for e in os.scandir(s):
        t = os.path.join(d, e.name)
        if e.is_symlink():
            os.symlink(os.readlink(e.path), t)
        elif e.is_dir(follow_symlinks=False):
            copytree(e.path, t)
            continue
        else:
            with open(e.path, 'rb') as f, open(t, 'xb') as g:
                g.write(f.read())
        copymeta(e.path, t)
    copymeta(s, d)
def mvdir(s, d):
    # A directory rename as copy and delete: overlayfs refuses to rename
    # a lower directory (EXDEV) without redirect_dir.
    copytree(s, d)
    rmtree(s)
`

// pyStr is a Python str literal for s.
func pyStr(s string) string {
	var b strings.Builder
	b.WriteByte('\'')
	for _, r := range s {
		switch {
		case r == '\\' || r == '\'':
			b.WriteByte('\\')
			b.WriteRune(r)
		case r < 0x20 || r == 0x7f:
			fmt.Fprintf(&b, "\\x%02x", r)
		default:
			b.WriteRune(r)
		}
	}
	b.WriteByte('\'')
	return b.String()
}

// pyBytes is a Python bytes literal for p.
func pyBytes(p []byte) string {
	var b strings.Builder
	b.WriteString("b'")
	for _, c := range p {
		switch {
		case c == '\\' || c == '\'':
			b.WriteByte('\\')
			b.WriteByte(c)
		case c < 0x20 || c >= 0x7f:
			fmt.Fprintf(&b, "\\x%02x", c)
		default:
			b.WriteByte(c)
		}
	}
	b.WriteByte('\'')
	return b.String()
}

// The model.

type node struct {
	typ    Type
	ino    *inode // files and directories
	target string // symlinks
	kids   map[string]*node
}

// inode is what hard links share.
type inode struct {
	mode   fs.FileMode
	data   []byte
	xattrs map[string]string
	links  int
	// fresh marks a file created or fully rewritten by the script: only
	// those may be hard-linked (see the package comment).
	fresh bool
}

type model struct{ root *node }

// item is a model entry with its path.
type item struct {
	path  string
	n     *node
	depth int
}

func join(dir, name string) string {
	if dir == "." {
		return name
	}
	return dir + "/" + name
}

func sortedNames(n *node) []string {
	names := make([]string, 0, len(n.kids))
	for name := range n.kids {
		names = append(names, name)
	}
	sort.Strings(names)
	return names
}

// items lists the tree in walk order: depth first, names sorted.
func (m *model) items() []item {
	var out []item
	var walk func(p string, n *node, depth int)
	walk = func(p string, n *node, depth int) {
		out = append(out, item{p, n, depth})
		if n.typ == Dir {
			for _, name := range sortedNames(n) {
				walk(join(p, name), n.kids[name], depth+1)
			}
		}
	}
	walk(".", m.root, 0)
	return out
}

// entries describes the tree in walk order.
func (m *model) entries() []Entry {
	first := map[*inode]string{}
	var out []Entry
	for _, it := range m.items() {
		e := Entry{Path: it.path, Type: it.n.typ}
		switch it.n.typ {
		case File:
			e.Mode = it.n.ino.mode
			e.Data = bytes.Clone(it.n.ino.data)
			e.Xattrs = cloneXattrs(it.n.ino.xattrs)
			if f, ok := first[it.n.ino]; ok {
				e.Link = f
			} else {
				first[it.n.ino] = it.path
			}
		case Dir:
			e.Mode = it.n.ino.mode
			e.Xattrs = cloneXattrs(it.n.ino.xattrs)
		case Symlink:
			e.Target = it.n.target
		}
		out = append(out, e)
	}
	return out
}

func cloneXattrs(x map[string]string) map[string]string {
	if len(x) == 0 {
		return nil
	}
	out := make(map[string]string, len(x))
	for k, v := range x {
		out[k] = v
	}
	return out
}

// lookup returns the node at p, or nil. p never passes through a
// symlink, since only directories have children.
func (m *model) lookup(p string) *node {
	n := m.root
	if p == "." {
		return n
	}
	for _, name := range strings.Split(p, "/") {
		if n.typ != Dir {
			return nil
		}
		if n = n.kids[name]; n == nil {
			return nil
		}
	}
	return n
}

func (m *model) parent(p string) (*node, string) {
	i := strings.LastIndexByte(p, '/')
	if i < 0 {
		return m.root, p
	}
	return m.lookup(p[:i]), p[i+1:]
}

func newFile(data []byte, mode fs.FileMode, fresh bool) *node {
	return &node{typ: File, ino: &inode{mode: mode, data: data, links: 1, fresh: fresh}}
}

func newDir(mode fs.FileMode) *node {
	return &node{typ: Dir, ino: &inode{mode: mode}, kids: map[string]*node{}}
}

func (m *model) put(p string, n *node) {
	dir, name := m.parent(p)
	dir.kids[name] = n
}

// remove unlinks p (a whole tree for a directory).
func (m *model) remove(p string) {
	dir, name := m.parent(p)
	unlinkTree(dir.kids[name])
	delete(dir.kids, name)
}

func unlinkTree(n *node) {
	switch n.typ {
	case File:
		n.ino.links--
	case Dir:
		for _, k := range n.kids {
			unlinkTree(k)
		}
	}
}

// copyTree is what the script's copytree makes of n: new inodes with the
// same content, mode and xattrs (hard links are not kept), symlinks
// copied as symlinks.
func copyTree(n *node) *node {
	switch n.typ {
	case File:
		c := newFile(bytes.Clone(n.ino.data), n.ino.mode, true)
		c.ino.xattrs = cloneXattrs(n.ino.xattrs)
		return c
	case Dir:
		c := newDir(n.ino.mode)
		c.ino.xattrs = cloneXattrs(n.ino.xattrs)
		for name, k := range n.kids {
			c.kids[name] = copyTree(k)
		}
		return c
	}
	return &node{typ: Symlink, target: n.target}
}

// height is how many levels lie below n.
func height(n *node) int {
	h := 0
	if n.typ == Dir {
		for _, k := range n.kids {
			h = max(h, height(k)+1)
		}
	}
	return h
}

// fixtureModel builds the initial tree for seed.
func fixtureModel(seed int64) *model {
	r := rand.New(rand.NewPCG(uint64(seed), 1))
	m := &model{root: newDir(DirModes[r.IntN(len(DirModes))])}
	count := 6 + r.IntN(15)
	for range count {
		var slots []string
		for _, it := range m.items() {
			if it.n.typ != Dir || it.depth >= MaxDepth {
				continue
			}
			for _, name := range Names {
				if it.n.kids[name] == nil {
					slots = append(slots, join(it.path, name))
				}
			}
		}
		if len(slots) == 0 {
			break
		}
		p := slots[r.IntN(len(slots))]
		switch k := r.IntN(10); {
		case k < 6:
			f := newFile(randData(r).Bytes(), FileModes[r.IntN(len(FileModes))], false)
			if r.IntN(3) == 0 {
				f.ino.xattrs = map[string]string{XattrNames[r.IntN(len(XattrNames))]: randValue(r)}
			}
			m.put(p, f)
		case k < 9:
			d := newDir(DirModes[r.IntN(len(DirModes))])
			if r.IntN(4) == 0 {
				d.ino.xattrs = map[string]string{XattrNames[r.IntN(len(XattrNames))]: randValue(r)}
			}
			m.put(p, d)
		default:
			m.put(p, &node{typ: Symlink, target: randTarget(r)})
		}
	}
	return m
}

func randData(r *rand.Rand) Data {
	const alphabet = "abcdefghijklmnop \n\x00\xff"
	chunk := func(n int) []byte {
		b := make([]byte, n)
		for i := range b {
			b[i] = alphabet[r.IntN(len(alphabet))]
		}
		return b
	}
	if r.IntN(25) == 0 {
		// Larger than one 64 KiB read, sometimes.
		return Data{Chunk: chunk(3 + r.IntN(5)), Repeat: 1000 + r.IntN(20000)}
	}
	return Data{Chunk: chunk(r.IntN(30)), Repeat: 1}
}

func randValue(r *rand.Rand) string {
	const alphabet = "xyz0123456789-"
	b := make([]byte, r.IntN(12))
	for i := range b {
		b[i] = alphabet[r.IntN(len(alphabet))]
	}
	return string(b)
}

func randTarget(r *rand.Rand) string {
	parts := make([]string, 1+r.IntN(3))
	for i := range parts {
		if r.IntN(4) == 0 {
			parts[i] = ".."
		} else {
			parts[i] = Names[r.IntN(len(Names))]
		}
	}
	return strings.Join(parts, "/")
}

// The generator.

type gen struct {
	r   *rand.Rand
	m   *model
	ops []Op
}

type step struct {
	weight int
	do     func()
}

func (g *gen) steps() []step {
	return []step{
		{10, g.create},
		{6, g.overwrite},
		{4, g.appendData},
		{3, g.truncate},
		{4, g.patch},
		{5, g.removeFile},
		{5, g.mkdir},
		{3, g.rmdir},
		{2, g.rmtree},
		{6, g.rename},
		{3, g.renameDir},
		{2, g.fileToDir},
		{2, g.dirToFile},
		{4, g.symlink},
		{3, g.replaceSymlink},
		{5, g.link},
		{4, g.chmod},
		{4, g.utime},
		{4, g.setxattr},
		{3, g.removexattr},
	}
}

func (g *gen) emit(op Op) { g.ops = append(g.ops, op) }

// pick returns a random item that satisfies ok, or false.
func (g *gen) pick(ok func(item) bool) (item, bool) {
	var cands []item
	for _, it := range g.m.items() {
		if ok(it) {
			cands = append(cands, it)
		}
	}
	if len(cands) == 0 {
		return item{}, false
	}
	return cands[g.r.IntN(len(cands))], true
}

// freeSlots lists absent paths whose parent is a directory, with at most
// maxDepth components and not below avoid (if set).
func (g *gen) freeSlots(maxDepth int, avoid string) []string {
	var out []string
	for _, it := range g.m.items() {
		if it.n.typ != Dir || it.depth+1 > maxDepth {
			continue
		}
		if avoid != "" && (it.path == avoid || strings.HasPrefix(it.path, avoid+"/")) {
			continue
		}
		for _, name := range Names {
			if it.n.kids[name] == nil {
				out = append(out, join(it.path, name))
			}
		}
	}
	return out
}

func (g *gen) freeSlot(maxDepth int, avoid string) (string, bool) {
	s := g.freeSlots(maxDepth, avoid)
	if len(s) == 0 {
		return "", false
	}
	return s[g.r.IntN(len(s))], true
}

func isFile(it item) bool   { return it.n.typ == File }
func isNonDir(it item) bool { return it.n.typ != Dir }
func isSubdir(it item) bool { return it.n.typ == Dir && it.path != "." }
func hasInode(it item) bool { return it.n.typ != Symlink }

func (g *gen) create() {
	p, ok := g.freeSlot(MaxDepth, "")
	if !ok {
		return
	}
	d := randData(g.r)
	g.m.put(p, newFile(d.Bytes(), 0o644, true))
	g.emit(Op{Kind: OpCreate, Path: p, Data: d})
}

func (g *gen) overwrite() {
	it, ok := g.pick(isFile)
	if !ok {
		return
	}
	d := randData(g.r)
	it.n.ino.data = d.Bytes()
	it.n.ino.fresh = true
	g.emit(Op{Kind: OpOverwrite, Path: it.path, Data: d})
}

func (g *gen) appendData() {
	it, ok := g.pick(isFile)
	if !ok {
		return
	}
	d := randData(g.r)
	it.n.ino.data = append(it.n.ino.data, d.Bytes()...)
	g.emit(Op{Kind: OpAppend, Path: it.path, Data: d})
}

func (g *gen) truncate() {
	it, ok := g.pick(isFile)
	if !ok {
		return
	}
	size := g.r.IntN(len(it.n.ino.data) + 8)
	data := it.n.ino.data
	if size <= len(data) {
		data = data[:size:size]
	} else {
		data = append(data, make([]byte, size-len(data))...)
	}
	it.n.ino.data = data
	g.emit(Op{Kind: OpTruncate, Path: it.path, Size: int64(size)})
}

func (g *gen) patch() {
	it, ok := g.pick(isFile)
	if !ok {
		return
	}
	data := it.n.ino.data
	off := g.r.IntN(len(data) + 1)
	d := randData(g.r)
	if d.Repeat == 1 && g.r.IntN(3) > 0 {
		// Mostly within the file, so that its size stays.
		d.Chunk = d.Chunk[:min(len(d.Chunk), len(data)-off)]
	}
	b := d.Bytes()
	if end := off + len(b); end > len(data) {
		data = append(data, make([]byte, end-len(data))...)
	}
	copy(data[off:], b)
	it.n.ino.data = data
	op := Op{Kind: OpPatch, Path: it.path, Size: int64(off), Data: d}
	if g.r.IntN(2) == 0 {
		op.MTime = testutil.FixtureTime
	}
	g.emit(op)
}

func (g *gen) removeFile() {
	it, ok := g.pick(isNonDir)
	if !ok {
		return
	}
	g.m.remove(it.path)
	g.emit(Op{Kind: OpRemove, Path: it.path})
}

func (g *gen) mkdir() {
	p, ok := g.freeSlot(MaxDepth, "")
	if !ok {
		return
	}
	g.m.put(p, newDir(0o755))
	g.emit(Op{Kind: OpMkdir, Path: p})
}

func (g *gen) rmdir() {
	it, ok := g.pick(func(it item) bool { return isSubdir(it) && len(it.n.kids) == 0 })
	if !ok {
		return
	}
	g.m.remove(it.path)
	g.emit(Op{Kind: OpRmdir, Path: it.path})
}

func (g *gen) rmtree() {
	it, ok := g.pick(func(it item) bool { return isSubdir(it) && len(it.n.kids) > 0 })
	if !ok {
		return
	}
	g.m.remove(it.path)
	g.emit(Op{Kind: OpRmtree, Path: it.path})
}

func (g *gen) rename() {
	src, ok := g.pick(isNonDir)
	if !ok {
		return
	}
	dsts := g.freeSlots(MaxDepth, "")
	for _, it := range g.m.items() {
		// Not onto another link of the same inode, where rename(2)
		// does nothing: overlayfs (index=off) fails it with ESTALE
		// when the inode was copied up from the lower layer.
		if it.n.typ != Dir && it.path != src.path && (it.n.typ != File || it.n.ino != src.n.ino) {
			dsts = append(dsts, it.path)
		}
	}
	if len(dsts) == 0 {
		return
	}
	dst := dsts[g.r.IntN(len(dsts))]
	g.emit(Op{Kind: OpRename, Path: src.path, To: dst})
	if g.m.lookup(dst) != nil {
		g.m.remove(dst)
	}
	dir, name := g.m.parent(src.path)
	delete(dir.kids, name)
	g.m.put(dst, src.n)
}

func (g *gen) renameDir() {
	src, ok := g.pick(isSubdir)
	if !ok {
		return
	}
	dst, ok := g.freeSlot(MaxDepth-height(src.n), src.path)
	if !ok {
		return
	}
	c := copyTree(src.n)
	g.m.put(dst, c)
	g.m.remove(src.path)
	g.emit(Op{Kind: OpRenameDir, Path: src.path, To: dst})
}

func (g *gen) fileToDir() {
	it, ok := g.pick(isNonDir)
	if !ok {
		return
	}
	g.m.remove(it.path)
	g.m.put(it.path, newDir(0o755))
	g.emit(Op{Kind: OpFileToDir, Path: it.path})
}

func (g *gen) dirToFile() {
	it, ok := g.pick(isSubdir)
	if !ok {
		return
	}
	d := randData(g.r)
	g.m.remove(it.path)
	g.m.put(it.path, newFile(d.Bytes(), 0o644, true))
	g.emit(Op{Kind: OpDirToFile, Path: it.path, Data: d})
}

func (g *gen) symlink() {
	p, ok := g.freeSlot(MaxDepth, "")
	if !ok {
		return
	}
	t := randTarget(g.r)
	g.m.put(p, &node{typ: Symlink, target: t})
	g.emit(Op{Kind: OpSymlink, Path: p, Target: t})
}

func (g *gen) replaceSymlink() {
	it, ok := g.pick(isNonDir)
	if !ok {
		return
	}
	t := randTarget(g.r)
	g.m.remove(it.path)
	g.m.put(it.path, &node{typ: Symlink, target: t})
	g.emit(Op{Kind: OpReplaceSymlink, Path: it.path, Target: t})
}

func (g *gen) link() {
	src, ok := g.pick(func(it item) bool { return isFile(it) && it.n.ino.fresh })
	if !ok {
		return
	}
	dst, ok := g.freeSlot(MaxDepth, "")
	if !ok {
		return
	}
	src.n.ino.links++
	g.m.put(dst, &node{typ: File, ino: src.n.ino})
	g.emit(Op{Kind: OpLink, Path: src.path, To: dst})
}

func (g *gen) chmod() {
	it, ok := g.pick(hasInode)
	if !ok {
		return
	}
	modes := FileModes
	if it.n.typ == Dir {
		modes = DirModes
	}
	mode := modes[g.r.IntN(len(modes))]
	it.n.ino.mode = mode
	g.emit(Op{Kind: OpChmod, Path: it.path, Mode: mode})
}

func (g *gen) utime() {
	it, ok := g.pick(func(item) bool { return true })
	if !ok {
		return
	}
	// Times in 2001, up to the fixtures' own: snapshots compare those.
	// Exactly the fixture time, sometimes, so that a changed file of the
	// same size looks unchanged by size and mtime.
	t := testutil.FixtureTime
	if g.r.IntN(3) > 0 {
		start := time.Date(2001, 1, 1, 0, 0, 0, 0, time.UTC)
		t = start.Add(time.Duration(g.r.Int64N(int64(testutil.FixtureTime.Sub(start)))))
	}
	g.emit(Op{Kind: OpUtime, Path: it.path, MTime: t})
}

func (g *gen) setxattr() {
	it, ok := g.pick(hasInode)
	if !ok {
		return
	}
	name, value := XattrNames[g.r.IntN(len(XattrNames))], randValue(g.r)
	if it.n.ino.xattrs == nil {
		it.n.ino.xattrs = map[string]string{}
	}
	it.n.ino.xattrs[name] = value
	g.emit(Op{Kind: OpSetxattr, Path: it.path, Name: name, Value: value})
}

func (g *gen) removexattr() {
	it, ok := g.pick(func(it item) bool { return hasInode(it) && len(it.n.ino.xattrs) > 0 })
	if !ok {
		return
	}
	var names []string
	for n := range it.n.ino.xattrs {
		names = append(names, n)
	}
	sort.Strings(names)
	name := names[g.r.IntN(len(names))]
	delete(it.n.ino.xattrs, name)
	g.emit(Op{Kind: OpRemovexattr, Path: it.path, Name: name})
}
