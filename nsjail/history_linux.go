package nsjail

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/neonbox/neonbox-ns/internal/linux"
	"github.com/neonbox/neonbox-ns/overlay"
)

// DefaultKeepHistory is how many committed runs per workspace can be
// undone.
const DefaultKeepHistory = 10

// Commits are transactions kept per workspace in the state dir:
//
//	txn/<workspace key>/<sequence>-<run id>/journal.json
//	txn/<workspace key>/<sequence>-<run id>/aside/...
//
// A journal that says "applying" belongs to a commit that was
// interrupted; the next command that takes the workspace rolls it back.
// One that says "committed" is history, for undo.
func txnRoot(stateDir, workspace string) string {
	return filepath.Join(stateDir, "txn", strings.TrimSuffix(filepath.Base(lockPath(stateDir, workspace)), ".lock"))
}

func newTxnDir(stateDir, workspace, runID string) string {
	return filepath.Join(txnRoot(stateDir, workspace), fmt.Sprintf("%020d-%s", time.Now().UnixNano(), runID))
}

// isTxnName reports whether name is a transaction's: its time (20
// digits), a dash and its run's id.
func isTxnName(name string) bool {
	t, id, ok := strings.Cut(name, "-")
	return ok && len(t) == 20 && strings.Trim(t, "0123456789") == "" && isRunID(id)
}

// txnDirs lists a workspace's transactions, oldest first.
func txnDirs(stateDir, workspace string) ([]string, error) {
	root := txnRoot(stateDir, workspace)
	entries, err := os.ReadDir(root)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []string
	for _, e := range entries {
		if e.IsDir() && isTxnName(e.Name()) { // not an undo's scratch dir
			out = append(out, filepath.Join(root, e.Name()))
		}
	}
	sort.Strings(out)
	return out, nil
}

// recoverWorkspace rolls back interrupted commits on workspace; the
// caller holds its lock. It returns one line per recovered commit. If
// there is one to look at, before (if not nil) is called first, once,
// and its error ends the recovery.
func recoverWorkspace(stateDir, workspace string, before func() error) ([]string, error) {
	dirs, err := txnDirs(stateDir, workspace)
	if err != nil {
		return nil, err
	}
	var notes []string
	for i := len(dirs) - 1; i >= 0; i-- {
		d := dirs[i]
		if overlay.Committed(d) {
			continue // history; its journal need not be read
		}
		if before != nil {
			if err := before(); err != nil {
				return notes, err
			}
			before = nil
		}
		j, _ := overlay.ReadJournal(d)
		recovered, err := overlay.RecoverAt(d, overlay.Identity)
		if err != nil {
			return notes, fmt.Errorf("recover interrupted commit %s: %w", filepath.Base(d), err)
		}
		if !recovered {
			continue
		}
		run := filepath.Base(d)
		if j != nil {
			run = j.RunID
			// Whoever was committing (a run) or undoing died: its
			// run dir, or the undo's scratch dir, is abandoned.
			left := j.Upper
			var err error
			switch {
			case filepath.Dir(filepath.Dir(left)) == filepath.Join(stateDir, "runs"):
				// A run dir: the run's cgroup goes first.
				left = filepath.Dir(left)
				err = runDir{path: left}.removeAbandoned()
			case strings.HasSuffix(left, ".undo"):
				err = linux.RemoveAll(left)
			}
			if err != nil {
				notes = append(notes, fmt.Sprintf("could not remove %s, left by %s: %v", left, run, err))
			}
		}
		notes = append(notes, fmt.Sprintf("recovered %s: rolled back the interrupted commit of run %s; the workspace is as it was before that run", workspace, run))
	}
	return notes, nil
}

// pruneHistory keeps the newest keep committed transactions.
func pruneHistory(stateDir, workspace string, keep int) error {
	dirs, err := txnDirs(stateDir, workspace)
	if err != nil {
		return err
	}
	var errs []error
	for len(dirs) > keep {
		errs = append(errs, linux.RemoveAll(dirs[0]))
		dirs = dirs[1:]
	}
	return errors.Join(errs...)
}

// WorkspaceOptions are the options of the calls that work on a
// workspace's history rather than running anything (Undo, Recover).
type WorkspaceOptions struct {
	// Workspace is the workspace ("" means the working directory),
	// StateDir its state dir ("" means DefaultStateDir()), LockTimeout
	// as in Options.
	Workspace   string
	StateDir    string
	LockTimeout time.Duration
}

func (w *WorkspaceOptions) normalize() error {
	o := Options{Command: []string{"-"}, Workspace: w.Workspace, StateDir: w.StateDir, LockTimeout: w.LockTimeout}
	if err := o.normalize(); err != nil {
		return err
	}
	w.Workspace, w.StateDir, w.LockTimeout = o.Workspace, o.StateDir, o.LockTimeout
	return nil
}

// take checks w, takes the workspace for itself, rolls back an
// interrupted commit and sweeps abandoned runs: what every command on a
// workspace's state does first. The notes say what was recovered.
func (w *WorkspaceOptions) take(ctx context.Context) (*workspaceLock, []string, error) {
	if err := w.normalize(); err != nil {
		return nil, nil, err
	}
	lock, err := lockWorkspace(ctx, w.StateDir, w.Workspace, w.LockTimeout, false, nil)
	if err != nil {
		return nil, nil, err
	}
	notes, err := recoverWorkspace(w.StateDir, w.Workspace, nil)
	if err != nil {
		lock.release()
		return nil, notes, err
	}
	return lock, append(notes, sweepAbandoned(w.StateDir)...), nil
}

// Recover rolls back an interrupted commit on a workspace, if there is
// one, and returns what it did.
func Recover(ctx context.Context, w WorkspaceOptions) ([]string, error) {
	lock, notes, err := w.take(ctx)
	if err != nil {
		return notes, err
	}
	defer lock.release()
	return notes, nil
}

// ErrNothingToUndo is returned by Undo when a workspace has no history.
var ErrNothingToUndo = errors.New("nothing to undo")

// UndoResult says which run Undo reverted.
type UndoResult struct {
	// RunID is the run whose commit was reverted, Committed when it was
	// committed (RFC 3339), Notes what was recovered or cleaned up
	// first.
	RunID     string   `json:"run_id"`
	Committed string   `json:"committed_at"`
	Notes     []string `json:"notes,omitempty"`
}

// Undo reverts the last committed run on a workspace: what it added is
// removed and what it replaced or deleted comes back, exactly. It refuses
// with an *overlay.ConflictError when a path the commit wrote has
// changed since. Repeating it walks back through the history.
func Undo(ctx context.Context, w WorkspaceOptions) (*UndoResult, error) {
	lock, notes, err := w.take(ctx)
	if err != nil {
		return nil, err
	}
	defer lock.release()
	dirs, err := txnDirs(w.StateDir, w.Workspace)
	if err != nil {
		return nil, err
	}
	if len(dirs) == 0 {
		return nil, fmt.Errorf("%w: %s has no committed run in its history", ErrNothingToUndo, w.Workspace)
	}
	last := dirs[len(dirs)-1]
	j, err := overlay.ReadJournal(last)
	if err != nil {
		return nil, err
	}
	// What the commit had placed goes back into a scratch upper dir on
	// the same filesystem, then away.
	scratch := last + ".undo"
	defer linux.RemoveAll(scratch)
	if err := overlay.Undo(last, scratch, overlay.Identity); err != nil {
		return nil, err
	}
	return &UndoResult{RunID: j.RunID, Committed: j.Created.Format(time.RFC3339), Notes: notes}, nil
}
