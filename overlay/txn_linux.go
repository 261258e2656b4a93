package overlay

// A commit as a transaction. The workspace must end up exactly as before
// the commit or exactly as after it, whatever interrupts it (kill -9,
// power loss), and a committed run can be undone later. Everything a
// commit replaces or deletes is moved aside by rename(2) into the
// transaction's directory, never copied or deleted, and a journal written
// (and synced) before the first change says how to put it back:
//
//	txnDir/journal.json  the plan, per-step facts, and the state:
//	                     "applying" until the commit point, then "committed"
//	txnDir/aside/<i>     what step i took out of the workspace
//
// Steps, each one rename (or an exchange) that leaves a recognisable state:
//
//	remove  P   rename ws/P -> aside/i
//	place   P   ws/P absent:  rename upper/P -> ws/P
//	            ws/P present: exchange upper/P <-> ws/P, then
//	                          rename upper/P (now the old entry) -> aside/i
//	setmeta P   owner, mode, xattrs, mtime of ws/P; the old ones are in
//	            the journal
//
// Rolling back walks the steps backwards and undoes whichever of them
// happened; every undo step checks the state first, so a rollback that
// is itself interrupted can run again. The upper dir, aside dir and
// workspace must share a filesystem (rename does not cross them).

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// Transaction states.
const (
	StateApplying  = "applying"
	StateCommitted = "committed"
)

// ErrCrossDevice is returned by Commit when the upper dir and the
// workspace are on different filesystems.
var ErrCrossDevice = errors.New("upper dir and workspace are on different filesystems")

// Journal is the durable record of one commit.
type Journal struct {
	RunID     string      `json:"run_id"`
	Workspace string      `json:"workspace"`
	Upper     string      `json:"upper"`
	State     string      `json:"state"`
	Created   time.Time   `json:"created"`
	Steps     []JournalOp `json:"steps"`
}

// JournalOp is one step of a commit with what undoing it needs.
type JournalOp struct {
	Op
	// NewIno is, for a place step, the inode of the entry put into the
	// workspace: it tells whether the step happened.
	NewIno uint64 `json:"new_ino,omitempty"`
	// After is the workspace entry as the commit left it, and AfterTree
	// everything below a placed directory; undo refuses to touch a path
	// that has changed since (or anything added below it).
	After     *Ident           `json:"after,omitempty"`
	AfterTree map[string]Ident `json:"after_tree,omitempty"`
}

// Ident identifies a file's state cheaply: a different inode, size,
// mtime, mode or owner means somebody changed it. (Not ctime: undoing a
// later commit renames entries back, which changes their ctime.)
type Ident struct {
	Ino   uint64 `json:"ino"`
	Size  int64  `json:"size"`
	MTime int64  `json:"mtime"`
	Mode  uint32 `json:"mode"`
	UID   uint32 `json:"uid"`
	GID   uint32 `json:"gid"`
}

// StepHook, when set (by tests), runs before step i of a commit (phase
// "before") and, for a place step that exchanged entries, between the
// exchange and moving the old entry aside (phase "exchanged"). An error
// stops the commit there and rolls it back; ErrCrash stops it as a crash
// would, leaving the journal for RecoverAt.
type StepHook func(i int, phase string) error

// ErrCrash, returned by a StepHook, simulates the process dying.
var ErrCrash = errors.New("simulated crash")

// rollbackHook, set by tests, runs before each undo step of a rollback
// (phase "before") and, for a place step, between taking the new entry
// back and restoring the old one ("taken back"); an error stops it there,
// as a crash would.
var rollbackHook func(i int, phase string) error

