package overlay

import (
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"path"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
)

// FuzzPlanCommit plans commits of random upper directories onto random
// workspaces and checks the plan's invariants, and that carrying it out
// gives the workspace overlayfs's merged view.
func FuzzPlanCommit(f *testing.F) {
	for _, s := range planSeeds() {
		f.Add(s)
	}
	f.Fuzz(checkPlanCommit)
}

// TestPlanCommitCorpus runs FuzzPlanCommit's checks over its seed corpus.
func TestPlanCommitCorpus(t *testing.T) {
	for i, s := range planSeeds() {
		t.Run(strconv.Itoa(i), func(t *testing.T) { checkPlanCommit(t, s) })
	}
}

// planSeeds is a fixed corpus: a few edge inputs and inputs from a seeded
// generator.
func planSeeds() [][]byte {
	seeds := [][]byte{
		nil,
		{0},
		{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff},
		[]byte("\x00\x00\x05\x01\x00\x00\x03\x05\x00\x04\x01\x00\x00\x07\x00\x00\x00\x00"),
		[]byte("\x06\x00\x04\x00\x00\x03\x00\x0a\x00\x05\x00\x00\x0a\x00\x00\x0a\x00\x00"),
	}
	// Found by fuzzing: special files whose depth-first order is not
	// their sorted order ("a b/..." is met after "a/...").
	found, err := hex.DecodeString("072e0affdd460a4bc0c8c8ed4ca70b005bd40e295ff28519b2f4c9de0d014077" +
		"9770ed8f2d4f20ee8afdae74f6856b693920ba8afdad9ca2eb6f150e6b45328a" +
		"d185f26bfcae035ac77ab9fa6e0f701c1bd2a7fb86e9df433997dc9eb9c2bdc8db3b05f021221fda87fc69ca5a")
	if err != nil {
		panic(err)
	}
	seeds = append(seeds, found)
	r := rand.New(rand.NewPCG(20261129, 1))
	for range 400 {
		b := make([]byte, 8+r.IntN(120))
		for i := range b {
			b[i] = byte(r.Uint32())
		}
		seeds = append(seeds, b)
	}
	return seeds
}

// fuzzBytes hands out the fuzz input a byte at a time, then zeros.
type fuzzBytes struct{ b []byte }

func (f *fuzzBytes) next() byte {
	if len(f.b) == 0 {
		return 0
	}
	c := f.b[0]
	f.b = f.b[1:]
	return c
}

func (f *fuzzBytes) pick(n int) int { return int(f.next()) % n }

// A small name set, so that upper and workspace paths often meet. "..." is
// a valid name, not a parent reference; "a b" sorts between "a" and "a/x",
// so a depth-first walk does not list paths in sorted order.
var fuzzNames = []string{"a", "b", "c", "...", "a b"}

func (f *fuzzBytes) path() string {
	parts := make([]string, 1+f.pick(3))
	for i := range parts {
		parts[i] = fuzzNames[f.pick(len(fuzzNames))]
	}
	return strings.Join(parts, "/")
}

// attrs gives n random metadata.
func (f *fuzzBytes) attrs(n *memNode) {
	a := f.next()
	switch n.Type {
	case TypeDir:
		n.Mode = []fs.FileMode{0o755, 0o700, 0o775 | fs.ModeSetgid, 0o755}[a&3]
	case TypeSymlink:
		n.Mode = 0
	default:
		n.Mode = []fs.FileMode{0o644, 0o600, 0o755, 0o755 | fs.ModeSetuid}[a&3]
	}
	n.UID = []uint32{0, 1, 100000, 100001}[(a>>2)&3]
	n.GID = n.UID
	n.MTime = []int64{t0, t1}[(a>>4)&1]
	n.Xattrs = []map[string]string{nil, nil, {"user.k": "1"}, {"user.k": "2"}}[(a>>5)&3]
	n.Nlink = 1
	if a>>7 != 0 && n.Type == TypeFile {
		n.Nlink = 2
	}
}

func (f *fuzzBytes) node(t NodeType) memNode {
	n := memNode{Node: Node{Type: t}}
	f.attrs(&n)
	switch t {
	case TypeFile:
		n.content = []string{"", "x", "y", "xx"}[f.pick(4)]
	case TypeSymlink:
		n.Target = []string{"a", "../b", "/etc", "b"}[f.pick(4)]
	case TypeWhiteout:
		n.Mode, n.UID, n.GID, n.Xattrs = 0, 0, 0, nil
	}
	return n
}

