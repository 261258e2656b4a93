package seccomp

import (
	"crypto/sha256"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	libseccomp "github.com/seccomp/libseccomp-golang"
	"golang.org/x/sys/unix"

	"github.com/neonbox/neonbox-ns/internal/linux"
)

// cacheFormat changes when what a cached file holds, or how its key is
// made, changes.
const cacheFormat = "neonbox-seccomp-bpf-3"

// CompileIn is Compile with a cache on disk in dir: a program compiled
// by an earlier process for the same profile, libseccomp version and
// architecture is read back instead of compiled again (each new process,
// such as one neonbox-ns exec, would otherwise pay about 0.6 ms). What
// is in dir is loaded into jails, so dir must be writable by the caller
// alone (the state dir, 0700): a cached file is used only if the caller
// owns it and nobody else may write it. A cache that cannot be read or
// written is not an error; the profile is compiled instead.
func CompileIn(dir string, p *specs.LinuxSeccomp) (*Program, error) {
	return compileCached(p, func(raw []byte) ([]byte, error) { return loadOrCompile(dir, diskKey(raw), p) })
}

// CompileDefaultIn is CompileIn(dir, DefaultProfile(subprocess)), done
// once per process. The program is also kept in dir under this binary's
// identity (defaultKey) and read back by it, so that a new process need
// not build and hash the default profile to find it (0.1 ms of a cold
// start).
func CompileDefaultIn(dir string, subprocess bool) (*Program, error) {
	return diskDefaults[slot(subprocess)].get(func() (*Program, error) { return compileDefaultIn(dir, subprocess) })
}

func compileDefaultIn(dir string, subprocess bool) (*Program, error) {
	name, nameErr := defaultKey(subprocess)
	if nameErr == nil {
		if prog, err := readDefault(filepath.Join(dir, name+".default")); err == nil {
			return prog, nil
		}
	}
	prog, err := CompileIn(dir, DefaultProfile(subprocess))
	if err == nil && nameErr == nil {
		_ = writeCached(dir, name+".default", append([]byte(prog.Hash), prog.BPF...))
	}
	return prog, err
}

// defaultKey names the default profile's program as this binary makes
// it. The profile is the binary's own code, so the binary's identity (the
// device, inode, size and modification time of /proc/self/exe) stands for
// it, hashed as diskKey hashes a profile's encoding, with libseccomp's
// version (a shared libseccomp can change under the binary). The files
// are told apart by their extension (.default, .bpf).
func defaultKey(subprocess bool) (string, error) {
	var st unix.Stat_t
	if err := unix.Stat("/proc/self/exe", &st); err != nil {
		return "", &fs.PathError{Op: "stat", Path: "/proc/self/exe", Err: err}
	}
	return diskKey(fmt.Appendf(nil, "default\x00%t\x00%d:%d:%d:%d.%d", subprocess,
		st.Dev, st.Ino, st.Size, st.Mtim.Sec, st.Mtim.Nsec)), nil
}

// hashLen is the length of a Program's Hash (profileHash).
const hashLen = 32

// readDefault reads what compileDefaultIn keeps under defaultKey: the
// profile's hash, then its program.
func readDefault(path string) (*Program, error) {
	b, err := readCached(path, hashLen)
	if err != nil {
		return nil, err
	}
	return &Program{Hash: string(b[:hashLen]), BPF: b[hashLen:]}, nil
}

// diskKey names the compiled program of the profile whose encoding
// (profileBytes) is raw: the profile, the libseccomp that compiles it and
// the architecture it is for.
func diskKey(raw []byte) string {
	major, minor, micro := libseccomp.GetLibraryVersion()
	h := sha256.New()
	fmt.Fprintf(h, "%s\x00%d.%d.%d\x00%s\x00", cacheFormat, major, minor, micro, runtime.GOARCH)
	h.Write(raw)
	return fmt.Sprintf("%x", h.Sum(nil)[:16])
}

func loadOrCompile(dir, key string, p *specs.LinuxSeccomp) ([]byte, error) {
	path := filepath.Join(dir, key+".bpf")
	if bpf, err := readCached(path, 0); err == nil {
		return bpf, nil
	}
	bpf, err := compile(p)
	if err != nil {
		return nil, err
	}
	_ = writeCached(dir, key+".bpf", bpf)
	return bpf, nil
}

// readCached reads a cached program, after prefix bytes of its own, if
// this user owns the file and nobody else may write it (ReadOwnFile:
// plain system calls, as it is on every run's way to its jail).
func readCached(path string, prefix int) ([]byte, error) {
	b, err := linux.ReadOwnFile(path, int64(prefix)+maxBPF)
	if err != nil {
		return nil, err
	}
	if len(b) <= prefix || (len(b)-prefix)%8 != 0 {
		return nil, fmt.Errorf("cached seccomp program %s: bad size %d", path, len(b))
	}
	return b, nil
}

// maxBPF is the size of the longest program the kernel loads
// (BPF_MAXINSNS, 8 bytes each).
const maxBPF = 8 * 0xffff

// writeCached writes bpf to dir/name atomically (a reader sees all of it
// or nothing).
func writeCached(dir, name string, bpf []byte) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	return linux.WriteFileAtomic(dir, name, bpf)
}
