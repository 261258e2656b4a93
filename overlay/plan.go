package overlay

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path"
	"sort"
	"strconv"
	"strings"
)

// OpKind says what one step of a commit does to the workspace.
type OpKind uint8

// The steps of a commit, in the order Plan emits them for one path.
const (
	// OpRemove deletes the workspace entry at Path, a whole tree if it is
	// a directory.
	OpRemove OpKind = iota + 1
	// OpPlace moves the upper entry at Path (with everything below it)
	// into the workspace, where Path is then absent or not a directory.
	OpPlace
	// OpSetMeta copies the owner, mode, user xattrs and mtime of the upper
	// directory at Path onto the workspace directory there. It follows
	// the operations on the directory's children.
	OpSetMeta
)

func (k OpKind) String() string {
	switch k {
	case OpRemove:
		return "remove"
	case OpPlace:
		return "place"
	case OpSetMeta:
		return "setmeta"
	}
	return "unknown"
}

// Op is one step of a commit.
type Op struct {
	Kind OpKind `json:"kind"`
	Path string `json:"path"`
	// Meta is, for OpSetMeta, the upper directory as the run left it
	// (owner already translated). It is captured when planning because
	// moving children out of an upper directory changes its mtime.
	Meta *Node `json:"meta,omitempty"`
	// Old is, for OpSetMeta, the workspace directory as it was, so that
	// a commit can be undone.
	Old *Node `json:"old,omitempty"`
}

// Change is one entry of the change list a receipt reports. Size and
// SHA256 are filled in by Digest, for added and modified regular files.
type Change struct {
	Path   string `json:"path"`
	Type   string `json:"type"`
	Size   *int64 `json:"size,omitempty"`
	SHA256 string `json:"sha256,omitempty"`
}

// Changes lists what a commit adds, modifies and deletes, by path relative
// to the workspace. Everything below an added or deleted directory is
// listed too.
type Changes struct {
	Added    []Change `json:"added"`
	Modified []Change `json:"modified"`
	Deleted  []Change `json:"deleted"`
}

// Empty reports whether nothing changed.
func (c Changes) Empty() bool {
	return len(c.Added)+len(c.Modified)+len(c.Deleted) == 0
}

// Plan is what committing an upper directory does.
type Plan struct {
	Ops     []Op
	Changes Changes
}

// IDMap translates the owner of an upper entry into the owner the entry
// gets in the workspace. It fails for owners that have no meaning there.
type IDMap func(uid, gid uint32) (uint32, uint32, error)

// Identity is the IDMap that keeps owners as they are.
func Identity(uid, gid uint32) (uint32, uint32, error) { return uid, gid, nil }

// RefusedError lists upper entries a commit will not carry into the
// workspace: FIFOs, sockets and device nodes, which a jailed process could
// use to reach whoever opens them later.
type RefusedError struct {
	Paths []string
}

func (e *RefusedError) Error() string {
	const show = 5
	p := quoteAll(e.Paths)
	more := ""
	if len(p) > show {
		more = fmt.Sprintf(" and %d more", len(p)-show)
		p = p[:show]
	}
	return fmt.Sprintf("refusing to commit special files (FIFO, socket or device): %s%s", strings.Join(p, ", "), more)
}

// quoteAll quotes paths for messages: a run chooses its file names, and
// they must not carry terminal escapes or fake lines into logs.
func quoteAll(paths []string) []string {
	out := make([]string, len(paths))
	for i, p := range paths {
		out[i] = strconv.QuoteToGraphic(p)
	}
	return out
}

// ErrRefused is matched by errors.Is for a *RefusedError.
var ErrRefused = errors.New("special files refused")

// Is makes errors.Is(err, ErrRefused) hold.
func (e *RefusedError) Is(target error) bool { return target == ErrRefused }

// PlanCommit compares the upper directory of a finished run with the
// workspace it was mounted over and returns the steps that make the
// workspace show what the run saw. It only reads.
func PlanCommit(upper, workspace Tree, ids IDMap) (*Plan, error) {
	if ids == nil {
		ids = Identity
	}
	p := &planner{upper: upper, ws: workspace, ids: ids}
	root, err := p.upperNode("")
	if err != nil {
		return nil, err
	}
	wroot, err := workspace.Lstat("")
	if err != nil {
		return nil, fmt.Errorf("workspace root: %w", err)
	}
	if err := p.mergeDir("", root, wroot); err != nil {
		return nil, err
	}
	if len(p.refused) > 0 {
		sort.Strings(p.refused)
		return nil, &RefusedError{Paths: p.refused}
	}
	for _, l := range []*[]Change{&p.plan.Changes.Added, &p.plan.Changes.Modified, &p.plan.Changes.Deleted} {
		sort.Slice(*l, func(i, j int) bool { return (*l)[i].Path < (*l)[j].Path })
	}
	return &p.plan, nil
}

type planner struct {
	upper, ws Tree
	ids       IDMap
	plan      Plan
	refused   []string
}

func (p *planner) op(k OpKind, rel string) { p.plan.Ops = append(p.plan.Ops, Op{Kind: k, Path: rel}) }