// fuzzIDs maps the jail's ids 100000... onto 0... and keeps the others.
func fuzzIDs(uid, gid uint32) (uint32, uint32, error) {
	if uid >= 100000 {
		uid -= 100000
	}
	if gid >= 100000 {
		gid -= 100000
	}
	return uid, gid, nil
}

// decodeFuzzTrees turns fuzz input into a workspace and an upper directory
// with overlay's markers, and the IDMap to commit with.
func decodeFuzzTrees(data []byte) (upper, ws *memTree, ids IDMap) {
	f := &fuzzBytes{b: data}
	h := f.next()
	// With ids translated, a copy-up shows workspace owners as the
	// jail's ids.
	ids, unmap := Identity, func(id uint32) uint32 { return id }
	if h&1 != 0 {
		ids, unmap = fuzzIDs, unmapID
	}
	allowSpecial := h&6 == 6

	ws = &memTree{nodes: map[string]memNode{}}
	ws.put("", f.node(TypeDir))
	for range f.pick(16) {
		p := f.path()
		kind := []NodeType{TypeFile, TypeFile, TypeFile, TypeDir, TypeDir, TypeDir, TypeSymlink, TypeSpecial}[f.pick(8)]
		if ws.has(p) || !mkParents(ws, parentOf(p), nil, nil) {
			continue
		}
		ws.put(p, f.node(kind))
	}

	// The upper root is made like the workspace root (nsjail copies its
	// owner, mode and times), unless the run changed it.
	upper = &memTree{nodes: map[string]memNode{}}
	root := ws.nodes[""]
	root.Ino = 0
	if f.pick(4) == 0 {
		f.attrs(&root)
	}
	upper.put("", root)
	// Half of the upper entries land on a workspace path.
	wsPaths := ws.paths()[1:]
	for range f.pick(16) {
		p := f.path()
		if len(wsPaths) > 0 && f.next()&1 == 0 {
			p = wsPaths[f.pick(len(wsPaths))]
		}
		k := f.pick(16)
		if upper.has(p) || !mkParents(upper, parentOf(p), ws, unmap) {
			continue
		}
		var n memNode
		switch {
		case k <= 2:
			n = f.node(TypeFile)
		case k <= 4:
			n = f.node(TypeDir)
		case k == 5:
			n = f.node(TypeDir)
			n.Opaque = true
		case k == 6 && ws.isDir(p):
			// rm -rf p && cp -a saved p: the workspace directory
			// made again, some children left out or changed.
			recreate(upper, ws, p, f, unmap, allowSpecial)
			continue
		case k <= 7:
			n = f.node(TypeSymlink)
		case k <= 9:
			n = f.node(TypeWhiteout)
		case k == 10:
			if !allowSpecial {
				continue
			}
			n = f.node(TypeSpecial)
		default:
			// A copy-up: the workspace entry as it is, or with one
			// thing changed.
			w, ok := ws.nodes[p]
			if !ok || (w.Type == TypeSpecial && !allowSpecial) {
				continue
			}
			n = w
			n.Node = cloneNode(w.Node)
			n.Ino, n.Nlink = 0, 1
			n.UID, n.GID = unmap(n.UID), unmap(n.GID)
			if k >= 13 {
				tweak(&n, f.pick(6))
			}
		}
		upper.put(p, n)
	}
	return upper, ws, ids
}

// recreate puts into upper an opaque copy of the workspace directory rel
// and its children, some left out, some with one thing changed.
func recreate(upper, ws *memTree, rel string, f *fuzzBytes, unmap func(uint32) uint32, allowSpecial bool) {
	for _, p := range ws.paths() {
		if p != rel && !below(p, rel) {
			continue
		}
		w := ws.nodes[p]
		b := f.next()
		if p != rel && (b%4 == 0 || !upper.isDir(parentOf(p)) || (w.Type == TypeSpecial && !allowSpecial)) {
			continue
		}
		n := w
		n.Node = cloneNode(w.Node)
		n.Ino, n.Nlink = 0, 1
		n.UID, n.GID = unmap(n.UID), unmap(n.GID)
		n.Opaque = p == rel
		if b%4 == 1 {
			tweak(&n, int(b>>2)%6)
		}
		upper.put(p, n)
	}
}

// tweak changes one thing of a copied-up entry: mtime, same-size content,
// mode, an xattr, the owner or the hard-link count.
func tweak(n *memNode, what int) {
	switch what {
	case 0:
		n.MTime ^= t0 ^ t1
	case 1:
		if n.Type == TypeFile {
			n.content = strings.Map(func(r rune) rune { return r ^ 1 }, n.content)
		} else {
			n.MTime ^= t0 ^ t1
		}
	case 2:
		n.Mode ^= 0o020
	case 3:
		n.Xattrs = map[string]string{"user.k": "3"}
	case 4:
		n.UID++
	case 5:
		n.Nlink = 2
	}
}

