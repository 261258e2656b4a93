package overlay

import (
	"errors"
	"fmt"
	"io/fs"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// opStrings renders ops as `kind "path"` for comparisons.
func opStrings(ops []Op) []string {
	var out []string
	for _, op := range ops {
		out = append(out, fmt.Sprintf("%s %q", op.Kind, op.Path))
	}
	return out
}

// changeStrings renders a change list as "type:path".
func changeStrings(cs []Change) []string {
	var out []string
	for _, c := range cs {
		out = append(out, c.Type+":"+c.Path)
	}
	return out
}

// metaOf returns the Meta of the OpSetMeta at rel.
func metaOf(t *testing.T, p *Plan, rel string) *Node {
	t.Helper()
	for _, op := range p.Ops {
		if op.Kind == OpSetMeta && op.Path == rel {
			require.NotNil(t, op.Meta, "setmeta %q without metadata", rel)
			return op.Meta
		}
	}
	t.Fatalf("no setmeta %q in %v", rel, opStrings(p.Ops))
	return nil
}

func TestPlanCommit(t *testing.T) {
	cases := []struct {
		name                     string
		upper, ws                *memTree
		ids                      IDMap
		ops                      []string
		added, modified, deleted []string
		check                    func(t *testing.T, p *Plan)
	}{
		{
			name:  "new file",
			upper: tree(file("n.txt", "new")),
			ws:    tree(file("a.txt", "a")),
			ops:   []string{`place "n.txt"`, `setmeta ""`},
			added: []string{"file:n.txt"},
		},
		{
			name: "new dir tree",
			upper: tree(
				dir("nd", mode(0o700)),
				file("nd/x", "x"),
				dir("nd/sub"),
				symlink("nd/sub/l", "../x"),
				whiteout("nd/gone"), // hides nothing below a new directory
				opaque("nd/op"),
			),
			ws:    tree(file("a.txt", "a")),
			ops:   []string{`place "nd"`, `setmeta ""`},
			added: []string{"dir:nd", "dir:nd/op", "dir:nd/sub", "symlink:nd/sub/l", "file:nd/x"},
		},
		{
			name:     "modified file",
			upper:    tree(file("a.txt", "changed", mtime(t1))),
			ws:       tree(file("a.txt", "a"), file("b.txt", "b")),
			ops:      []string{`place "a.txt"`, `setmeta ""`},
			modified: []string{"file:a.txt"},
		},
		{
			name:     "modified content with same size and mtime",
			upper:    tree(file("d/a.txt", "new")),
			ws:       tree(file("d/a.txt", "old")),
			ops:      []string{`place "d/a.txt"`, `setmeta "d"`, `setmeta ""`},
			modified: []string{"file:d/a.txt"},
		},
		{
			name:  "copy-up without change",
			upper: tree(file("d/a.txt", "same", mode(0o600), xattr("user.k", "v")), symlink("d/l", "a.txt")),
			ws: tree(
				file("d/a.txt", "same", mode(0o600), xattr("user.k", "v"), nlink(2)),
				symlink("d/l", "a.txt"),
				file("d/b.txt", "b"),
			),
		},
		{
			name: "hard-linked copy-up is placed",
			upper: tree(
				file("a.txt", "same", nlink(2), ino(7)),
				file("b.txt", "same", nlink(2), ino(7)),
			),
			ws:       tree(file("a.txt", "same")),
			ops:      []string{`place "a.txt"`, `place "b.txt"`, `setmeta ""`},
			added:    []string{"file:b.txt"},
			modified: []string{"file:a.txt"},
		},
		{
			name:    "whiteout of a file",
			upper:   tree(whiteout("a.txt")),
			ws:      tree(file("a.txt", "a"), file("b.txt", "b")),
			ops:     []string{`remove "a.txt"`, `setmeta ""`},
			deleted: []string{"file:a.txt"},
		},
		{
			name:  "whiteout of a dir tree",
			upper: tree(whiteout("d")),
			ws: tree(
				file("d/x", "x"),
				symlink("d/s/l", "../x"),
				file("d/s/y", "y"),
				dir("d/e"),
				file("keep", "k"),
			),
			ops:     []string{`remove "d"`, `setmeta ""`},
			deleted: []string{"dir:d", "dir:d/e", "dir:d/s", "symlink:d/s/l", "file:d/s/y", "file:d/x"},
		},
		{
			name:  "whiteout of something absent",
			upper: tree(whiteout("never"), whiteout("d/never")),
			ws:    tree(dir("d")),
		},
		{
			name: "opaque dir replacing a dir",
			upper: tree(
				opaque("d"),
				file("d/keep", "k"),
				file("d/changed", "new content"),
				file("d/samesize", "new"),
				file("d/new", "n"),
				dir("d/sub", mode(0o700)),
				whiteout("d/gone"), // redundant in an opaque dir
			),
			ws: tree(
				file("d/keep", "k"),
				file("d/changed", "c"),
				file("d/samesize", "old"),
				file("d/gone", "g"),
				file("d/sub/x", "x"),
			),
			ops:      []string{`remove "d"`, `place "d"`, `setmeta ""`},
			added:    []string{"file:d/new"},
			modified: []string{"file:d/changed", "file:d/samesize", "dir:d/sub"},
			deleted:  []string{"file:d/gone", "file:d/sub/x"},
		},
		{
			name:     "opaque dir with new metadata",
			upper:    tree(opaque("d", mode(0o700))),
			ws:       tree(file("d/x", "x")),
			ops:      []string{`remove "d"`, `place "d"`, `setmeta ""`},
			modified: []string{"dir:d"},
			deleted:  []string{"file:d/x"},
		},
		{
			name: "mtime-only change of dirs in an opaque dir",
			upper: tree(
				opaque("d", mtime(t1)),
				dir("d/touched", mtime(t1)),
				file("d/touched/x", "x"),
				dir("d/emptied", mtime(t1)),
			),
			ws:       tree(file("d/touched/x", "x"), file("d/emptied/y", "y")),
			ops:      []string{`remove "d"`, `place "d"`, `setmeta ""`},
			modified: []string{"dir:d/touched"},
			deleted:  []string{"file:d/emptied/y"},
		},
		{
			name:     "opaque dir with only a new mtime",
			upper:    tree(opaque("d", mtime(t1)), file("d/x", "x")),
			ws:       tree(file("d/x", "x")),
			ops:      []string{`remove "d"`, `place "d"`, `setmeta ""`},
			modified: []string{"dir:d"},
		},
		{
			name:     "file to dir",
			upper:    tree(opaque("x"), file("x/in", "in"), whiteout("x/nothing")),
			ws:       tree(file("x", "was a file")),
			ops:      []string{`remove "x"`, `place "x"`, `setmeta ""`},
			added:    []string{"file:x/in"},
			modified: []string{"dir:x"},
		},
		{
			name:     "dir to file",
			upper:    tree(file("x", "now a file")),
			ws:       tree(file("x/a", "a"), file("x/s/b", "b")),
			ops:      []string{`remove "x"`, `place "x"`, `setmeta ""`},
			modified: []string{"file:x"},
			deleted:  []string{"file:x/a", "dir:x/s", "file:x/s/b"},
		},
		{
			name:     "symlink to dir",
			upper:    tree(dir("l"), file("l/f", "f")),
			ws:       tree(symlink("l", "/etc")),
			ops:      []string{`remove "l"`, `place "l"`, `setmeta ""`},
			added:    []string{"file:l/f"},
			modified: []string{"dir:l"},
		},
		{
			name:     "symlink retarget",
			upper:    tree(symlink("l", "b")),
			ws:       tree(symlink("l", "a"), file("a", "a"), file("b", "b")),
			ops:      []string{`place "l"`, `setmeta ""`},
			modified: []string{"symlink:l"},
		},
		{
			name:     "mtime of file",
			upper:    tree(file("a", "a", mtime(t1))),
			ws:       tree(file("a", "a")),
			ops:      []string{`place "a"`, `setmeta ""`},
			modified: []string{"file:a"},
		},
		{
			name:     "chmod of file",
			upper:    tree(file("run.sh", "#!/bin/sh\n", mode(0o600))),
			ws:       tree(file("run.sh", "#!/bin/sh\n", mode(0o755))),
			ops:      []string{`place "run.sh"`, `setmeta ""`},
			modified: []string{"file:run.sh"},
		},
		{
			name:     "xattr of file",
			upper:    tree(file("a", "a", xattr("user.k", "2"))),
			ws:       tree(file("a", "a", xattr("user.k", "1"))),
			ops:      []string{`place "a"`, `setmeta ""`},
			modified: []string{"file:a"},
		},
		{
			name:     "merged dir with changed mode",
			upper:    tree(dir("d", mode(0o700))),
			ws:       tree(file("d/x", "x")),
			ops:      []string{`setmeta "d"`, `setmeta ""`},
			modified: []string{"dir:d"},
			check: func(t *testing.T, p *Plan) {
				assert.Equal(t, fs.FileMode(0o700), metaOf(t, p, "d").Mode)
			},
		},
		{
			name:  "merged dir whose children changed",
			upper: tree(dir("d", mtime(t1)), file("d/y", "y"), whiteout("d/x")),
			ws:    tree(file("d/x", "x"), file("d/z", "z")),
			ops:   []string{`remove "d/x"`, `place "d/y"`, `setmeta "d"`, `setmeta ""`},
			// The directory's new mtime follows from its children: it
			// is restored, but the directory is not a change of its own.
			added:   []string{"file:d/y"},
			deleted: []string{"file:d/x"},
			check: func(t *testing.T, p *Plan) {
				m := metaOf(t, p, "d")
				assert.Equal(t, t1, m.MTime)
				assert.Equal(t, TypeDir, m.Type)
				assert.Equal(t, fs.FileMode(0o755), m.Mode)
			},
		},
		{
			name:     "mtime-only change of a dir",
			upper:    tree(dir("d", mtime(t1)), file("d/x", "x")), // x copied up unchanged
			ws:       tree(file("d/x", "x")),
			ops:      []string{`setmeta "d"`, `setmeta ""`},
			modified: []string{"dir:d"},
			check: func(t *testing.T, p *Plan) {
				assert.Equal(t, t1, metaOf(t, p, "d").MTime)
			},
		},
		{
			name: "mtime-only change of a dir above an unchanged opaque dir",
			upper: tree(
				dir("d", mtime(t1)),
				opaque("d/same"), // rm -rf d/same && cp -a saved d/same
				file("d/same/x", "x"),
			),
			ws:       tree(file("d/same/x", "x")),
			ops:      []string{`remove "d/same"`, `place "d/same"`, `setmeta "d"`, `setmeta ""`},
			modified: []string{"dir:d"},
		},
		{
			name:  "mtime of the root",
			upper: tree(dir("", mtime(t1))),
			ws:    tree(file("a", "a")),
			ops:   []string{`setmeta ""`},
			check: func(t *testing.T, p *Plan) {
				assert.Equal(t, t1, metaOf(t, p, "").MTime)
			},
		},
		{
			name: "IDMap translating owners",
			ids:  shiftIDs,
			upper: tree(
				dir("", owner(100000, 100000)),
				dir("d", owner(100000, 100000)),
				file("d/same", "s", owner(100000, 100000)),
				file("d/chowned", "c", owner(100001, 100000)),
				file("d/new", "n", owner(100002, 100002)),
			),
			ws:       tree(file("d/same", "s"), file("d/chowned", "c")),
			ops:      []string{`place "d/chowned"`, `place "d/new"`, `setmeta "d"`, `setmeta ""`},
			added:    []string{"file:d/new"},
			modified: []string{"file:d/chowned"},
			check: func(t *testing.T, p *Plan) {
				for _, rel := range []string{"", "d"} {
					m := metaOf(t, p, rel)
					assert.Equal(t, [2]uint32{0, 0}, [2]uint32{m.UID, m.GID}, "owner of %q translated", rel)
				}
			},
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p, err := PlanCommit(c.upper, c.ws, c.ids)
			require.NoError(t, err)
			assert.Equal(t, c.ops, opStrings(p.Ops), "ops")
			assert.Equal(t, c.added, changeStrings(p.Changes.Added), "added")
			assert.Equal(t, c.modified, changeStrings(p.Changes.Modified), "modified")
			assert.Equal(t, c.deleted, changeStrings(p.Changes.Deleted), "deleted")
			assert.Equal(t, len(c.added)+len(c.modified)+len(c.deleted) == 0, p.Changes.Empty())
			if c.check != nil {
				c.check(t, p)
			}
		})
	}
}