// Commit applies plan as a transaction recorded in txnDir (which must not
// exist). On success the journal says "committed" and txnDir keeps what
// the commit replaced, for Undo. On failure the workspace is rolled back
// before Commit returns, unless the rollback itself fails, in which case
// RecoverAt finishes it later.
func Commit(plan *Plan, upperDir, workspaceDir, txnDir, runID string, ids IDMap, hook StepHook) error {
	if ids == nil {
		ids = Identity
	}
	var us, ws unix.Stat_t
	if err := unix.Stat(upperDir, &us); err != nil {
		return &fs.PathError{Op: "stat", Path: upperDir, Err: err}
	}
	if err := unix.Stat(workspaceDir, &ws); err != nil {
		return &fs.PathError{Op: "stat", Path: workspaceDir, Err: err}
	}
	if us.Dev != ws.Dev {
		return ErrCrossDevice
	}
	t, err := openTxn(upperDir, workspaceDir, ids)
	if err != nil {
		return err
	}
	defer t.close()

	j := &Journal{RunID: runID, Workspace: workspaceDir, Upper: upperDir, State: StateApplying, Created: time.Now().UTC()}
	// Prepare: make every entry that will be placed fit for the host, and
	// note its inode. Nothing in the workspace changes yet.
	for _, op := range plan.Ops {
		jop := JournalOp{Op: op}
		if op.Kind == OpPlace {
			pfd, name, err := openParent(t.up, op.Path)
			if err != nil {
				return err
			}
			err = t.a.sanitize(pfd, name)
			var st unix.Stat_t
			if err == nil {
				err = unix.Fstatat(pfd, name, &st, unix.AT_SYMLINK_NOFOLLOW)
			}
			unix.Close(pfd)
			if err != nil {
				return fmt.Errorf("prepare %q: %w", op.Path, err)
			}
			jop.NewIno = st.Ino
		}
		j.Steps = append(j.Steps, jop)
	}
	// The upper dir was written without syncs (overlay's volatile
	// option): make its contents durable before any of it is visible.
	if err := syncfs(t.up); err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Join(txnDir, "aside"), 0o700); err != nil {
		return err
	}
	if err := writeJournal(txnDir, j); err != nil {
		return err
	}
	if t.aside, err = unix.Open(filepath.Join(txnDir, "aside"), unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0); err != nil {
		return &fs.PathError{Op: "open", Path: txnDir, Err: err}
	}

	for i := range j.Steps {
		if hook != nil {
			if err = hook(i, "before"); err != nil {
				break
			}
		}
		if err = t.forward(i, &j.Steps[i], hook); err != nil {
			err = fmt.Errorf("%s %q: %w", j.Steps[i].Kind, j.Steps[i].Path, err)
			break
		}
	}
	if err == nil {
		err = t.commitPoint(txnDir, j)
	}
	if errors.Is(err, ErrCrash) {
		return err
	}
	if err != nil {
		if rerr := t.rollback(j); rerr != nil {
			return errors.Join(err, fmt.Errorf("roll back: %w", rerr))
		}
		return errors.Join(err, os.RemoveAll(txnDir))
	}
	return nil
}

// commitPoint makes the applied steps durable, then the journal's
// "committed", after which the transaction is never rolled back.
func (t *txn) commitPoint(txnDir string, j *Journal) error {
	for i := range j.Steps {
		s := &j.Steps[i]
		if s.Kind == OpRemove {
			continue
		}
		id, err := identAt(t.ws, s.Path)
		if err != nil {
			return fmt.Errorf("after %q: %w", s.Path, err)
		}
		s.After = id
		if s.Kind == OpPlace && id.Mode&unix.S_IFMT == unix.S_IFDIR {
			if s.AfterTree, err = identTree(t.ws, s.Path); err != nil {
				return fmt.Errorf("after %q: %w", s.Path, err)
			}
		}
	}
	if err := syncfs(t.ws); err != nil {
		return err
	}
	j.State = StateCommitted
	if err := writeJournal(txnDir, j); err != nil {
		return err
	}
	return markCommitted(txnDir, true)
}

// committedMarker beside a journal says "committed" without the journal
// having to be read: every run checks its workspace's history for
// interrupted commits, and journals of large commits are large.
const committedMarker = "committed"