// unmapID is the inverse of fuzzIDs for ids the jail maps: what a copy-up
// in the jail shows on the host.
func unmapID(id uint32) uint32 {
	if id < 100000 {
		return id + 100000
	}
	return id
}

// mkParents makes sure rel is a directory of t, creating the missing ones:
// copies of the workspace's directories where like (the workspace) has
// them (a copy-up, owners shown through unmap), defaults otherwise. It fails where a non-directory is
// in the way.
func mkParents(t *memTree, rel string, like *memTree, unmap func(uint32) uint32) bool {
	if t.isDir(rel) {
		return true
	}
	if t.has(rel) || !mkParents(t, parentOf(rel), like, unmap) {
		return false
	}
	n := dir(rel).n
	if like != nil && like.isDir(rel) {
		n = like.nodes[rel]
		n.Node = cloneNode(n.Node)
		n.Ino = 0
		n.UID, n.GID = unmap(n.UID), unmap(n.GID)
	}
	t.put(rel, n)
	return true
}

func dumpTree(m *memTree) string {
	var b strings.Builder
	for _, p := range m.paths() {
		n := m.nodes[p]
		fmt.Fprintf(&b, "  %q %s opaque=%v nlink=%d %s\n", p, n.Type, n.Opaque, n.Nlink, describeNode(n))
	}
	return b.String()
}

// describeNode is what a commit must carry over for n.
func describeNode(n memNode) string {
	return fmt.Sprintf("%s mode=%v owner=%d:%d mtime=%d target=%q xattrs=%v content=%q",
		n.Type, n.Mode, n.UID, n.GID, n.MTime, n.Target, n.Xattrs, n.content)
}

func checkPlanCommit(t *testing.T, data []byte) {
	upper, ws, ids := decodeFuzzTrees(data)
	ctx := func() string {
		return fmt.Sprintf("\nupper:\n%sworkspace:\n%s", dumpTree(upper), dumpTree(ws))
	}
	p, err := PlanCommit(upper, ws, ids)

	var specials []string
	for _, rel := range upper.paths() {
		if upper.nodes[rel].Type == TypeSpecial {
			specials = append(specials, rel)
		}
	}
	if len(specials) > 0 {
		var re *RefusedError
		if !errors.As(err, &re) || !errors.Is(err, ErrRefused) {
			t.Fatalf("upper has special files %q, want a RefusedError, got %v%s", specials, err, ctx())
		}
		if p != nil {
			t.Fatalf("a plan along with %v", err)
		}
		if !slices.Equal(re.Paths, specials) {
			t.Fatalf("refused %q, want every special file: %q%s", re.Paths, specials, ctx())
		}
		return
	}
	if err != nil {
		t.Fatalf("PlanCommit: %v%s", err, ctx())
	}
	ops := opStrings(p.Ops)
	fail := func(format string, args ...any) {
		t.Helper()
		t.Fatalf(format+"\nops: %q\nchanges: %+v%s", append(args, ops, p.Changes, ctx())...)
	}
	checkOps(p, upper, ws, fail)
	checkChanges(p, upper, ws, fail)

	// Carrying the plan out gives what the run saw through overlay.
	got, err := applyModel(p, upper, ws, ids)
	if err != nil {
		fail("apply: %v", err)
	}
	want := mergedView(upper, ws, ids)
	if d := diffTrees(want, got); d != "" {
		fail("workspace after commit differs from the merged view (-want +got):\n%s", d)
	}
	checkChangesComplete(p, upper, ws, got, fail)
}

func validPath(p string) bool {
	if p == "" {
		return true // the root, for OpSetMeta
	}
	if path.IsAbs(p) || path.Clean(p) != p {
		return false
	}
	for _, e := range strings.Split(p, "/") {
		if e == ".." || e == "." || e == "" {
			return false
		}
	}
	return true
}

// below reports whether p is strictly inside the directory d.
func below(p, d string) bool {
	if d == "" {
		return p != ""
	}
	return strings.HasPrefix(p, d+"/")
}

