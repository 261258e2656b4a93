package seccomp

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestDiskCacheReadsBackWhatItWrote(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "seccomp")
	p := DefaultProfile(false)
	key := diskKey(profileBytes(p))
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
	raw := profileBytes(p)
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
	a, b := profileBytes(DefaultProfile(false)), profileBytes(DefaultProfile(true))
	assert.NotEqual(t, diskKey(a), diskKey(b))
	assert.Equal(t, diskKey(a), diskKey(a))
}

// profileBytes is what tells profiles apart in the caches: it must encode
// every field runtime-spec has (a field it skipped would let two
// profiles share one compiled program), and each change of one.
func TestProfileBytesCoversEveryField(t *testing.T) {
	fields := func(v any) []string {
		var names []string
		for i, typ := 0, reflect.TypeOf(v); i < typ.NumField(); i++ {
			names = append(names, typ.Field(i).Name)
		}
		return names
	}
	msg := "runtime-spec's seccomp types changed: encode the new fields in profileBytes, then update this list"
	assert.Equal(t, []string{"DefaultAction", "DefaultErrnoRet", "Architectures", "Flags", "ListenerPath", "ListenerMetadata", "Syscalls"}, fields(specs.LinuxSeccomp{}), msg)
	assert.Equal(t, []string{"Names", "Action", "ErrnoRet", "Args"}, fields(specs.LinuxSyscall{}), msg)
	assert.Equal(t, []string{"Index", "Value", "ValueTwo", "Op"}, fields(specs.LinuxSeccompArg{}), msg)

	one := uint(1)
	arg := specs.LinuxSeccompArg{Index: 1, Value: 2, ValueTwo: 3, Op: specs.OpEqualTo}
	base := func() *specs.LinuxSeccomp {
		return &specs.LinuxSeccomp{
			DefaultAction: specs.ActAllow, Architectures: []specs.Arch{specs.ArchX86_64},
			Syscalls: []specs.LinuxSyscall{{Names: []string{"a", "b"}, Action: specs.ActErrno, Args: []specs.LinuxSeccompArg{arg}}},
		}
	}
	seen := map[string]string{string(profileBytes(base())): "base"}
	for name, change := range map[string]func(p *specs.LinuxSeccomp){
		"DefaultAction":    func(p *specs.LinuxSeccomp) { p.DefaultAction = specs.ActKill },
		"DefaultErrnoRet":  func(p *specs.LinuxSeccomp) { p.DefaultErrnoRet = &one },
		"Architectures":    func(p *specs.LinuxSeccomp) { p.Architectures = append(p.Architectures, specs.ArchX86) },
		"Flags":            func(p *specs.LinuxSeccomp) { p.Flags = []specs.LinuxSeccompFlag{specs.LinuxSeccompFlagLog} },
		"ListenerPath":     func(p *specs.LinuxSeccomp) { p.ListenerPath = "/x" },
		"ListenerMetadata": func(p *specs.LinuxSeccomp) { p.ListenerMetadata = "x" },
		"Syscalls":         func(p *specs.LinuxSeccomp) { p.Syscalls = append(p.Syscalls, p.Syscalls[0]) },
		"Names":            func(p *specs.LinuxSeccomp) { p.Syscalls[0].Names = []string{"ab"} },
		"Action":           func(p *specs.LinuxSeccomp) { p.Syscalls[0].Action = specs.ActKill },
		"ErrnoRet":         func(p *specs.LinuxSeccomp) { p.Syscalls[0].ErrnoRet = &one },
		"Args":             func(p *specs.LinuxSeccomp) { p.Syscalls[0].Args = nil },
		"Index":            func(p *specs.LinuxSeccomp) { p.Syscalls[0].Args[0].Index = 0 },
		"Value":            func(p *specs.LinuxSeccomp) { p.Syscalls[0].Args[0].Value = 0 },
		"ValueTwo":         func(p *specs.LinuxSeccomp) { p.Syscalls[0].Args[0].ValueTwo = 0 },
		"Op":               func(p *specs.LinuxSeccomp) { p.Syscalls[0].Args[0].Op = specs.OpNotEqual },
	} {
		p := base()
		change(p)
		key := string(profileBytes(p))
		assert.NotContains(t, seen, key, "%s: encodes like %s", name, seen[key])
		seen[key] = name
	}
}

func TestCompileInCompilesTheProfile(t *testing.T) {
	p := DefaultProfile(false)
	p.Syscalls = p.Syscalls[:len(p.Syscalls)-1] // a profile no other test compiles
	a, err := CompileIn(t.TempDir(), p)
	require.NoError(t, err)
	want, err := compile(p)
	require.NoError(t, err)
	assert.Equal(t, want, a.BPF)
	_, hash := profileHash(p)
	assert.Equal(t, hash, a.Hash)
}

// The default profile's program is kept under the binary's identity too,
// and a new process reads it back by that name without building the
// profile; what it cannot trust, or what is not a hash and a whole
// program, it ignores.
func TestDefaultProgramKeptByBinary(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "seccomp")
	want, err := CompileIn(dir, DefaultProfile(true))
	require.NoError(t, err)
	got, err := compileDefaultIn(dir, true)
	require.NoError(t, err)
	assert.Equal(t, want, got)
	name, err := defaultKey(true)
	require.NoError(t, err)
	other, err := defaultKey(false)
	require.NoError(t, err)
	assert.NotEqual(t, name, other)
	path := filepath.Join(dir, name+".default")
	require.FileExists(t, path)

	// Read back by name: a planted (valid) program is what comes back.
	allow := []byte{0x06, 0, 0, 0, 0, 0, 0xff, 0x7f}
	hash := strings.Repeat("a", hashLen)
	require.NoError(t, os.WriteFile(path, append([]byte(hash), allow...), 0o600))
	got, err = compileDefaultIn(dir, true)
	require.NoError(t, err)
	assert.Equal(t, &Program{BPF: allow, Hash: hash}, got)

	for name, plant := range map[string]func(){
		"writable by others":  func() { require.NoError(t, os.Chmod(path, 0o622)) },
		"a hash alone":        func() { require.NoError(t, os.WriteFile(path, []byte(hash), 0o600)) },
		"not a whole program": func() { require.NoError(t, os.WriteFile(path, append([]byte(hash), allow[:5]...), 0o600)) },
	} {
		t.Run(name, func(t *testing.T) {
			require.NoError(t, os.WriteFile(path, append([]byte(hash), allow...), 0o600))
			plant()
			got, err := compileDefaultIn(dir, true)
			require.NoError(t, err)
			assert.Equal(t, want, got, "compiled, not read back")
		})
	}
}