// Committed reports, cheaply, whether the transaction in txnDir is a
// finished commit (history, nothing to recover).
func Committed(txnDir string) bool {
	_, err := os.Stat(filepath.Join(txnDir, committedMarker))
	return err == nil
}

func markCommitted(txnDir string, on bool) error {
	p := filepath.Join(txnDir, committedMarker)
	if on {
		if err := os.WriteFile(p, nil, 0o600); err != nil {
			return err
		}
	} else if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return syncDir(txnDir)
}

type txn struct {
	up, ws, aside int
	a             *applier
}

func openTxn(upperDir, workspaceDir string, ids IDMap) (*txn, error) {
	up, err := unix.Open(upperDir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: upperDir, Err: err}
	}
	ws, err := unix.Open(workspaceDir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		unix.Close(up)
		return nil, &fs.PathError{Op: "open", Path: workspaceDir, Err: err}
	}
	return &txn{up: up, ws: ws, aside: -1, a: &applier{up: up, ws: ws, ids: ids, links: map[uint64]string{}, done: map[uint64]bool{}}}, nil
}

func (t *txn) close() {
	for _, fd := range []int{t.up, t.ws, t.aside} {
		if fd >= 0 {
			unix.Close(fd)
		}
	}
}

// parents opens the directories that hold rel in the workspace and in the
// upper dir.
func (t *txn) parents(rel string) (wp, upp int, name string, err error) {
	wp, name, err = openParent(t.ws, rel)
	if err != nil {
		return -1, -1, "", err
	}
	if upp, _, err = openParent(t.up, rel); err != nil {
		unix.Close(wp)
		return -1, -1, "", err
	}
	return wp, upp, name, nil
}

// forward carries out step i.
func (t *txn) forward(i int, s *JournalOp, hook StepHook) error {
	aside := strconv.Itoa(i)
	switch s.Kind {
	case OpRemove:
		wp, name, err := openParent(t.ws, s.Path)
		if err != nil {
			return err
		}
		defer unix.Close(wp)
		return renameAt(wp, name, t.aside, aside, unix.RENAME_NOREPLACE)
	case OpPlace:
		wp, upp, name, err := t.parents(s.Path)
		if err != nil {
			return err
		}
		defer unix.Close(wp)
		defer unix.Close(upp)
		err = renameAt(upp, name, wp, name, unix.RENAME_NOREPLACE)
		if !errors.Is(err, unix.EEXIST) {
			return err
		}
		if err := renameAt(upp, name, wp, name, unix.RENAME_EXCHANGE); err != nil {
			return err
		}
		if hook != nil {
			if err := hook(i, "exchanged"); err != nil {
				return err
			}
		}
		return renameAt(upp, name, t.aside, aside, unix.RENAME_NOREPLACE)
	case OpSetMeta:
		if s.Meta == nil {
			return errors.New("setmeta without metadata")
		}
		return t.a.setDirMeta(s.Path, s.Meta)
	}
	return fmt.Errorf("unknown operation %d", s.Kind)
}

// rollback undoes, last first, whichever steps of j happened. Each undo
// looks at the state before acting, so it is safe to repeat.
func (t *txn) rollback(j *Journal) error {
	for i := len(j.Steps) - 1; i >= 0; i-- {
		if rollbackHook != nil {
			if err := rollbackHook(i, "before"); err != nil {
				return err
			}
		}
		if err := t.backward(i, &j.Steps[i]); err != nil {
			return fmt.Errorf("undo %s %q: %w", j.Steps[i].Kind, j.Steps[i].Path, err)
		}
	}
	// Directory metadata last: moving entries back changed the mtimes
	// of their directories. Children come before their parents.
	for _, s := range j.Steps {
		if s.Kind == OpSetMeta && s.Old != nil {
			if err := t.a.setDirMeta(s.Path, s.Old); err != nil {
				return fmt.Errorf("undo setmeta %q: %w", s.Path, err)
			}
		}
	}
	return syncfs(t.ws)
}

