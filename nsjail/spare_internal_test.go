package nsjail

import (
	bin "encoding/binary"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/neonbox/neonbox-ns/internal/testutil"
)

// spareFixture makes a workspace and a state dir whose spare dir holds
// one spare, as the teardown helper leaves it after a run that changed
// the workspace root's attributes: it returns the options, the stat of
// the workspace root and the spare's path.
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
	require.NoError(t, os.Remove(filepath.Join(old.path, "owner")))
	spare := old.spare()
	require.DirExists(t, filepath.Dir(spare), "made for the helper by the run that found no spare")
	require.NoError(t, os.Rename(old.path, spare))
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

// A run takes a spare run dir and fill makes it as good as new: the
// upper root has the workspace root's mode and no xattr or ACL of the
// run before.
func TestRunDirTakesASpare(t *testing.T) {
	o, ws, ids, spare := spareFixture(t)
	var spareSt unix.Stat_t
	require.NoError(t, unix.Lstat(spare, &spareSt))
	spareIno := spareSt.Ino
	rd, err := reserveRunDir(o.StateDir, newRunID())
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, rd.remove()) })
	assert.NoDirExists(t, spare, "the spare was taken")
	var st unix.Stat_t
	require.NoError(t, unix.Lstat(rd.path, &st))
	assert.Equal(t, spareIno, st.Ino, "the spare is the run dir")
	require.NoError(t, rd.fill(o.Workspace, ids, &ws, 0))

	require.NoError(t, unix.Stat(rd.upper(), &st))
	assert.Equal(t, ws.Mode&0o7777, st.Mode&0o7777)
	assert.Empty(t, listNames(rd.upper()), "xattrs and ACLs of the last run")
	owner, err := os.ReadFile(filepath.Join(rd.path, "owner"))
	require.NoError(t, err)
	assert.Equal(t, selfIdentity(), string(owner))
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
	} {
		t.Run(tc.name, func(t *testing.T) {
			o, ws, ids, spare := spareFixture(t)
			tc.spoil(t, spare)
			var before, after unix.Stat_t
			require.NoError(t, unix.Lstat(spare, &before))
			rd, err := reserveRunDir(o.StateDir, newRunID())
			require.NoError(t, err)
			t.Cleanup(func() { assert.NoError(t, rd.remove()) })
			assert.NoDirExists(t, spare, "the spare was removed")
			require.NoError(t, unix.Lstat(rd.path, &after))
			assert.NotEqual(t, before.Ino, after.Ino, "the spare was used")
			require.NoError(t, rd.fill(o.Workspace, ids, &ws, 0))
			assert.Empty(t, listEntries(t, rd.upper()), "a fresh upper dir")
			assert.Empty(t, listEntries(t, filepath.Join(rd.path, "work")), "a fresh work dir")
			assert.ElementsMatch(t, []string{"owner", "upper", "work"}, listEntries(t, rd.path))
		})
	}
}

func listEntries(t *testing.T, dir string) []string {
	t.Helper()
	names, err := listDir(dir, 100)
	require.NoError(t, err)
	return names
}

// fsNodumpFL is FS_NODUMP_FL (linux/fs.h), which x/sys/unix lacks.
const fsNodumpFL = 0x40
