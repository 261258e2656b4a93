package nsjail

import (
	"context"
	bin "encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/neonbox/neonbox-ns/internal/testutil"
)

// spareFixture makes a workspace and a state dir whose spare dir holds
// one spare, as the teardown helper leaves it after a run that changed
// the workspace root's attributes: it returns the options, the stat of
// the workspace root, the ids and the spare's path. The spare carries a
// marker xattr of its own (user.spare on the run dir), by which a test
// tells it from a run dir made afresh.
func spareFixture(t *testing.T) (Options, unix.Stat_t, idPlan, string) {
	t.Helper()
	o, ws, ids := preparedRun(t, 0o750)
	// A run dir made and filled as a run's, then emptied as the helper
	// empties it, after the run chmod'ed the root and set an ACL and a
	// user xattr on it.
	old, err := createRunDir(o.StateDir, newRunID(), o.Workspace, ids, &ws, 0)
	require.NoError(t, err)
	upper := old.upper()
	require.NoError(t, os.Chmod(upper, 0o777))
	require.NoError(t, unix.Setxattr(upper, "user.left", []byte("by the last run"), 0))
	require.NoError(t, unix.Setxattr(upper, "system.posix_acl_access", aclUserRWX(1000), 0))
	require.NoError(t, unix.Setxattr(upper, "security.capability", capNetBind(), 0))
	require.NoError(t, unix.Setxattr(old.path, "user.spare", []byte("1"), 0))
	require.NoError(t, os.Remove(filepath.Join(old.path, "owner")))
	spare := old.spare()
	require.DirExists(t, filepath.Dir(spare), "made for the helper by the run that found no spare")
	require.NoError(t, os.Rename(old.path, spare))
	// Emptied long ago.
	long := time.Now().Add(-2 * time.Hour)
	require.NoError(t, os.Chtimes(spare, long, long))
	return o, ws, ids, spare
}

// aclUserRWX is a POSIX ACL (the system.posix_acl_access xattr) that
// gives uid rwx, besides the mode's entries.
func aclUserRWX(uid uint32) []byte {
	const version, userObj, user, groupObj, mask, other = 2, 0x01, 0x02, 0x04, 0x10, 0x20
	b := bin.LittleEndian.AppendUint32(nil, version)
	for _, e := range []struct {
		tag, perm uint16
		id        uint32
	}{{userObj, 7, ^uint32(0)}, {user, 7, uid}, {groupObj, 5, ^uint32(0)}, {mask, 7, ^uint32(0)}, {other, 5, ^uint32(0)}} {
		b = bin.LittleEndian.AppendUint16(b, e.tag)
		b = bin.LittleEndian.AppendUint16(b, e.perm)
		b = bin.LittleEndian.AppendUint32(b, e.id)
	}
	return b
}

// capNetBind is a security.capability xattr (VFS_CAP_REVISION_2) with
// CAP_NET_BIND_SERVICE permitted.
func capNetBind() []byte {
	b := bin.LittleEndian.AppendUint32(nil, 0x02000000)
	b = bin.LittleEndian.AppendUint32(b, 1<<unix.CAP_NET_BIND_SERVICE)
	return append(b, make([]byte, 12)...)
}

// isSpare reports whether the run dir rd is the fixture's spare.
func isSpare(rd runDir) bool {
	_, err := getxattr(rd.path, "user.spare")
	return err == nil
}

// A run takes a spare run dir and fill makes it as good as new: the
// upper root has the workspace root's mode and no xattr or ACL of the
// run before.
func TestRunDirTakesASpare(t *testing.T) {
	o, ws, ids, spare := spareFixture(t)
	rd, err := reserveRunDir(o.StateDir, newRunID(), true)
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, rd.remove()) })
	assert.NoDirExists(t, spare, "the spare was taken")
	assert.True(t, isSpare(rd), "the spare is the run dir")
	require.NoError(t, rd.fill(o.Workspace, ids, &ws, 0))
	var st unix.Stat_t

	require.NoError(t, unix.Stat(rd.upper(), &st))
	assert.Equal(t, ws.Mode&0o7777, st.Mode&0o7777)
	names, err := listNames(rd.upper())
	require.NoError(t, err)
	assert.Empty(t, names, "xattrs, ACLs and capabilities of the last run")
	assert.NoFileExists(t, filepath.Join(rd.path, "owner"), "the owner file is the run's to write")
}

// A --disk run's tmpfs would hide a spare: it makes its run dir afresh
// and leaves the spare for another run.
func TestDiskRunLeavesTheSpare(t *testing.T) {
	o, ws, ids, spare := spareFixture(t)
	rd, err := createRunDir(o.StateDir, newRunID(), o.Workspace, ids, &ws, 16<<20)
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, rd.remove()) })
	assert.DirExists(t, spare)
	assert.False(t, isSpare(rd))
}

// A spare taken has a fresh mtime before its owner file is there: a
// sweep that meets it in between takes it for a run dir being made, not
// for one abandoned when the spare was emptied.
func TestTakenSpareLooksNew(t *testing.T) {
	o, _, _, spare := spareFixture(t)
	path := filepath.Join(o.StateDir, "runs", newRunID())
	claimed, err := claimSpare(o.StateDir, path)
	require.NoError(t, err)
	require.True(t, claimed)
	t.Cleanup(func() { assert.NoError(t, os.RemoveAll(path)) })
	assert.NoDirExists(t, spare)
	assert.Empty(t, sweepAbandoned(o.StateDir))
	assert.DirExists(t, filepath.Join(path, "upper"))
}