func (p *planner) change(list *[]Change, rel string, t NodeType) {
	*list = append(*list, Change{Path: rel, Type: t.String()})
}

// upperNode describes an upper entry with its owner already translated.
func (p *planner) upperNode(rel string) (Node, error) {
	n, err := p.upper.Lstat(rel)
	if err != nil {
		return Node{}, fmt.Errorf("upper %q: %w", rel, err)
	}
	return p.mapOwner(rel, n)
}

func (p *planner) mapOwner(rel string, n Node) (Node, error) {
	if n.Type == TypeWhiteout || n.Type == TypeSpecial {
		return n, nil
	}
	uid, gid, err := p.ids(n.UID, n.GID)
	if err != nil {
		return Node{}, fmt.Errorf("owner of %q: %w", rel, err)
	}
	n.UID, n.GID = uid, gid
	return n, nil
}

func (p *planner) upperDir(rel string) ([]Node, error) {
	nodes, err := p.upper.ReadDir(rel)
	if err != nil {
		return nil, fmt.Errorf("read upper %q: %w", rel, err)
	}
	for i := range nodes {
		if nodes[i], err = p.mapOwner(path.Join(rel, nodes[i].Name), nodes[i]); err != nil {
			return nil, err
		}
	}
	return nodes, nil
}

func (p *planner) wsLstat(rel string) (Node, bool, error) {
	n, err := p.ws.Lstat(rel)
	if errors.Is(err, fs.ErrNotExist) {
		return Node{}, false, nil
	}
	if err != nil {
		return Node{}, false, fmt.Errorf("workspace %q: %w", rel, err)
	}
	return n, true, nil
}

// mergeDir handles an upper directory u that sits on a workspace
// directory w and is not opaque: both contribute, so the children decide.
func (p *planner) mergeDir(rel string, u, w Node) error {
	entries, err := p.upperDir(rel)
	if err != nil {
		return err
	}
	before, listed := len(p.plan.Ops), p.listed()
	for _, c := range entries {
		if err := p.entry(path.Join(rel, c.Name), c); err != nil {
			return err
		}
	}
	// A new mtime on a directory with nothing changed below it was set
	// on purpose (touch); otherwise it follows from the children. (An
	// opaque directory equal to the one it replaces is planned but is
	// no change.)
	changed := !sameMeta(u, w) || (u.MTime != w.MTime && p.listed() == listed)
	if changed && rel != "" {
		p.change(&p.plan.Changes.Modified, rel, TypeDir)
	}
	// Changing the children changes the directory's mtime: set it back
	// to what the run left as well.
	if changed || u.MTime != w.MTime || len(p.plan.Ops) > before {
		meta, old := u, w
		p.plan.Ops = append(p.plan.Ops, Op{Kind: OpSetMeta, Path: rel, Meta: &meta, Old: &old})
	}
	return nil
}

func (p *planner) entry(rel string, u Node) error {
	w, exists, err := p.wsLstat(rel)
	if err != nil {
		return err
	}
	switch u.Type {
	case TypeSpecial:
		p.refused = append(p.refused, rel)
		return nil
	case TypeWhiteout:
		if !exists {
			return nil
		}
		p.op(OpRemove, rel)
		return p.deletedTree(rel, w)
	case TypeDir:
		if exists && w.Type == TypeDir && !u.Opaque {
			return p.mergeDir(rel, u, w)
		}
	default:
		// An upper entry that matches the workspace in every respect
		// is a copy-up without a change (a file opened for writing
		// and left alone). Hard-linked ones are placed anyway: the
		// run may have linked them to new names.
		if exists && w.Type == u.Type && w.MTime == u.MTime && w.Size == u.Size && u.Nlink <= 1 && sameMeta(u, w) {
			same, err := p.sameContent(rel, u)
			if err != nil || same {
				return err
			}
		}
	}
	// u replaces whatever the workspace has at rel. rename(2) replaces
	// a file or symlink in one step, but never puts a directory over a
	// non-directory or the other way round.
	if exists && (w.Type == TypeDir || u.Type == TypeDir) {
		p.op(OpRemove, rel)
	}
	p.op(OpPlace, rel)
	switch {
	case !exists:
		return p.addedTree(rel, u)
	case w.Type == TypeDir && u.Type == TypeDir:
		return p.replacedDir(rel, u, w)
	default:
		p.change(&p.plan.Changes.Modified, rel, u.Type)
		if w.Type == TypeDir {
			if err := p.deletedChildren(rel); err != nil {
				return err
			}
		}
		if u.Type == TypeDir {
			return p.addedChildren(rel)
		}
		return nil
	}
}

func (p *planner) sameContent(rel string, u Node) (bool, error) {
	if u.Type != TypeFile {
		return true, nil // symlinks compared by target in sameMeta
	}
	a, err := p.upper.Open(rel)
	if err != nil {
		return false, fmt.Errorf("open upper %q: %w", rel, err)
	}
	defer a.Close()
	b, err := p.ws.Open(rel)
	if err != nil {
		return false, fmt.Errorf("open workspace %q: %w", rel, err)
	}
	defer b.Close()
	return equalReaders(a, b)
}

