package linux_test

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/neonbox/neonbox-ns/internal/linux"
	"github.com/neonbox/neonbox-ns/internal/testutil"
)

func TestRemoveAllRemovesATreeButNotWhatLinksPointAt(t *testing.T) {
	base := t.TempDir()
	outside := filepath.Join(base, "outside")
	require.NoError(t, os.MkdirAll(filepath.Join(outside, "d"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(outside, "f"), []byte("keep"), 0o644))

	root := filepath.Join(base, "tree")
	require.NoError(t, os.MkdirAll(filepath.Join(root, "a", "b", "c"), 0o755))
	require.NoError(t, os.MkdirAll(filepath.Join(root, "empty"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(root, "a", "b", "c", "f"), []byte("x"), 0o644))
	require.NoError(t, os.Symlink(outside, filepath.Join(root, "a", "dirlink")))
	require.NoError(t, os.Symlink(filepath.Join(outside, "f"), filepath.Join(root, "filelink")))
	require.NoError(t, unix.Mkfifo(filepath.Join(root, "a", "fifo"), 0o600))
	// Overlay leaves work/work with mode 0.
	require.NoError(t, os.MkdirAll(filepath.Join(root, "work", "work", "incompat"), 0o755))
	require.NoError(t, os.Chmod(filepath.Join(root, "work", "work"), 0))
	// More entries than one getdents64 call returns.
	many := filepath.Join(root, "many")
	require.NoError(t, os.Mkdir(many, 0o755))
	for i := range 1500 {
		require.NoError(t, os.WriteFile(filepath.Join(many, fmt.Sprintf("file-with-a-longish-name-%04d", i)), nil, 0o644))
	}

	require.NoError(t, linux.RemoveAll(root))
	assert.NoDirExists(t, root)
	assert.FileExists(t, filepath.Join(outside, "f"), "a symlink's target stays")
	assert.DirExists(t, filepath.Join(outside, "d"))

	require.NoError(t, linux.RemoveAll(root), "a missing path is not an error")
	require.NoError(t, linux.RemoveAll(filepath.Join(base, "no", "such")))
}

func TestRemoveAllOfAFileOrLink(t *testing.T) {
	base := t.TempDir()
	f := filepath.Join(base, "f")
	require.NoError(t, os.WriteFile(f, []byte("x"), 0o644))
	l := filepath.Join(base, "l")
	require.NoError(t, os.Symlink(base, l))

	require.NoError(t, linux.RemoveAll(l))
	assert.NoFileExists(t, l)
	assert.DirExists(t, base, "the link goes, not what it points at")
	require.NoError(t, linux.RemoveAll(f))
	assert.NoFileExists(t, f)
}

// A mount point below the tree is refused, and what is mounted there is
// left whole; the rest goes.
func TestRemoveAllDoesNotGoThroughAMount(t *testing.T) {
	testutil.RequireRoot(t)
	base := t.TempDir()
	mounted := filepath.Join(base, "mounted")
	require.NoError(t, os.Mkdir(mounted, 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(mounted, "precious"), []byte("keep"), 0o644))

	root := filepath.Join(base, "tree")
	mnt := filepath.Join(root, "sub", "mnt")
	require.NoError(t, os.MkdirAll(mnt, 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(root, "other"), nil, 0o644))
	require.NoError(t, unix.Mount(mounted, mnt, "", unix.MS_BIND, ""))
	t.Cleanup(func() { _ = unix.Unmount(mnt, unix.MNT_DETACH) })

	err := linux.RemoveAll(root)
	require.ErrorIs(t, err, linux.ErrMountPoint)
	assert.Contains(t, err.Error(), mnt)
	assert.FileExists(t, filepath.Join(mounted, "precious"))
	assert.FileExists(t, filepath.Join(mnt, "precious"))
	assert.NoFileExists(t, filepath.Join(root, "other"))

	// The tree's root as the mount point.
	require.NoError(t, unix.Unmount(mnt, 0))
	require.NoError(t, unix.Mount(mounted, root, "", unix.MS_BIND, ""))
	t.Cleanup(func() { _ = unix.Unmount(root, unix.MNT_DETACH) })
	require.ErrorIs(t, linux.RemoveAll(root), linux.ErrMountPoint)
	assert.FileExists(t, filepath.Join(mounted, "precious"))
}

// A caller that is not root cannot list a directory of its own with mode
// 0 (overlay's work/work in a rootless run) until it makes it listable.
func TestRemoveAllMakesItsOwnDirectoriesListable(t *testing.T) {
	testutil.RequireRoot(t)
	const nobody = 65534
	base := t.TempDir()
	require.NoError(t, os.Chmod(filepath.Dir(base), 0o711)) // the test's own temp dir
	root := filepath.Join(base, "work")
	locked := filepath.Join(root, "work")
	require.NoError(t, os.MkdirAll(filepath.Join(locked, "incompat"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(locked, "f"), nil, 0o644))
	for _, p := range []string{root, locked, filepath.Join(locked, "incompat"), filepath.Join(locked, "f")} {
		require.NoError(t, os.Lchown(p, nobody, nobody))
	}
	require.NoError(t, os.Chmod(locked, 0))
	require.NoError(t, os.Chown(base, nobody, nobody))

	done := make(chan error)
	go func() {
		// Only this thread becomes nobody; it is never unlocked, so Go
		// ends it with the goroutine.
		runtime.LockOSThread()
		if _, _, e := unix.RawSyscall(unix.SYS_SETRESUID, nobody, nobody, nobody); e != 0 {
			done <- e
			return
		}
		done <- linux.RemoveAll(root)
	}()
	require.NoError(t, <-done)
	assert.NoDirExists(t, root)
}
