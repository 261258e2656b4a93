package linux

import (
	"bytes"
	"io/fs"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

func TestReadFileReadsWhole(t *testing.T) {
	dir := t.TempDir()
	for _, size := range []int{0, 1, 4095, 4096, 4097, 100_000} {
		want := bytes.Repeat([]byte("0123456789abcdef"), size/16+1)[:size]
		p := filepath.Join(dir, "f")
		require.NoError(t, os.WriteFile(p, want, 0o600))
		got, err := ReadFile(p)
		require.NoError(t, err, "size %d", size)
		assert.Equal(t, want, got, "size %d", size)
	}
	// A /proc file, whose size stat does not know.
	got, err := ReadFile("/proc/self/mountinfo")
	require.NoError(t, err)
	assert.Contains(t, string(got), " / / ")

	_, err = ReadFile(filepath.Join(dir, "missing"))
	assert.ErrorIs(t, err, fs.ErrNotExist)
	var pe *fs.PathError
	assert.ErrorAs(t, err, &pe)
}

func TestWriteFileFlags(t *testing.T) {
	p := filepath.Join(t.TempDir(), "f")
	assert.ErrorIs(t, WriteFile(p, []byte("x"), 0, 0), fs.ErrNotExist, "without O_CREAT it creates nothing")
	require.NoError(t, WriteFile(p, []byte("first"), unix.O_CREAT|unix.O_EXCL, 0o640))
	st, err := os.Stat(p)
	require.NoError(t, err)
	assert.Equal(t, fs.FileMode(0o640)&^umask(), st.Mode().Perm())
	assert.ErrorIs(t, WriteFile(p, []byte("again"), unix.O_CREAT|unix.O_EXCL, 0o600), fs.ErrExist)
	require.NoError(t, WriteFile(p, []byte("2nd"), unix.O_TRUNC, 0))
	b, err := os.ReadFile(p)
	require.NoError(t, err)
	assert.Equal(t, "2nd", string(b))
}

func umask() fs.FileMode {
	m := unix.Umask(0)
	unix.Umask(m)
	return fs.FileMode(m)
}

func TestRandomFillsTheWholeBuffer(t *testing.T) {
	for _, size := range []int{0, 1, 8, 300} {
		a, b := make([]byte, size), make([]byte, size)
		require.NoError(t, Random(a), "size %d", size)
		require.NoError(t, Random(b), "size %d", size)
		if size >= 8 {
			// Two fills of 8 or more random bytes never match, and
			// neither ends in 8 zero bytes (odds of 2^-64).
			assert.NotEqual(t, a, b, "size %d", size)
			assert.NotEqual(t, make([]byte, 8), a[size-8:], "size %d: the tail is unfilled", size)
		}
	}
}
