package nsjail_test

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/neonbox/neonbox-ns/internal/testutil"
	"github.com/neonbox/neonbox-ns/nsjail"
	"github.com/neonbox/neonbox-ns/overlay"
)

func hold(o *nsjail.Options) { o.Hold = true }

func TestHoldThenCommit(t *testing.T) {
	e := newJailEnv(t)
	makeFixture(t, e.ws)
	before := testutil.Snapshot(t, e.ws)
	r, _, _ := e.run(t, hold, "sh", "-c", "printf 'hello\\nworld\\n' > f.txt; echo n > new.txt; rm -rf dir")
	require.Equal(t, nsjail.StatusSuccess, r.Status, r.Error)
	assert.True(t, r.Held)
	assert.False(t, r.Committed)
	assert.False(t, r.RollbackPerformed)
	assert.Equal(t, before, testutil.Snapshot(t, e.ws), "held: nothing applied yet")

	runs, err := nsjail.ListHeld(e.state)
	require.NoError(t, err)
	require.Len(t, runs, 1)
	assert.Equal(t, r.ID, runs[0].ID)
	assert.Equal(t, e.ws, runs[0].Workspace)
	assert.Greater(t, runs[0].SizeBytes, int64(0))

	h, err := nsjail.LoadHeld(e.state, r.ID)
	require.NoError(t, err)
	plan, err := h.Diff()
	require.NoError(t, err)
	assert.Equal(t, r.Changes, plan.Changes)
	var patch bytes.Buffer
	require.NoError(t, h.Patch(&patch))
	assert.Contains(t, patch.String(), "--- a/f.txt\n+++ b/f.txt\n@@ -1 +1,2 @@\n hello\n+world\n")
	assert.Contains(t, patch.String(), "+++ b/new.txt")

	res, err := nsjail.CommitHeld(context.Background(), e.state, r.ID, 0)
	require.NoError(t, err)
	assert.Len(t, res.Changes.Added, 1)
	b, err := os.ReadFile(filepath.Join(e.ws, "f.txt"))
	require.NoError(t, err)
	assert.Equal(t, "hello\nworld\n", string(b))
	runs, _ = nsjail.ListHeld(e.state)
	assert.Empty(t, runs)

	// A held commit is a commit like any other: it can be undone.
	_, err = nsjail.Undo(context.Background(), e.workspaceOptions())
	require.NoError(t, err)
	assert.Equal(t, before, testutil.Snapshot(t, e.ws))
}

func TestHeldCommitConflicts(t *testing.T) {
	e := newJailEnv(t)
	makeFixture(t, e.ws)
	r, _, _ := e.run(t, hold, "sh", "-c", "echo run > f.txt; echo run > new.txt; echo run > dir/sub/c.txt; rm -rf dir/sub")
	require.True(t, r.Held)
	// The workspace moves on underneath: a changed file, a file created
	// where the run creates one, and a file added below a directory the
	// run deletes.
	require.NoError(t, os.WriteFile(filepath.Join(e.ws, "f.txt"), []byte("human\n"), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(e.ws, "new.txt"), []byte("human\n"), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(e.ws, "dir/sub/human.txt"), []byte("human\n"), 0o644))
	before := testutil.Snapshot(t, e.ws)
	_, err := nsjail.CommitHeld(context.Background(), e.state, r.ID, 0)
	var ce *overlay.ConflictError
	require.ErrorAs(t, err, &ce)
	assert.Equal(t, []string{"dir/sub/human.txt", "f.txt", "new.txt"}, ce.Paths)
	assert.Equal(t, before, testutil.Snapshot(t, e.ws), "a conflict applies nothing")
	require.NoError(t, nsjail.DiscardHeld(e.state, r.ID))
	_, err = nsjail.LoadHeld(e.state, r.ID)
	assert.ErrorIs(t, err, nsjail.ErrNoSuchRun)
	assert.Equal(t, before, testutil.Snapshot(t, e.ws))
}

func TestHeldRunNotTouchingChangedPathsCommits(t *testing.T) {
	e := newJailEnv(t)
	makeFixture(t, e.ws)
	r, _, _ := e.run(t, hold, "sh", "-c", "echo run > new.txt")
	require.NoError(t, os.WriteFile(filepath.Join(e.ws, "f.txt"), []byte("human\n"), 0o644))
	_, err := nsjail.CommitHeld(context.Background(), e.state, r.ID, 0)
	require.NoError(t, err, "changes elsewhere in the workspace do not conflict")
	for name, want := range map[string]string{"new.txt": "run\n", "f.txt": "human\n"} {
		b, err := os.ReadFile(filepath.Join(e.ws, name))
		require.NoError(t, err)
		assert.Equal(t, want, string(b))
	}
}

func TestHeldRunIDsAreChecked(t *testing.T) {
	e := newJailEnv(t)
	for _, id := range []string{"../../etc", "0123456789abcdef", ""} {
		_, err := nsjail.LoadHeld(e.state, id)
		assert.ErrorIs(t, err, nsjail.ErrNoSuchRun, id)
	}
}
