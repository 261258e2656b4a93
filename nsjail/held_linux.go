package nsjail

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"syscall"
	"time"
	"unicode/utf8"

	"github.com/neonbox/neonbox-ns/internal/linux"
	"github.com/neonbox/neonbox-ns/overlay"
	"github.com/neonbox/neonbox-ns/policies"
)

// A held run is a run directory moved to STATE_DIR/held/<id> with a
// meta.json beside its upper dir. It records what the workspace looked
// like, for the paths the run changes, when the run ended: committing
// it after those paths changed underneath is a conflict.

// HeldRun describes a run kept with --hold.
type HeldRun struct {
	// ID, Workspace, Command, Status and ExitCode are the run's, as in
	// its Receipt. Created is when it was held. Rootful says it ran as
	// root, with the jail's ids mapped to unused host ids. Policy is
	// the policy in effect and Protect the run's Options.Protect. Plan
	// is the commit as planned when the run ended, and Base what the
	// workspace held then at the paths Plan changes: CommitHeld
	// compares it with the workspace to find conflicts.
	ID        string                   `json:"id"`
	Workspace string                   `json:"workspace"`
	Command   []string                 `json:"command"`
	Status    Status                   `json:"status"`
	ExitCode  int                      `json:"exit_code"`
	Created   time.Time                `json:"created"`
	Rootful   bool                     `json:"rootful"`
	Policy    *policies.Policy         `json:"policy"`
	Protect   []string                 `json:"protect,omitempty"`
	Plan      *overlay.Plan            `json:"plan"`
	Base      map[string]overlay.Ident `json:"base"`
	// SizeBytes is the size of the held changes (filled in by ListHeld).
	SizeBytes int64 `json:"size_bytes"`

	dir string
}

func (h *HeldRun) upper() string { return filepath.Join(h.dir, "upper") }

func (h *HeldRun) ids() overlay.IDMap {
	return idPlan{rootful: h.Rootful}.commitIDs()
}

// ErrNoSuchRun is returned for a run id that is not held.
var ErrNoSuchRun = errors.New("no such held run")

func heldDir(stateDir string) string { return filepath.Join(stateDir, "held") }

// holdRun moves the finished run's directory aside with its metadata.
func holdRun(o *Options, r *Receipt, rd runDir, plan *overlay.Plan, ids idPlan) error {
	base, err := overlay.Fingerprint(o.Workspace, plan)
	if err != nil {
		return err
	}
	h := HeldRun{
		ID: r.ID, Workspace: o.Workspace, Command: o.Command, Status: r.Status, ExitCode: r.ExitCode,
		Created: time.Now().UTC(), Rootful: ids.rootful, Policy: o.Policy, Protect: o.Protect, Plan: plan, Base: base,
	}
	b, err := json.MarshalIndent(h, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(rd.path, "meta.json"), b, 0o600); err != nil {
		return err
	}
	if err := os.MkdirAll(heldDir(o.StateDir), 0o700); err != nil {
		return err
	}
	return os.Rename(rd.path, filepath.Join(heldDir(o.StateDir), r.ID))
}

// LoadHeld reads the held run id.
func LoadHeld(stateDir, id string) (*HeldRun, error) {
	if stateDir == "" {
		stateDir = DefaultStateDir()
	}
	if !isRunID(id) {
		return nil, fmt.Errorf("%w: %q is not a run id", ErrNoSuchRun, id)
	}
	dir := filepath.Join(heldDir(stateDir), id)
	b, err := os.ReadFile(filepath.Join(dir, "meta.json"))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("%w: %s (neonbox-ns runs lists them)", ErrNoSuchRun, id)
	}
	if err != nil {
		return nil, err
	}
	var h HeldRun
	if err := json.Unmarshal(b, &h); err != nil {
		return nil, fmt.Errorf("held run %s: %w", id, err)
	}
	h.dir = dir
	return &h, nil
}

// ListHeld lists the held runs, oldest first.
func ListHeld(stateDir string) ([]*HeldRun, error) {
	if stateDir == "" {
		stateDir = DefaultStateDir()
	}
	entries, err := os.ReadDir(heldDir(stateDir))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []*HeldRun
	for _, e := range entries {
		h, err := LoadHeld(stateDir, e.Name())
		if err != nil {
			continue // not a held run (or a damaged one: ignore, do not fail the listing)
		}
		h.SizeBytes = treeSize(h.upper())
		out = append(out, h)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Created.Before(out[j].Created) })
	return out, nil
}

func treeSize(dir string) int64 {
	var n int64
	_ = filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			if info, err := d.Info(); err == nil {
				n += info.Size()
			}
		}
		return nil
	})
	return n
}

// Diff plans the held run against the workspace as it is now.
func (h *HeldRun) Diff() (*overlay.Plan, error) {
	return planCommit(h.upper(), h.Workspace, h.ids())
}