func (t *txn) backward(i int, s *JournalOp) error {
	aside := strconv.Itoa(i)
	switch s.Kind {
	case OpRemove:
		if !existsAt(t.aside, aside) {
			return nil // never moved
		}
		wp, name, err := openParent(t.ws, s.Path)
		if err != nil {
			return err
		}
		defer unix.Close(wp)
		return renameAt(t.aside, aside, wp, name, unix.RENAME_NOREPLACE)
	case OpPlace:
		wp, upp, name, err := t.parents(s.Path)
		if err != nil {
			return err
		}
		defer unix.Close(wp)
		defer unix.Close(upp)
		var st unix.Stat_t
		inWorkspace := unix.Fstatat(wp, name, &st, unix.AT_SYMLINK_NOFOLLOW) == nil
		if inWorkspace && st.Ino == s.NewIno {
			if existsAt(upp, name) {
				// Exchanged but not yet moved aside: exchange back.
				return renameAt(upp, name, wp, name, unix.RENAME_EXCHANGE)
			}
			if err := renameAt(wp, name, upp, name, unix.RENAME_NOREPLACE); err != nil {
				return err
			}
			if rollbackHook != nil {
				if err := rollbackHook(i, "taken back"); err != nil {
					return err
				}
			}
		} else if inWorkspace {
			return nil // the exchange or rename never happened
		}
		// The new entry is out of the workspace (or never got in): put
		// back what the step had moved aside, if anything. A rollback
		// that died between the two renames resumes here.
		if existsAt(t.aside, aside) {
			return renameAt(t.aside, aside, wp, name, unix.RENAME_NOREPLACE)
		}
		return nil
	}
	return nil // setmeta: restored by rollback once all entries are back
}

// RecoverAt finishes an interrupted transaction: one whose journal still
// says "applying" is rolled back and its directory removed. It reports
// whether there was anything to recover. A committed transaction is left
// alone (it is history, for Undo), but for its "committed" marker, which
// it gets if its journal says committed without one.
func RecoverAt(txnDir string, ids IDMap) (bool, error) {
	if Committed(txnDir) {
		return false, nil
	}
	j, err := ReadJournal(txnDir)
	if errors.Is(err, fs.ErrNotExist) {
		// Died before the journal was written: nothing was touched.
		return true, os.RemoveAll(txnDir)
	}
	if err != nil {
		return false, err
	}
	if j.State == StateCommitted {
		// History whose marker a crash kept from being written (or an
		// undo's crash removed): written now, so that later runs need
		// not read this journal again. Only a saving: a failure to
		// write it changes nothing.
		_ = markCommitted(txnDir, true)
		return false, nil
	}
	if j.State != StateApplying {
		return false, nil
	}
	t, err := openTxn(j.Upper, j.Workspace, ids)
	if err != nil {
		return false, err
	}
	defer t.close()
	if t.aside, err = unix.Open(filepath.Join(txnDir, "aside"), unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0); err != nil {
		return false, &fs.PathError{Op: "open", Path: txnDir, Err: err}
	}
	if err := t.rollback(j); err != nil {
		return false, err
	}
	return true, os.RemoveAll(txnDir)
}

// ConflictError lists workspace paths changed since a commit, which an
// undo would otherwise overwrite.
type ConflictError struct{ Paths []string }

func (e *ConflictError) Error() string {
	return "changed since the commit: " + strings.Join(quoteAll(e.Paths), ", ")
}