// A spare that is not exactly as the helper leaves it is removed, never
// used: the run makes its run dir afresh.
func TestRunDirRefusesAStrangeSpare(t *testing.T) {
	for _, tc := range []struct {
		name  string
		spoil func(t *testing.T, spare string)
	}{
		{"a file left in upper", func(t *testing.T, spare string) {
			require.NoError(t, os.WriteFile(filepath.Join(spare, "upper", "leak"), []byte("x"), 0o644))
		}},
		{"a directory left in work", func(t *testing.T, spare string) {
			require.NoError(t, os.Mkdir(filepath.Join(spare, "work", "work"), 0))
		}},
		{"an owner file", func(t *testing.T, spare string) {
			require.NoError(t, os.WriteFile(filepath.Join(spare, "owner"), []byte("1 2"), 0o600))
		}},
		{"upper a symlink", func(t *testing.T, spare string) {
			require.NoError(t, os.Remove(filepath.Join(spare, "upper")))
			require.NoError(t, os.Symlink(t.TempDir(), filepath.Join(spare, "upper")))
		}},
		{"a trusted xattr on upper", func(t *testing.T, spare string) {
			require.NoError(t, unix.Setxattr(filepath.Join(spare, "upper"), "trusted.left", []byte("x"), 0))
		}},
		{"an inode flag on upper only", func(t *testing.T, spare string) {
			fd, err := unix.Open(filepath.Join(spare, "upper"), unix.O_RDONLY|unix.O_DIRECTORY, 0)
			require.NoError(t, err)
			defer unix.Close(fd)
			flags, err := unix.IoctlGetUint32(fd, unix.FS_IOC_GETFLAGS)
			if err != nil {
				testutil.Skip(t, "no inode flags on this filesystem: "+err.Error())
			}
			require.NoError(t, unix.IoctlSetPointerInt(fd, unix.FS_IOC_SETFLAGS, int(flags|fsNodumpFL)))
		}},
		{"group-writable", func(t *testing.T, spare string) {
			require.NoError(t, os.Chmod(spare, 0o771))
		}},
		{"upper grown", func(t *testing.T, spare string) {
			// The last run made many files at the workspace's root.
			upper := filepath.Join(spare, "upper")
			var before, after unix.Stat_t
			require.NoError(t, unix.Stat(upper, &before))
			for i := range 400 {
				require.NoError(t, os.WriteFile(filepath.Join(upper, fmt.Sprintf("a-long-name-to-fill-the-directory-%06d", i)), nil, 0o644))
			}
			require.NoError(t, removeContents(upper))
			require.NoError(t, unix.Stat(upper, &after))
			if after.Size == before.Size {
				testutil.Skip(t, "directories on this filesystem shrink: nothing to show")
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o, ws, ids, spare := spareFixture(t)
			tc.spoil(t, spare)
			rd, err := reserveRunDir(o.StateDir, newRunID(), true)
			require.NoError(t, err)
			t.Cleanup(func() { assert.NoError(t, rd.remove()) })
			assert.NoDirExists(t, spare, "the spare was removed")
			assert.False(t, isSpare(rd), "the spare was used")
			require.NoError(t, rd.fill(o.Workspace, ids, &ws, 0))
			assert.Empty(t, listEntries(t, rd.upper()), "a fresh upper dir")
			assert.Empty(t, listEntries(t, filepath.Join(rd.path, "work")), "a fresh work dir")
			assert.ElementsMatch(t, []string{"upper", "work"}, listEntries(t, rd.path))
		})
	}
}

// removeContents removes what dir holds.
func removeContents(dir string) error {
	entries, err := os.ReadDir(dir)
	for _, e := range entries {
		err = errors.Join(err, os.RemoveAll(filepath.Join(dir, e.Name())))
	}
	return err
}

func listEntries(t *testing.T, dir string) []string {
	t.Helper()
	names, err := listDir(dir)
	require.NoError(t, err)
	return names
}

// fsNodumpFL is FS_NODUMP_FL (linux/fs.h), which x/sys/unix lacks.
const fsNodumpFL = 0x40

// AwaitTeardowns reports whether the state dir's run dirs went in time.
func TestAwaitTeardowns(t *testing.T) {
	state := t.TempDir()
	assert.True(t, AwaitTeardowns(state, 0), "no runs/ at all")
	run := filepath.Join(state, "runs", "0123456789abcdef")
	require.NoError(t, os.MkdirAll(run, 0o711))
	assert.False(t, AwaitTeardowns(state, 20*time.Millisecond), "a run dir stays")
	go func() {
		time.Sleep(20 * time.Millisecond)
		_ = os.Remove(run)
	}()
	assert.True(t, AwaitTeardowns(state, time.Minute), "the run dir goes")
}

// The overlay leaves no bookkeeping xattr on the upper root of a run that
// changed nothing there (uuid=off: overlay.MountData), which the next run
// taking the dir as a spare would have to remove.
func TestUpperRootKeepsNoOverlayUUID(t *testing.T) {
	o, _, _ := preparedRun(t, 0o755)
	o.Command = []string{"sh", "-c", "echo x > new.txt"}
	o.Hold = true
	r, err := Run(context.Background(), o)
	require.NoError(t, err)
	require.Equal(t, StatusSuccess, r.Status, "%+v", r.Error)
	h, err := LoadHeld(o.StateDir, r.ID)
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, DiscardHeld(o.StateDir, r.ID)) })
	names, err := listNames(h.upper())
	require.NoError(t, err)
	assert.NotContains(t, names, "user.overlay.uuid")
	assert.FileExists(t, filepath.Join(h.upper(), "new.txt"), "the run wrote through the overlay")
}