// Patch writes a unified diff of the held run's text changes (diff -u);
// binary files are named as such.
func (h *HeldRun) Patch(w io.Writer) error {
	plan, err := h.Diff()
	if err != nil {
		return err
	}
	emit := func(verb string, c overlay.Change, oldPath, newPath string) error {
		if c.Type != "file" {
			fmt.Fprintf(w, "%s %s (%s)\n", verb, c.Path, c.Type)
			return nil
		}
		if binary(oldPath) || binary(newPath) {
			fmt.Fprintf(w, "Binary files a/%s and b/%s differ\n", c.Path, c.Path)
			return nil
		}
		oldLabel, newLabel := "a/"+c.Path, "b/"+c.Path
		if oldPath == os.DevNull {
			oldLabel = os.DevNull
		}
		if newPath == os.DevNull {
			newLabel = os.DevNull
		}
		cmd := exec.Command("diff", "-u", "--label", oldLabel, "--label", newLabel, oldPath, newPath)
		cmd.Stdout = w
		err := cmd.Run()
		var ee *exec.ExitError
		if errors.As(err, &ee) && ee.ExitCode() == 1 {
			return nil // differences found: that is the point
		}
		return err
	}
	for _, c := range plan.Changes.Added {
		if err := emit("added", c, os.DevNull, filepath.Join(h.upper(), c.Path)); err != nil {
			return err
		}
	}
	for _, c := range plan.Changes.Modified {
		if err := emit("modified", c, filepath.Join(h.Workspace, c.Path), filepath.Join(h.upper(), c.Path)); err != nil {
			return err
		}
	}
	for _, c := range plan.Changes.Deleted {
		if err := emit("deleted", c, filepath.Join(h.Workspace, c.Path), os.DevNull); err != nil {
			return err
		}
	}
	return nil
}

// binary reports whether the file at p (not followed) looks binary: a NUL
// byte or invalid UTF-8 in its first 8 KiB.
func binary(p string) bool {
	if p == os.DevNull {
		return false
	}
	f, err := os.OpenFile(p, os.O_RDONLY|syscall.O_NOFOLLOW, 0)
	if err != nil {
		return true
	}
	defer f.Close()
	buf := make([]byte, 8192)
	n, _ := io.ReadFull(f, buf)
	sample := buf[:n]
	if n == len(buf) {
		// The sample may end inside a character.
		for i := 0; i < utf8.UTFMax && len(sample) > 0 && !utf8.RuneStart(sample[len(sample)-1]); i++ {
			sample = sample[:len(sample)-1]
		}
		if len(sample) > 0 {
			sample = sample[:len(sample)-1]
		}
	}
	return bytes.IndexByte(sample, 0) >= 0 || !utf8.Valid(sample)
}

// CommitResult says what committing a held run did.
type CommitResult struct {
	// ID is the held run's. Changes lists what was applied, CommitMS
	// how long it took. ProtectedPathsTouched lists the protected paths
	// the run changed; when set, nothing was applied (ErrProtected).
	ID                    string          `json:"id"`
	Changes               overlay.Changes `json:"changes"`
	CommitMS              float64         `json:"commit_ms"`
	ProtectedPathsTouched []string        `json:"protected_paths_touched,omitempty"`
	// Conflicts lists the paths changed in the workspace since the run
	// ended; when set, nothing was applied.
	// Warnings are problems that did not stop the commit.
	Conflicts []string `json:"conflicts,omitempty"`
	Warnings  []string `json:"warnings,omitempty"`
}

// ErrProtected is returned when a held run changed protected paths.
var ErrProtected = errors.New("the run changed protected paths")

// CommitHeld applies a held run to its workspace, as a transaction (so
// it can be undone). It refuses with an *overlay.ConflictError, applying
// nothing, if a path the run changes was changed in the workspace since
// the run ended, and with ErrProtected if the run touched protected paths.
func CommitHeld(ctx context.Context, stateDir, id string, lockTimeout time.Duration) (*CommitResult, error) {
	h, err := LoadHeld(stateDir, id)
	if err != nil {
		return nil, err
	}
	w := WorkspaceOptions{Workspace: h.Workspace, StateDir: stateDir, LockTimeout: lockTimeout}
	res := &CommitResult{ID: id}
	lock, notes, err := w.take(ctx)
	res.Warnings = notes
	if err != nil {
		return res, err
	}
	defer lock.release()
	conflicts, err := overlay.Conflicts(h.Workspace, h.Plan, h.Base)
	if err != nil {
		return res, err
	}
	if len(conflicts) > 0 {
		res.Conflicts = conflicts
		return res, &overlay.ConflictError{Paths: conflicts}
	}
	plan, err := h.Diff()
	if err != nil {
		return res, err
	}
	res.Changes = plan.Changes
	res.ProtectedPathsTouched = protectedTouched(plan.Changes, slices.Concat(h.Policy.ProtectedPaths, h.Protect))
	if len(res.ProtectedPathsTouched) > 0 {
		return res, fmt.Errorf("%w: %v (neonbox-ns discard %s throws the run away)", ErrProtected, res.ProtectedPathsTouched, id)
	}
	t := time.Now()
	warnings, err := commitPlan(plan, h.upper(), h.Workspace, w.StateDir, id, h.ids(), DefaultKeepHistory)
	res.CommitMS = ms(time.Since(t))
	res.Warnings = append(res.Warnings, warnings...)
	if err != nil {
		return res, err
	}
	return res, linux.RemoveAll(h.dir)
}

// DiscardHeld throws a held run away.
func DiscardHeld(stateDir, id string) error {
	h, err := LoadHeld(stateDir, id)
	if err != nil {
		return err
	}
	return linux.RemoveAll(h.dir)
}
