package nsjail_test

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/neonbox/neonbox-ns/nsjail"
)

// As root, a workspace owned by a user is written as that user, and what
// the run creates or changes is committed owned by the same user.
func TestWorkspaceOwnerIsKept(t *testing.T) {
	e := newJailEnv(t)
	writeFile(t, filepath.Join(e.ws, "mine.txt"), "mine\n", 0o644)
	for _, p := range []string{e.ws, filepath.Join(e.ws, "mine.txt")} {
		require.NoError(t, os.Lchown(p, 1000, 1000))
	}
	r, out, _ := e.run(t, nil, "sh", "-c", "id -u; id -g; echo more >> mine.txt; mkdir d; echo new > d/new.txt")
	require.Equal(t, nsjail.StatusSuccess, r.Status, r.Error)
	assert.Equal(t, "1000\n1000\n", out)
	for _, p := range []string{"mine.txt", "d", "d/new.txt"} {
		st, err := os.Lstat(filepath.Join(e.ws, p))
		require.NoError(t, err)
		sys := st.Sys().(*syscall.Stat_t)
		assert.Equal(t, [2]uint32{1000, 1000}, [2]uint32{sys.Uid, sys.Gid}, p)
	}
	b, err := os.ReadFile(filepath.Join(e.ws, "mine.txt"))
	require.NoError(t, err)
	assert.Equal(t, "mine\nmore\n", string(b))
}

// Files in the workspace owned by someone other than its owner stay
// theirs and keep their permissions' meaning.
func TestOtherOwnersInWorkspace(t *testing.T) {
	e := newJailEnv(t)
	writeFile(t, filepath.Join(e.ws, "root-only"), "secret\n", 0o600)
	require.NoError(t, os.Lchown(filepath.Join(e.ws, "root-only"), 0, 0))
	require.NoError(t, os.Lchown(e.ws, 1000, 1000))
	r, _, errOut := e.run(t, nil, "cat", "root-only")
	assert.Equal(t, nsjail.StatusExecutionError, r.Status)
	assert.Contains(t, errOut, "Permission denied")
}
