package nsjail_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/neonbox/neonbox-ns/internal/testutil"
	"github.com/neonbox/neonbox-ns/nsjail"
	"github.com/neonbox/neonbox-ns/overlay"
)

func (e jailEnv) workspaceOptions() nsjail.WorkspaceOptions {
	return nsjail.WorkspaceOptions{Workspace: e.ws, StateDir: e.state}
}

func TestUndoWalksBackThroughHistory(t *testing.T) {
	e := newJailEnv(t)
	makeFixture(t, e.ws)
	states := []map[string]string{testutil.Snapshot(t, e.ws)}
	scripts := []string{
		"echo v1 >> f.txt; rm -rf dir; mkdir dir; echo new > dir/n; ln -sfn exec.sh link",
		"echo v2 > f.txt; rm hard2; chmod 700 exec.sh; mkdir -p deep/er && echo z > deep/er/z",
		"rm -rf deep; echo back > dir/n",
	}
	for _, s := range scripts {
		r, _, _ := e.run(t, nil, "sh", "-c", s)
		require.Equal(t, nsjail.StatusSuccess, r.Status, r.Error)
		require.True(t, r.Committed)
		states = append(states, testutil.Snapshot(t, e.ws))
	}
	for i := len(scripts); i > 0; i-- {
		res, err := nsjail.Undo(context.Background(), e.workspaceOptions())
		require.NoError(t, err, "undo %d", i)
		assert.NotEmpty(t, res.RunID)
		assert.Equal(t, states[i-1], testutil.Snapshot(t, e.ws), "after undoing run %d", i)
	}
	_, err := nsjail.Undo(context.Background(), e.workspaceOptions())
	assert.ErrorIs(t, err, nsjail.ErrNothingToUndo)
}

func TestUndoRefusesWhenWorkspaceChanged(t *testing.T) {
	e := newJailEnv(t)
	makeFixture(t, e.ws)
	r, _, _ := e.run(t, nil, "sh", "-c", "echo run > f.txt; echo run > added.txt")
	require.True(t, r.Committed)
	require.NoError(t, os.WriteFile(filepath.Join(e.ws, "added.txt"), []byte("edited by a human\n"), 0o644))
	before := testutil.Snapshot(t, e.ws)
	_, err := nsjail.Undo(context.Background(), e.workspaceOptions())
	var ce *overlay.ConflictError
	require.ErrorAs(t, err, &ce)
	assert.Equal(t, []string{"added.txt"}, ce.Paths)
	assert.Equal(t, before, testutil.Snapshot(t, e.ws))
}

func TestHistoryIsBounded(t *testing.T) {
	e := newJailEnv(t)
	for i := 0; i < 4; i++ {
		r, _, _ := e.run(t, func(o *nsjail.Options) { o.KeepHistory = 2 }, "sh", "-c", "echo $$ >> log")
		require.True(t, r.Committed)
	}
	for i := 0; i < 2; i++ {
		_, err := nsjail.Undo(context.Background(), e.workspaceOptions())
		require.NoError(t, err)
	}
	_, err := nsjail.Undo(context.Background(), e.workspaceOptions())
	assert.ErrorIs(t, err, nsjail.ErrNothingToUndo, "only the newest 2 commits are kept")
	b, err := os.ReadFile(filepath.Join(e.ws, "log"))
	require.NoError(t, err)
	assert.Len(t, splitLines(string(b)), 2, "the two oldest runs' lines remain")
}

func splitLines(s string) []string { return strings.Split(strings.TrimSpace(s), "\n") }

// Recovering an interrupted undo finishes it and keeps the rest of the
// history.
func TestRecoveryKeepsHistory(t *testing.T) {
	e := newJailEnv(t)
	for _, s := range []string{"echo 1 > a", "echo 2 > b"} {
		r, _, _ := e.run(t, nil, "sh", "-c", s)
		require.True(t, r.Committed)
	}
	notes, err := nsjail.Recover(context.Background(), e.workspaceOptions())
	require.NoError(t, err)
	assert.Empty(t, notes)

	// Make the newest commit look like an undo that died halfway through
	// its first step, as overlay.Undo leaves it: no committed marker,
	// journal "applying", upper pointing at the undo's scratch dir.
	txns, _ := filepath.Glob(filepath.Join(e.state, "txn", "*", "*"))
	require.Len(t, txns, 2)
	last := txns[len(txns)-1]
	j, err := overlay.ReadJournal(last)
	require.NoError(t, err)
	require.NoError(t, os.Remove(filepath.Join(last, "committed")))
	j.State, j.Upper = overlay.StateApplying, last+".undo"
	require.NoError(t, os.MkdirAll(j.Upper, 0o700))
	b, _ := json.Marshal(j)
	require.NoError(t, os.WriteFile(filepath.Join(last, "journal.json"), b, 0o600))

	notes, err = nsjail.Recover(context.Background(), e.workspaceOptions())
	require.NoError(t, err)
	require.Len(t, notes, 1)
	_, err = os.Stat(filepath.Join(e.ws, "b"))
	assert.True(t, os.IsNotExist(err), "the interrupted undo was finished")
	_, err = nsjail.Undo(context.Background(), e.workspaceOptions())
	require.NoError(t, err, "the older history survived recovery")
	_, err = os.Stat(filepath.Join(e.ws, "a"))
	assert.True(t, os.IsNotExist(err))
}
