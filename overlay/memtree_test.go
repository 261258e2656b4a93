package overlay

import (
	"fmt"
	"io"
	"io/fs"
	"maps"
	"path"
	"sort"
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// memTree is an in-memory Tree for planner tests: nodes keyed by their
// slash-separated path, "" being the root directory.
type memTree struct {
	nodes map[string]memNode
}

type memNode struct {
	Node
	content string
}

// Times the builders give entries, in nanoseconds since the epoch.
const (
	t0 int64 = 1_000_000_000_000_000_000
	t1 int64 = t0 + 3_600_000_000_000
)

// ReadDir implements Tree.
func (m *memTree) ReadDir(rel string) ([]Node, error) {
	n, ok := m.nodes[rel]
	if !ok {
		return nil, &fs.PathError{Op: "readdir", Path: rel, Err: fs.ErrNotExist}
	}
	if n.Type != TypeDir {
		return nil, &fs.PathError{Op: "readdir", Path: rel, Err: syscall.ENOTDIR}
	}
	var out []Node
	for p, c := range m.nodes {
		if p != "" && parentOf(p) == rel {
			out = append(out, cloneNode(c.Node))
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// Lstat implements Tree.
func (m *memTree) Lstat(rel string) (Node, error) {
	n, ok := m.nodes[rel]
	if !ok {
		return Node{}, &fs.PathError{Op: "lstat", Path: rel, Err: fs.ErrNotExist}
	}
	return cloneNode(n.Node), nil
}

// Open implements Tree.
func (m *memTree) Open(rel string) (io.ReadCloser, error) {
	n, ok := m.nodes[rel]
	if !ok {
		return nil, &fs.PathError{Op: "open", Path: rel, Err: fs.ErrNotExist}
	}
	if n.Type != TypeFile {
		return nil, &fs.PathError{Op: "open", Path: rel, Err: fmt.Errorf("not a regular file but a %s", n.Type)}
	}
	return io.NopCloser(strings.NewReader(n.content)), nil
}

// parentOf is the path of the directory holding rel ("" for the root's
// children).
func parentOf(rel string) string {
	if d := path.Dir(rel); d != "." {
		return d
	}
	return ""
}

func cloneNode(n Node) Node {
	n.Xattrs = maps.Clone(n.Xattrs)
	return n
}

// has reports whether rel is in the tree.
func (m *memTree) has(rel string) bool {
	_, ok := m.nodes[rel]
	return ok
}

// isDir reports whether rel is a directory of the tree.
func (m *memTree) isDir(rel string) bool {
	n, ok := m.nodes[rel]
	return ok && n.Type == TypeDir
}

// put stores n at rel, with its name, size and a fresh inode number filled
// in. The parent must be a directory of the tree.
func (m *memTree) put(rel string, n memNode) {
	if rel != "" && !m.isDir(parentOf(rel)) {
		panic(fmt.Sprintf("memtree: parent of %q is not a directory", rel))
	}
	n.Name = path.Base(rel)
	if rel == "" {
		n.Name = ""
	}
	switch n.Type {
	case TypeFile:
		n.Size = int64(len(n.content))
	case TypeSymlink:
		n.Size = int64(len(n.Target))
	default:
		n.Size = 0
	}
	if n.Ino == 0 {
		n.Ino = uint64(len(m.nodes) + 1)
	}
	if n.Nlink == 0 {
		n.Nlink = 1
	}
	m.nodes[rel] = n
}

// removeTree deletes rel and everything below it.
func (m *memTree) removeTree(rel string) {
	for p := range m.nodes {
		if p == rel || rel == "" || strings.HasPrefix(p, rel+"/") {
			delete(m.nodes, p)
		}
	}
}

// clone returns a deep copy of m.
func (m *memTree) clone() *memTree {
	c := &memTree{nodes: make(map[string]memNode, len(m.nodes))}
	for p, n := range m.nodes {
		n.Node = cloneNode(n.Node)
		c.nodes[p] = n
	}
	return c
}

// paths returns the tree's paths, sorted.
func (m *memTree) paths() []string {
	return sortedKeys(m.nodes)
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// The builder DSL: tree(entries...) with one constructor per kind of entry
// and options for the metadata, e.g.
//
//	tree(
//		file("a.txt", "hello", mode(0o600)),
//		dir("d", mtime(t1)),
//		symlink("d/l", "../a.txt"),
//		whiteout("gone"),
//	)
//
// Missing parent directories are created with the defaults (mode 0755,
// owner 0:0, mtime t0), so an upper "d/x" sits in a copied-up "d" that
// matches a default workspace "d". An entry for "" sets the root's
// metadata.

type memEntry struct {
	rel string
	n   memNode
}

type memOpt func(*memNode)

func mode(m fs.FileMode) memOpt    { return func(n *memNode) { n.Mode = m } }
func owner(uid, gid uint32) memOpt { return func(n *memNode) { n.UID, n.GID = uid, gid } }
func mtime(ns int64) memOpt        { return func(n *memNode) { n.MTime = ns } }
func nlink(k uint64) memOpt        { return func(n *memNode) { n.Nlink = k } }
func ino(i uint64) memOpt          { return func(n *memNode) { n.Ino = i } }
func opaqueFlag() memOpt           { return func(n *memNode) { n.Opaque = true } }
func xattr(name, value string) memOpt {
	return func(n *memNode) {
		if n.Xattrs == nil {
			n.Xattrs = map[string]string{}
		}
		n.Xattrs[name] = value
	}
}

func entry(rel string, t NodeType, m fs.FileMode, opts []memOpt) memEntry {
	e := memEntry{rel: rel, n: memNode{Node: Node{Type: t, Mode: m, MTime: t0}}}
	for _, o := range opts {
		o(&e.n)
	}
	return e
}

func file(rel, content string, opts ...memOpt) memEntry {
	e := entry(rel, TypeFile, 0o644, opts)
	e.n.content = content
	return e
}

func dir(rel string, opts ...memOpt) memEntry { return entry(rel, TypeDir, 0o755, opts) }

// opaque is an upper directory hiding the workspace directory below it.
func opaque(rel string, opts ...memOpt) memEntry {
	return dir(rel, append([]memOpt{opaqueFlag()}, opts...)...)
}

func symlink(rel, target string, opts ...memOpt) memEntry {
	e := entry(rel, TypeSymlink, 0, opts)
	e.n.Target = target
	return e
}

func whiteout(rel string) memEntry { return entry(rel, TypeWhiteout, 0, nil) }

// special is a FIFO, socket or device node.
func special(rel string) memEntry { return entry(rel, TypeSpecial, 0o644, nil) }

// tree builds a memTree from entries, in any order.
func tree(entries ...memEntry) *memTree {
	m := &memTree{nodes: map[string]memNode{}}
	root := dir("").n
	for _, e := range entries {
		if e.rel == "" {
			root = e.n
		}
	}
	m.put("", root)
	sorted := make([]memEntry, 0, len(entries))
	for _, e := range entries {
		if e.rel != "" {
			sorted = append(sorted, e)
		}
	}
	sort.SliceStable(sorted, func(i, j int) bool { return sorted[i].rel < sorted[j].rel })
	for _, e := range sorted {
		m.mkdirAll(parentOf(e.rel))
		if m.has(e.rel) {
			panic(fmt.Sprintf("memtree: %q given twice", e.rel))
		}
		m.put(e.rel, e.n)
	}
	return m
}

// mkdirAll creates rel and its parents as default directories where they
// are missing.
func (m *memTree) mkdirAll(rel string) {
	if m.has(rel) {
		return
	}
	m.mkdirAll(parentOf(rel))
	m.put(rel, dir(rel).n)
}

func TestMemTree(t *testing.T) {
	m := tree(
		file("d/b", "bee", mode(0o600), owner(1, 2), xattr("user.k", "v")),
		symlink("d/a", "b"),
		whiteout("w"),
		dir("", mtime(t1)),
	)
	root, err := m.Lstat("")
	require.NoError(t, err)
	assert.Equal(t, Node{Type: TypeDir, Mode: 0o755, MTime: t1, Ino: 1, Nlink: 1}, root)

	nodes, err := m.ReadDir("d")
	require.NoError(t, err)
	require.Len(t, nodes, 2)
	assert.Equal(t, Node{Name: "a", Type: TypeSymlink, Target: "b", Size: 1, MTime: t0, Ino: nodes[0].Ino, Nlink: 1}, nodes[0])
	assert.Equal(t, Node{Name: "b", Type: TypeFile, Mode: 0o600, UID: 1, GID: 2, Size: 3, MTime: t0,
		Xattrs: map[string]string{"user.k": "v"}, Ino: nodes[1].Ino, Nlink: 1}, nodes[1])
	d, err := m.Lstat("d")
	require.NoError(t, err)
	assert.Equal(t, fs.FileMode(0o755), d.Mode, "a parent made on the way has the defaults")

	top, err := m.ReadDir("")
	require.NoError(t, err)
	assert.Equal(t, []string{"d", "w"}, []string{top[0].Name, top[1].Name})

	r, err := m.Open("d/b")
	require.NoError(t, err)
	b, err := io.ReadAll(r)
	require.NoError(t, err)
	assert.Equal(t, "bee", string(b))

	_, err = m.Lstat("d/missing")
	assert.ErrorIs(t, err, fs.ErrNotExist)
	_, err = m.ReadDir("missing")
	assert.ErrorIs(t, err, fs.ErrNotExist)
	_, err = m.ReadDir("d/b")
	assert.ErrorIs(t, err, syscall.ENOTDIR)
	_, err = m.Open("d/a")
	assert.Error(t, err, "a symlink is not opened")

	nodes[1].Xattrs["user.k"] = "changed"
	again, _ := m.Lstat("d/b")
	assert.Equal(t, "v", again.Xattrs["user.k"], "callers get copies")
}
