package seccomp

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestDiskCacheReadsBackWhatItWrote(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "seccomp")
	p := DefaultProfile(false)
	raw, err := json.Marshal(p)
	require.NoError(t, err)
	key := diskKey(raw)
	path := filepath.Join(dir, key+".bpf")

	want, err := compile(p)
	require.NoError(t, err)
	got, err := loadOrCompile(dir, key, p)
	require.NoError(t, err)
	assert.Equal(t, want, got)
	st, err := os.Stat(path)
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o600), st.Mode().Perm())
	dst, err := os.Stat(dir)
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o700), dst.Mode().Perm())

	// What is on disk is what the next process gets: replace it with
	// another (valid) program and it is read back, not recompiled.
	allow := []byte{0x06, 0, 0, 0, 0, 0, 0xff, 0x7f}
	require.NoError(t, os.WriteFile(path, allow, 0o600))
	got, err = loadOrCompile(dir, key, p)
	require.NoError(t, err)
	assert.Equal(t, allow, got)
}

func TestDiskCacheIgnoresFilesItCannotTrust(t *testing.T) {
	p := DefaultProfile(true)
	raw, err := json.Marshal(p)
	require.NoError(t, err)
	want, err := compile(p)
	require.NoError(t, err)
	allow := []byte{0x06, 0, 0, 0, 0, 0, 0xff, 0x7f}
	for name, plant := range map[string]func(path string){
		"writable by others": func(path string) {
			require.NoError(t, os.WriteFile(path, allow, 0o600))
			require.NoError(t, os.Chmod(path, 0o666))
		},
		"not a whole program": func(path string) { require.NoError(t, os.WriteFile(path, allow[:5], 0o600)) },
		"empty":               func(path string) { require.NoError(t, os.WriteFile(path, nil, 0o600)) },
		"a symlink": func(path string) {
			other := path + ".other"
			require.NoError(t, os.WriteFile(other, allow, 0o600))
			require.NoError(t, os.Symlink(other, path))
		},
	} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			require.NoError(t, os.Chmod(dir, 0o700))
			key := diskKey(raw)
			plant(filepath.Join(dir, key+".bpf"))
			got, err := loadOrCompile(dir, key, p)
			require.NoError(t, err)
			assert.Equal(t, want, got, "the planted file must not be used")
		})
	}
}

func TestDiskKeyDependsOnTheProfile(t *testing.T) {
	a, _ := json.Marshal(DefaultProfile(false))
	b, _ := json.Marshal(DefaultProfile(true))
	assert.NotEqual(t, diskKey(a), diskKey(b))
	assert.Equal(t, diskKey(a), diskKey(a))
}

func TestCompileInCompilesTheProfile(t *testing.T) {
	p := DefaultProfile(false)
	p.Syscalls = p.Syscalls[:len(p.Syscalls)-1] // a profile no other test compiles
	a, err := CompileIn(t.TempDir(), p)
	require.NoError(t, err)
	want, err := compile(p)
	require.NoError(t, err)
	assert.Equal(t, want, a.BPF)
	_, hash, err := profileHash(p)
	require.NoError(t, err)
	assert.Equal(t, hash, a.Hash)
}