func checkOps(p *Plan, upper, ws *memTree, fail func(string, ...any)) {
	seen := map[string]bool{}
	for i, op := range p.Ops {
		if !validPath(op.Path) {
			fail("op %d: bad path %q", i, op.Path)
		}
		key := op.Kind.String() + " " + op.Path
		if seen[key] {
			fail("op %d: %s twice", i, key)
		}
		seen[key] = true
		switch op.Kind {
		case OpRemove:
			if op.Path == "" || !ws.has(op.Path) {
				fail("op %d: remove %q, not in the workspace", i, op.Path)
			}
		case OpPlace:
			u, ok := upper.nodes[op.Path]
			if op.Path == "" || !ok || u.Type == TypeWhiteout {
				fail("op %d: place %q, not an upper entry", i, op.Path)
			}
		case OpSetMeta:
			if !upper.isDir(op.Path) || !ws.isDir(op.Path) {
				fail("op %d: setmeta %q, not a directory on both sides", i, op.Path)
			}
			if op.Meta == nil || op.Meta.Type != TypeDir {
				fail("op %d: setmeta %q without directory metadata", i, op.Path)
			}
			for j, later := range p.Ops[i+1:] {
				if below(later.Path, op.Path) {
					fail("op %d: setmeta %q before op %d on %q below it", i, op.Path, i+1+j, later.Path)
				}
			}
		default:
			fail("op %d: unknown kind %d", i, op.Kind)
		}
		// Remove and Place act on whole trees: nothing below them
		// is planned separately.
		if op.Kind != OpSetMeta {
			for j, other := range p.Ops {
				if below(other.Path, op.Path) {
					fail("op %d on %q lies below op %d, %s %q", j, other.Path, i, op.Kind, op.Path)
				}
			}
		}
	}
}

func checkChanges(p *Plan, upper, ws *memTree, fail func(string, ...any)) {
	lists := []struct {
		name string
		cs   []Change
	}{{"added", p.Changes.Added}, {"modified", p.Changes.Modified}, {"deleted", p.Changes.Deleted}}
	inList := map[string]string{}
	for _, l := range lists {
		if !sort.SliceIsSorted(l.cs, func(i, j int) bool { return l.cs[i].Path < l.cs[j].Path }) {
			fail("%s not sorted", l.name)
		}
		for _, c := range l.cs {
			if c.Path == "" || !validPath(c.Path) {
				fail("%s: bad path %q", l.name, c.Path)
			}
			if other, dup := inList[c.Path]; dup {
				fail("%q listed in %s and %s", c.Path, other, l.name)
			}
			inList[c.Path] = l.name
			u, inUpper := upper.nodes[c.Path]
			w, inWS := ws.nodes[c.Path]
			switch l.name {
			case "added":
				if inWS {
					fail("added %q is in the workspace", c.Path)
				}
				if !inUpper || c.Type != u.Type.String() {
					fail("added %q (%s) is no such upper entry", c.Path, c.Type)
				}
			case "modified":
				if !inWS || !inUpper || c.Type != u.Type.String() {
					fail("modified %q (%s) must be in both trees, with the upper type", c.Path, c.Type)
				}
			case "deleted":
				if !inWS || c.Type != w.Type.String() {
					fail("deleted %q (%s) is no such workspace entry", c.Path, c.Type)
				}
			}
		}
	}
}

// checkChangesComplete compares the change list with what the commit did
// to the workspace: got is the workspace after the commit.
func checkChangesComplete(p *Plan, upper, ws, got *memTree, fail func(string, ...any)) {
	paths := func(cs []Change) []string {
		out := []string{}
		for _, c := range cs {
			out = append(out, c.Path)
		}
		return out
	}
	var added, deleted []string
	for _, rel := range got.paths() {
		if !ws.has(rel) {
			added = append(added, rel)
		}
	}
	for _, rel := range ws.paths() {
		if !got.has(rel) {
			deleted = append(deleted, rel)
		}
	}
	if !slices.Equal(paths(p.Changes.Added), added) {
		fail("added lists %q, the commit adds %q", paths(p.Changes.Added), added)
	}
	if !slices.Equal(paths(p.Changes.Deleted), deleted) {
		fail("deleted lists %q, the commit deletes %q", paths(p.Changes.Deleted), deleted)
	}
	modified := map[string]bool{}
	for _, c := range p.Changes.Modified {
		modified[c.Path] = true
	}
	for _, rel := range ws.paths() {
		a, ok := got.nodes[rel]
		if !ok || rel == "" {
			continue
		}
		b := ws.nodes[rel]
		a.MTime, b.MTime = 0, 0
		metaDiff := describeNode(a) != describeNode(b)
		mtimeDiff := got.nodes[rel].MTime != ws.nodes[rel].MTime
		isDir := a.Type == TypeDir && b.Type == TypeDir
		// A directory's mtime follows from its children: it alone
		// need not be listed, unless nothing below it changed (touch).
		touched := isDir && !changesBelow(p, rel)
		if (metaDiff || (mtimeDiff && (!isDir || touched))) && !modified[rel] {
			fail("%q changed but is not listed as modified", rel)
		}
		// A hard-linked upper file is placed (and listed) even when
		// it equals the workspace's.
		if modified[rel] && !metaDiff && !mtimeDiff && upper.nodes[rel].Nlink <= 1 {
			fail("%q listed as modified but unchanged", rel)
		}
	}
}

