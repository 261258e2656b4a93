package overlay

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/neonbox/neonbox-ns/internal/testutil"
)

type txnCase struct {
	base, ws, up, txn string
	plan              *Plan
	before            map[string]string
}

func newTxnCase(t *testing.T) txnCase {
	t.Helper()
	base := t.TempDir()
	c := txnCase{base: base, ws: filepath.Join(base, "ws"), up: filepath.Join(base, "up"), txn: filepath.Join(base, "txn", "1")}
	makeCommitFixture(t, c.ws, c.up)
	c.before = testutil.Snapshot(t, c.ws)
	p, err := PlanCommit(openTree(t, c.up, true), openTree(t, c.ws, false), Identity)
	require.NoError(t, err)
	c.plan = p
	return c
}

// expected is what a plain Apply of the same fixture gives.
func expectedAfter(t *testing.T) map[string]string {
	t.Helper()
	base := t.TempDir()
	ws, up := filepath.Join(base, "ws"), filepath.Join(base, "up")
	makeCommitFixture(t, ws, up)
	commitDirs(t, up, ws)
	return testutil.Snapshot(t, ws)
}

func TestCommitTransactionMatchesApply(t *testing.T) {
	c := newTxnCase(t)
	require.NoError(t, Commit(c.plan, c.up, c.ws, c.txn, "run1", Identity, nil))
	assert.Equal(t, expectedAfter(t), testutil.Snapshot(t, c.ws))
	j, err := ReadJournal(c.txn)
	require.NoError(t, err)
	assert.Equal(t, StateCommitted, j.State)
	recovered, err := RecoverAt(c.txn, Identity)
	require.NoError(t, err)
	assert.False(t, recovered, "a committed transaction is history, not something to recover")
}

// A committed journal without its marker (a crash between the two, or in
// an undo) is history too, and gets its marker back, so that later runs
// need not read the journal.
func TestCommittedJournalGetsItsMarker(t *testing.T) {
	c := newTxnCase(t)
	require.NoError(t, Commit(c.plan, c.up, c.ws, c.txn, "run1", Identity, nil))
	after := testutil.Snapshot(t, c.ws)
	require.NoError(t, markCommitted(c.txn, false))
	require.False(t, Committed(c.txn))
	recovered, err := RecoverAt(c.txn, Identity)
	require.NoError(t, err)
	assert.False(t, recovered)
	assert.True(t, Committed(c.txn))
	assert.Equal(t, after, testutil.Snapshot(t, c.ws))
	j, err := ReadJournal(c.txn)
	require.NoError(t, err)
	assert.Equal(t, StateCommitted, j.State)
}

// A failure at any step rolls the workspace back before Commit returns.
func TestCommitFailureAtEveryStepRollsBack(t *testing.T) {
	steps := len(newTxnCase(t).plan.Ops)
	require.Greater(t, steps, 10)
	for n := 0; n < steps; n++ {
		for _, phase := range []string{"before", "exchanged"} {
			t.Run(fmt.Sprintf("%d-%s", n, phase), func(t *testing.T) {
				c := newTxnCase(t)
				injected := errors.New("injected")
				err := Commit(c.plan, c.up, c.ws, c.txn, "run1", Identity, func(i int, p string) error {
					if i == n && p == phase {
						return injected
					}
					return nil
				})
				if phase == "exchanged" && err == nil {
					return // step n exchanges nothing
				}
				require.ErrorIs(t, err, injected)
				assert.Equal(t, c.before, testutil.Snapshot(t, c.ws))
				_, err = os.Stat(c.txn)
				assert.True(t, os.IsNotExist(err), "a rolled-back transaction leaves nothing")
			})
		}
	}
}

// A crash at any step leaves a journal from which RecoverAt restores the
// workspace exactly; recovering twice is harmless.
func TestCrashAtEveryStepIsRecovered(t *testing.T) {
	steps := len(newTxnCase(t).plan.Ops)
	for n := 0; n <= steps; n++ {
		for _, phase := range []string{"before", "exchanged"} {
			t.Run(fmt.Sprintf("%d-%s", n, phase), func(t *testing.T) {
				c := newTxnCase(t)
				err := Commit(c.plan, c.up, c.ws, c.txn, "run1", Identity, func(i int, p string) error {
					if i == n && p == phase {
						return ErrCrash
					}
					return nil
				})
				if err == nil {
					return // no such step and phase: the commit completed
				}
				require.ErrorIs(t, err, ErrCrash)
				recovered, err := RecoverAt(c.txn, Identity)
				require.NoError(t, err)
				assert.True(t, recovered)
				assert.Equal(t, c.before, testutil.Snapshot(t, c.ws))
				again, err := RecoverAt(c.txn, Identity)
				require.NoError(t, err)
				assert.True(t, again, "a second recovery finds nothing left and says so")
				assert.Equal(t, c.before, testutil.Snapshot(t, c.ws))
			})
		}
	}
}

func TestUndoRestoresWorkspace(t *testing.T) {
	c := newTxnCase(t)
	require.NoError(t, Commit(c.plan, c.up, c.ws, c.txn, "run1", Identity, nil))
	require.NotEqual(t, c.before, testutil.Snapshot(t, c.ws))
	require.NoError(t, Undo(c.txn, filepath.Join(c.base, "undone"), Identity))
	assert.Equal(t, c.before, testutil.Snapshot(t, c.ws))
	_, err := os.Stat(c.txn)
	assert.True(t, os.IsNotExist(err))
}

func TestUndoRefusesChangedPaths(t *testing.T) {
	c := newTxnCase(t)
	require.NoError(t, Commit(c.plan, c.up, c.ws, c.txn, "run1", Identity, nil))
	require.NoError(t, os.WriteFile(filepath.Join(c.ws, "new.txt"), []byte("edited later"), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(c.ws, "gone.txt"), []byte("recreated"), 0o644))
	after := testutil.Snapshot(t, c.ws)
	err := Undo(c.txn, filepath.Join(c.base, "undone"), Identity)
	var ce *ConflictError
	require.ErrorAs(t, err, &ce)
	assert.ElementsMatch(t, []string{"new.txt", "gone.txt"}, ce.Paths)
	assert.Equal(t, after, testutil.Snapshot(t, c.ws), "a refused undo changes nothing")
}

// An undo interrupted at any step is finished by RecoverAt: the
// workspace ends exactly as before the commit, never a mix.
func TestCrashDuringUndoIsFinished(t *testing.T) {
	steps := len(newTxnCase(t).plan.Ops)
	for n := 0; n < steps; n++ {
		for _, phase := range []string{"before", "taken back"} {
			t.Run(fmt.Sprintf("%d-%s", n, phase), func(t *testing.T) {
				c := newTxnCase(t)
				require.NoError(t, Commit(c.plan, c.up, c.ws, c.txn, "run1", Identity, nil))
				rollbackHook = func(i int, p string) error {
					if i == n && p == phase {
						return ErrCrash
					}
					return nil
				}
				err := Undo(c.txn, filepath.Join(c.base, "undone"), Identity)
				rollbackHook = nil
				if phase == "taken back" && err == nil {
					return // step n takes nothing back
				}
				require.ErrorIs(t, err, ErrCrash)
				recovered, err := RecoverAt(c.txn, Identity)
				require.NoError(t, err)
				assert.True(t, recovered)
				assert.Equal(t, c.before, testutil.Snapshot(t, c.ws))
			})
		}
	}
}