// Undo reverts the committed transaction in txnDir: what it placed is
// deleted and what it moved aside is put back. It refuses, naming the
// paths, when a path the commit wrote has changed since. upperDir
// receives what the commit had placed (it is deleted by the caller).
func Undo(txnDir, upperDir string, ids IDMap) error {
	j, err := ReadJournal(txnDir)
	if err != nil {
		return err
	}
	if j.State != StateCommitted {
		return fmt.Errorf("transaction %s is %s, not committed", j.RunID, j.State)
	}
	if err := os.MkdirAll(upperDir, 0o700); err != nil {
		return err
	}
	j.Upper = upperDir
	t, err := openTxn(upperDir, j.Workspace, ids)
	if err != nil {
		return err
	}
	defer t.close()
	if t.aside, err = unix.Open(filepath.Join(txnDir, "aside"), unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0); err != nil {
		return &fs.PathError{Op: "open", Path: txnDir, Err: err}
	}
	conflicts := changedSince(t.ws, j)
	if len(conflicts) > 0 {
		return &ConflictError{Paths: conflicts}
	}
	// Undo needs the upper dir's parents to exist to move entries back.
	for _, s := range j.Steps {
		if s.Kind == OpPlace {
			if err := os.MkdirAll(filepath.Join(upperDir, filepath.Dir(s.Path)), 0o700); err != nil {
				return err
			}
		}
	}
	// Marker first, then the journal: a crash in between leaves a
	// committed journal without the marker, which is still history.
	if err := markCommitted(txnDir, false); err != nil {
		return err
	}
	j.State = StateApplying // an interrupted undo is finished by RecoverAt
	if err := writeJournal(txnDir, j); err != nil {
		return err
	}
	if err := t.rollback(j); err != nil {
		return err
	}
	return os.RemoveAll(txnDir)
}

// ReadJournal reads txnDir's journal.
func ReadJournal(txnDir string) (*Journal, error) {
	b, err := os.ReadFile(filepath.Join(txnDir, "journal.json"))
	if err != nil {
		return nil, err
	}
	var j Journal
	if err := json.Unmarshal(b, &j); err != nil {
		return nil, fmt.Errorf("journal %s: %w", txnDir, err)
	}
	return &j, nil
}

// writeJournal replaces the journal atomically and durably: write a
// temporary file, fsync it, rename it over, fsync the directory.
func writeJournal(txnDir string, j *Journal) error {
	b, err := json.Marshal(j)
	if err != nil {
		return err
	}
	tmp := filepath.Join(txnDir, "journal.json.tmp")
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	if _, err := f.Write(b); err != nil {
		return errors.Join(err, f.Close())
	}
	if err := f.Sync(); err != nil {
		return errors.Join(err, f.Close())
	}
	if err := f.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp, filepath.Join(txnDir, "journal.json")); err != nil {
		return err
	}
	return syncDir(txnDir)
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

func syncfs(fd int) error {
	// syncfs needs a real open file, not an O_PATH one.
	rfd, err := unix.Openat(fd, ".", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return os.NewSyscallError("open", err)
	}
	defer unix.Close(rfd)
	if err := unix.Syncfs(rfd); err != nil {
		return os.NewSyscallError("syncfs", err)
	}
	return nil
}

func renameAt(fromDir int, from string, toDir int, to string, flags uint) error {
	if err := unix.Renameat2(fromDir, from, toDir, to, flags); err != nil {
		return &fs.PathError{Op: "rename", Path: from, Err: err}
	}
	return nil
}

func existsAt(dirfd int, name string) bool {
	var st unix.Stat_t
	return unix.Fstatat(dirfd, name, &st, unix.AT_SYMLINK_NOFOLLOW) == nil
}

// identAt describes the workspace entry at rel.
func identAt(root int, rel string) (*Ident, error) {
	var st unix.Stat_t
	if rel == "" {
		if err := unix.Fstat(root, &st); err != nil {
			return nil, err
		}
	} else {
		pfd, name, err := openParent(root, rel)
		if err != nil {
			return nil, err
		}
		defer unix.Close(pfd)
		if err := unix.Fstatat(pfd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			return nil, err
		}
	}
	return &Ident{Ino: st.Ino, Size: st.Size, MTime: st.Mtim.Nano(), Mode: st.Mode, UID: st.Uid, GID: st.Gid}, nil
}