// shiftIDs maps the jail's ids 100000... to 0... and fails for others.
func shiftIDs(uid, gid uint32) (uint32, uint32, error) {
	if uid < 100000 || gid < 100000 {
		return 0, 0, fmt.Errorf("%d:%d: %w", uid, gid, errUnmapped)
	}
	return uid - 100000, gid - 100000, nil
}

var errUnmapped = errors.New("owner not mapped")

func TestPlanCommitRefusesSpecialFiles(t *testing.T) {
	upper := tree(
		special("top"),
		special("a.b"), // sorts before a/p, but a depth-first walk meets it after
		special("a/p"),
		file("m/changed", "new"),
		special("m/fifo"),
		dir("nd"),
		dir("nd/deep"),
		special("nd/deep/sock"),
		opaque("od"),
		special("od/dev"),
		opaque("wasfile"),
		special("wasfile/p"),
	)
	ws := tree(file("m/changed", "old"), file("od/x", "x"), file("wasfile", "f"))
	p, err := PlanCommit(upper, ws, nil)
	require.Error(t, err)
	assert.Nil(t, p)
	assert.ErrorIs(t, err, ErrRefused)
	var re *RefusedError
	require.ErrorAs(t, err, &re)
	assert.Equal(t, []string{"a.b", "a/p", "m/fifo", "nd/deep/sock", "od/dev", "top", "wasfile/p"}, re.Paths)
	assert.Contains(t, err.Error(), "nd/deep/sock")
}

