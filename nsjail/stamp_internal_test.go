package nsjail

import (
	"crypto/sha256"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// hostStamp changes when an entry of a stamped directory is added,
// removed or replaced, or when a stamped directory appears; it gives none
// while a directory's change is recent.
func TestHostStampFollowsTheDirectories(t *testing.T) {
	base := t.TempDir()
	a, b, later := filepath.Join(base, "a"), filepath.Join(base, "b"), filepath.Join(base, "later")
	require.NoError(t, os.Mkdir(a, 0o755))
	require.NoError(t, os.Mkdir(b, 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(b, "f"), []byte("x"), 0o644))
	oldDirs, oldWindow := stampedDirs, racyWindow
	t.Cleanup(func() { stampedDirs, racyWindow = oldDirs, oldWindow })
	stampedDirs, racyWindow = []string{a, b, later}, 50*time.Millisecond
	settle := func() { time.Sleep(2 * racyWindow) }
	stamp := func() [sha256.Size]byte {
		t.Helper()
		s, ok := hostStamp()
		require.True(t, ok)
		return s
	}

	settle()
	first := stamp()
	assert.Equal(t, first, stamp(), "nothing changed")

	require.NoError(t, os.WriteFile(filepath.Join(a, "new"), nil, 0o644))
	racyWindow = time.Hour
	_, ok := hostStamp()
	assert.False(t, ok, "a change just now may hide the next one")
	racyWindow = 50 * time.Millisecond
	settle()
	added := stamp()
	assert.NotEqual(t, first, added, "an entry added")

	require.NoError(t, os.WriteFile(filepath.Join(base, "g"), []byte("y"), 0o644))
	require.NoError(t, os.Rename(filepath.Join(base, "g"), filepath.Join(b, "f")))
	settle()
	replaced := stamp()
	assert.NotEqual(t, added, replaced, "an entry replaced")

	require.NoError(t, os.Mkdir(later, 0o755))
	settle()
	assert.NotEqual(t, replaced, stamp(), "a stamped directory appeared")
}

// A stamp is taken only for the very base it names, on a host that
// stamps the same, from a file that is this user's alone.
func TestStampedBaseNamesOneBase(t *testing.T) {
	dir := t.TempDir()
	base, other := []byte("base program"), []byte("another")
	host := sha256.Sum256([]byte("host"))
	assert.False(t, stampedBase(dir, base, host), "no stamp yet")
	require.NoError(t, writeBaseStamp(dir, base, host))
	assert.True(t, stampedBase(dir, base, host))
	assert.False(t, stampedBase(dir, other, host), "another base")
	assert.False(t, stampedBase(dir, base, sha256.Sum256([]byte("changed"))), "the host changed")

	file := filepath.Join(dir, baseStampFile)
	require.NoError(t, os.Chmod(file, 0o622))
	assert.False(t, stampedBase(dir, base, host), "writable by others")
	require.NoError(t, os.Chmod(file, 0o600))
	require.NoError(t, os.Rename(file, file+".real"))
	require.NoError(t, os.Symlink(file+".real", file))
	assert.False(t, stampedBase(dir, base, host), "a symlink")
}

// Without the host's directories there is no base to build.
func TestBaseProgramNeedsTheHostView(t *testing.T) {
	o, _, ids := preparedRun(t, 0o755)
	cfg, err := bareJailConfig(&o, ids)
	require.NoError(t, err)
	_, err = baseProgram(cfg)
	assert.Error(t, err)
	cfg.addHostView()
	_, err = baseProgram(cfg)
	assert.NoError(t, err)
}