// changedSince lists the paths a committed transaction wrote that are no
// longer as it left them.
func changedSince(ws int, j *Journal) []string {
	placed := map[string]bool{}
	for _, s := range j.Steps {
		if s.Kind == OpPlace {
			placed[s.Path] = true
		}
	}
	var out []string
	for _, s := range j.Steps {
		switch {
		case s.Kind == OpRemove:
			if _, err := identAt(ws, s.Path); err == nil && !placed[s.Path] {
				out = append(out, s.Path) // something new stands where the commit deleted
			}
		case s.After == nil:
		case s.Kind == OpSetMeta:
			// A directory that was already there: other changes in it
			// are someone else's business, only its identity matters.
			now, err := identAt(ws, s.Path)
			if err != nil || now.Ino != s.After.Ino || now.Mode != s.After.Mode {
				out = append(out, s.Path)
			}
		default:
			now, err := identAt(ws, s.Path)
			if err != nil || !sameIdent(*now, *s.After) {
				out = append(out, s.Path)
				continue
			}
			if s.AfterTree != nil {
				tree, err := identTree(ws, s.Path)
				if err != nil || len(tree) != len(s.AfterTree) {
					out = append(out, s.Path)
					continue
				}
				for p, id := range s.AfterTree {
					if got, ok := tree[p]; !ok || !sameIdent(got, id) {
						out = append(out, s.Path)
						break
					}
				}
			}
		}
	}
	return out
}

// sameIdent compares idents; for directories only inode and mode, since
// their times follow their entries, which are compared one by one.
func sameIdent(a, b Ident) bool {
	if a.Mode&unix.S_IFMT == unix.S_IFDIR {
		return a.Ino == b.Ino && a.Mode == b.Mode
	}
	return a == b
}

// identTree describes everything below the directory rel.
func identTree(root int, rel string) (map[string]Ident, error) {
	out := map[string]Ident{}
	var walk func(dir string) error
	walk = func(dir string) error {
		fd, err := openBeneath(root, dir, unix.O_RDONLY|unix.O_DIRECTORY)
		if err != nil {
			return err
		}
		names, err := readNames(fd)
		unix.Close(fd)
		if err != nil {
			return err
		}
		for _, n := range names {
			p := dir + "/" + n
			id, err := identAt(root, p)
			if err != nil {
				return err
			}
			out[p] = *id
			if id.Mode&unix.S_IFMT == unix.S_IFDIR {
				if err := walk(p); err != nil {
					return err
				}
			}
		}
		return nil
	}
	return out, walk(rel)
}

// Fingerprint records the state of every workspace path plan touches (and
// of everything below directories it removes or replaces), so that a
// plan made now can be checked later against a workspace that may have
// changed in the meantime.
func Fingerprint(workspaceDir string, plan *Plan) (map[string]Ident, error) {
	ws, err := unix.Open(workspaceDir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: workspaceDir, Err: err}
	}
	defer unix.Close(ws)
	out := map[string]Ident{}
	for _, op := range plan.Ops {
		id, err := identAt(ws, op.Path)
		if errors.Is(err, unix.ENOENT) {
			continue // absent: recorded by having no entry
		}
		if err != nil {
			return nil, err
		}
		out[op.Path] = *id
		if op.Kind == OpRemove && id.Mode&unix.S_IFMT == unix.S_IFDIR {
			tree, err := identTree(ws, op.Path)
			if err != nil {
				return nil, err
			}
			for p, id := range tree {
				out[p] = id
			}
		}
	}
	return out, nil
}

// Conflicts compares a Fingerprint taken earlier with the workspace now,
// for the same plan, and lists the paths that differ.
func Conflicts(workspaceDir string, plan *Plan, then map[string]Ident) ([]string, error) {
	now, err := Fingerprint(workspaceDir, plan)
	if err != nil {
		return nil, err
	}
	var out []string
	for p, a := range then {
		if b, ok := now[p]; !ok || !sameIdent(a, b) {
			out = append(out, p)
		}
	}
	for p := range now {
		if _, ok := then[p]; !ok {
			out = append(out, p)
		}
	}
	sort.Strings(out)
	return out, nil
}