func changesBelow(p *Plan, rel string) bool {
	for _, l := range [][]Change{p.Changes.Added, p.Changes.Modified, p.Changes.Deleted} {
		for _, c := range l {
			if below(c.Path, rel) {
				return true
			}
		}
	}
	return false
}

// applyModel carries p out on a copy of ws, as Apply does on disk.
func applyModel(p *Plan, upper, ws *memTree, ids IDMap) (*memTree, error) {
	out := ws.clone()
	for _, op := range p.Ops {
		switch op.Kind {
		case OpRemove:
			if !out.has(op.Path) {
				return nil, fmt.Errorf("remove %q: not there", op.Path)
			}
			out.removeTree(op.Path)
		case OpPlace:
			if out.isDir(op.Path) {
				return nil, fmt.Errorf("place %q: rename(2) cannot replace a directory", op.Path)
			}
			if !out.isDir(parentOf(op.Path)) {
				return nil, fmt.Errorf("place %q: no parent directory", op.Path)
			}
			out.removeTree(op.Path)
			if err := copyUpper(out, upper, op.Path, ids); err != nil {
				return nil, err
			}
		case OpSetMeta:
			n, ok := out.nodes[op.Path]
			if !ok || n.Type != TypeDir {
				return nil, fmt.Errorf("setmeta %q: no directory", op.Path)
			}
			n.Mode, n.UID, n.GID, n.MTime = op.Meta.Mode, op.Meta.UID, op.Meta.GID, op.Meta.MTime
			n.Xattrs = cloneNode(*op.Meta).Xattrs
			out.nodes[op.Path] = n
		}
	}
	return out, nil
}

// copyUpper copies the upper entry rel and everything below it into out,
// leaving whiteouts behind, with owners translated.
func copyUpper(out, upper *memTree, rel string, ids IDMap) error {
	n := upper.nodes[rel]
	switch n.Type {
	case TypeWhiteout:
		return fmt.Errorf("copy %q: a whiteout", rel)
	case TypeSpecial:
		return fmt.Errorf("copy %q: a special file", rel)
	}
	n.Node = cloneNode(n.Node)
	n.UID, n.GID, _ = ids(n.UID, n.GID)
	out.nodes[rel] = n
	if n.Type != TypeDir {
		return nil
	}
	children, _ := upper.ReadDir(rel)
	for _, c := range children {
		if c.Type == TypeWhiteout {
			continue
		}
		if err := copyUpper(out, upper, path.Join(rel, c.Name), ids); err != nil {
			return err
		}
	}
	return nil
}

// mergedView is the tree overlayfs shows for upper over ws
// (Documentation/filesystems/overlayfs.rst).
func mergedView(upper, ws *memTree, ids IDMap) *memTree {
	out := ws.clone()
	mergeInto(out, upper, "", ids)
	return out
}

func mergeInto(out, upper *memTree, rel string, ids IDMap) {
	u := upper.nodes[rel]
	u.Node = cloneNode(u.Node)
	u.UID, u.GID, _ = ids(u.UID, u.GID)
	out.nodes[rel] = u
	children, _ := upper.ReadDir(rel)
	for _, c := range children {
		crel := path.Join(rel, c.Name)
		switch {
		case c.Type == TypeWhiteout:
			out.removeTree(crel)
		case c.Type == TypeDir && !c.Opaque && out.isDir(crel):
			mergeInto(out, upper, crel, ids)
		default:
			out.removeTree(crel)
			_ = copyUpper(out, upper, crel, ids)
		}
	}
}

// diffTrees lists the entries where a and b differ, "" if none.
func diffTrees(a, b *memTree) string {
	var d strings.Builder
	all := map[string]bool{}
	for p := range a.nodes {
		all[p] = true
	}
	for p := range b.nodes {
		all[p] = true
	}
	for _, p := range sortedKeys(all) {
		x, inA := a.nodes[p]
		y, inB := b.nodes[p]
		switch {
		case !inA:
			fmt.Fprintf(&d, "+ %q %s\n", p, describeNode(y))
		case !inB:
			fmt.Fprintf(&d, "- %q %s\n", p, describeNode(x))
		case describeNode(x) != describeNode(y):
			fmt.Fprintf(&d, "- %q %s\n+ %q %s\n", p, describeNode(x), p, describeNode(y))
		}
	}
	return d.String()
}