func equalReaders(a, b io.Reader) (bool, error) {
	const chunk = 64 << 10
	ba, bb := make([]byte, chunk), make([]byte, chunk)
	for {
		na, errA := io.ReadFull(a, ba)
		nb, errB := io.ReadFull(b, bb)
		if !bytes.Equal(ba[:na], bb[:nb]) {
			return false, nil
		}
		endA := errA == io.EOF || errA == io.ErrUnexpectedEOF
		endB := errB == io.EOF || errB == io.ErrUnexpectedEOF
		if errA != nil && !endA {
			return false, errA
		}
		if errB != nil && !endB {
			return false, errB
		}
		if endA || endB {
			return endA && endB, nil
		}
	}
}

// addedTree records rel and, for a directory, everything below it as
// added, and checks that all of it may be committed.
func (p *planner) addedTree(rel string, u Node) error {
	p.change(&p.plan.Changes.Added, rel, u.Type)
	if u.Type != TypeDir {
		return nil
	}
	return p.addedChildren(rel)
}

func (p *planner) addedChildren(rel string) error {
	entries, err := p.upperDir(rel)
	if err != nil {
		return err
	}
	for _, c := range entries {
		switch c.Type {
		case TypeWhiteout:
			// Nothing below a new or opaque directory to hide.
		case TypeSpecial:
			p.refused = append(p.refused, path.Join(rel, c.Name))
		default:
			if err := p.addedTree(path.Join(rel, c.Name), c); err != nil {
				return err
			}
		}
	}
	return nil
}

func (p *planner) deletedTree(rel string, w Node) error {
	p.change(&p.plan.Changes.Deleted, rel, w.Type)
	if w.Type != TypeDir {
		return nil
	}
	return p.deletedChildren(rel)
}

func (p *planner) deletedChildren(rel string) error {
	entries, err := p.ws.ReadDir(rel)
	if err != nil {
		return fmt.Errorf("read workspace %q: %w", rel, err)
	}
	for _, c := range entries {
		if err := p.deletedTree(path.Join(rel, c.Name), c); err != nil {
			return err
		}
	}
	return nil
}

// replacedDir reports the difference between a workspace directory and the
// opaque upper directory that replaces it.
func (p *planner) replacedDir(rel string, u, w Node) error {
	listed := p.listed()
	ups, err := p.upperDir(rel)
	if err != nil {
		return err
	}
	wss, err := p.ws.ReadDir(rel)
	if err != nil {
		return fmt.Errorf("read workspace %q: %w", rel, err)
	}
	old := make(map[string]Node, len(wss))
	for _, c := range wss {
		old[c.Name] = c
	}
	for _, c := range ups {
		crel := path.Join(rel, c.Name)
		if c.Type == TypeSpecial {
			p.refused = append(p.refused, crel)
			continue
		}
		if c.Type == TypeWhiteout {
			continue
		}
		o, had := old[c.Name]
		delete(old, c.Name)
		switch {
		case !had:
			err = p.addedTree(crel, c)
		case o.Type == TypeDir && c.Type == TypeDir:
			err = p.replacedDir(crel, c, o)
		case o.Type == c.Type && o.MTime == c.MTime && o.Size == c.Size && sameMeta(c, o):
			var same bool
			if same, err = p.sameContent(crel, c); err == nil && !same {
				p.change(&p.plan.Changes.Modified, crel, c.Type)
			}
		default:
			p.change(&p.plan.Changes.Modified, crel, c.Type)
			if o.Type == TypeDir {
				err = p.deletedChildren(crel)
			} else if c.Type == TypeDir {
				err = p.addedChildren(crel)
			}
		}
		if err != nil {
			return err
		}
	}
	for _, o := range old {
		if err := p.deletedTree(path.Join(rel, o.Name), o); err != nil {
			return err
		}
	}
	// As in mergeDir: a new mtime on a directory with nothing changed
	// below it was set on purpose.
	if !sameMeta(u, w) || (u.MTime != w.MTime && p.listed() == listed) {
		p.change(&p.plan.Changes.Modified, rel, TypeDir)
	}
	return nil
}

// listed counts the entries of the change list so far.
func (p *planner) listed() int {
	c := p.plan.Changes
	return len(c.Added) + len(c.Modified) + len(c.Deleted)
}

// Digest fills in the size and SHA-256 of the added and modified regular
// files in c, reading them from the upper tree.
func Digest(upper Tree, c *Changes) error {
	for _, list := range []*[]Change{&c.Added, &c.Modified} {
		for i := range *list {
			ch := &(*list)[i]
			if ch.Type != TypeFile.String() {
				continue
			}
			f, err := upper.Open(ch.Path)
			if err != nil {
				return err
			}
			h := sha256.New()
			n, err := io.Copy(h, f)
			f.Close()
			if err != nil {
				return fmt.Errorf("digest %q: %w", ch.Path, err)
			}
			ch.Size, ch.SHA256 = &n, hex.EncodeToString(h.Sum(nil))
		}
	}
	return nil
}
