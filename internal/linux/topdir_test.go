package linux_test

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/neonbox/neonbox-ns/internal/linux"
)

func TestMarkTopDir(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "runs")
	require.NoError(t, os.Mkdir(dir, 0o711))
	f, err := os.Open(dir)
	require.NoError(t, err)
	defer f.Close()
	before, err := unix.IoctlGetUint32(int(f.Fd()), unix.FS_IOC_GETFLAGS)
	if errors.Is(err, unix.ENOTTY) || errors.Is(err, unix.EOPNOTSUPP) {
		t.Skip("the temp dir's filesystem has no inode flags (chattr)")
	}
	require.NoError(t, err)
	assert.Zero(t, before&0x00020000)

	ok, err := linux.MarkTopDir(dir)
	require.NoError(t, err)
	assert.True(t, ok)
	after, err := unix.IoctlGetUint32(int(f.Fd()), unix.FS_IOC_GETFLAGS)
	require.NoError(t, err)
	assert.Equal(t, before|0x00020000, after, "only +T is added")

	ok, err = linux.MarkTopDir(dir) // already marked
	require.NoError(t, err)
	assert.True(t, ok)
}

func TestMarkTopDirOnAFilesystemWithoutFlags(t *testing.T) {
	if _, err := os.Stat("/proc/self"); err != nil {
		t.Skip("no /proc")
	}
	ok, err := linux.MarkTopDir("/proc/self")
	assert.False(t, ok)
	assert.Error(t, err)
}