func TestRefusedErrorMessage(t *testing.T) {
	e := &RefusedError{Paths: []string{"a", "b", "c", "d", "e", "f", "g"}}
	assert.Equal(t, `refusing to commit special files (FIFO, socket or device): "a", "b", "c", "d", "e" and 2 more`, e.Error())
	esc := &RefusedError{Paths: []string{"p\x1b]0;x\a\nfake"}}
	assert.NotContains(t, esc.Error(), "\x1b", "names are quoted: no terminal escapes")
	assert.NotContains(t, esc.Error(), "\n")
	assert.NotErrorIs(t, errors.New("other"), ErrRefused)
}

func TestPlanCommitIDMapError(t *testing.T) {
	cases := []struct {
		name  string
		upper *memTree
	}{
		{"root", tree(dir("", owner(5, 5)))},
		{"new file", tree(dir("", owner(100000, 100000)), file("n", "n", owner(5, 100000)))},
		{"below a new dir", tree(
			dir("", owner(100000, 100000)),
			dir("nd", owner(100000, 100000)),
			file("nd/x", "x", owner(100000, 7)),
		)},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p, err := PlanCommit(c.upper, tree(), shiftIDs)
			assert.Nil(t, p)
			assert.ErrorIs(t, err, errUnmapped)
		})
	}
}

func TestPlanCommitWhiteoutsIgnoreOwner(t *testing.T) {
	// Whiteouts and refused entries carry the overlay's ids, not the
	// run's: they are never translated.
	upper := tree(dir("", owner(100000, 100000)), whiteout("gone"))
	p, err := PlanCommit(upper, tree(dir("", owner(0, 0)), file("gone", "g")), shiftIDs)
	require.NoError(t, err)
	assert.Equal(t, []string{`remove "gone"`, `setmeta ""`}, opStrings(p.Ops))
}

func TestPlanCommitErrors(t *testing.T) {
	_, err := PlanCommit(&memTree{nodes: map[string]memNode{}}, tree(), nil)
	assert.ErrorIs(t, err, fs.ErrNotExist)
	_, err = PlanCommit(tree(), &memTree{nodes: map[string]memNode{}}, nil)
	assert.ErrorIs(t, err, fs.ErrNotExist)
}
