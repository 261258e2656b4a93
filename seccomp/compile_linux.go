package seccomp

import (
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	libseccomp "github.com/seccomp/libseccomp-golang"
	"golang.org/x/sys/unix"
)

// Program is a compiled filter: classic BPF instructions as the kernel
// takes them (struct sock_filter, 8 bytes each).
type Program struct {
	BPF []byte
	// Hash identifies the profile it was compiled from.
	Hash string
}

var cache sync.Map // profile hash -> *Program

// defaults holds the compiled default profiles, with and without
// subprocess, so that a run does not rebuild and hash the profile just to
// find it in the cache (diskDefaults: the same for CompileDefaultIn).
var defaults, diskDefaults [2]onceProgram

// onceProgram is a program compiled at most once per process.
type onceProgram struct {
	once sync.Once
	prog *Program
	err  error
}

func (o *onceProgram) get(compile func() (*Program, error)) (*Program, error) {
	o.once.Do(func() { o.prog, o.err = compile() })
	return o.prog, o.err
}

// slot is the index of a default profile in defaults and diskDefaults.
func slot(subprocess bool) int {
	if subprocess {
		return 1
	}
	return 0
}

// CompileDefault is Compile(DefaultProfile(subprocess)), done once per
// process.
func CompileDefault(subprocess bool) (*Program, error) {
	return defaults[slot(subprocess)].get(func() (*Program, error) { return Compile(DefaultProfile(subprocess)) })
}

// Compile turns p into a BPF program, or returns the one compiled for an
// identical profile earlier in this process.
func Compile(p *specs.LinuxSeccomp) (*Program, error) {
	return compileCached(p, func([]byte) ([]byte, error) { return compile(p) })
}

// compileCached returns the program compiled earlier in this process for
// a profile identical to p, or the one build makes for p from its
// encoding (profileBytes).
func compileCached(p *specs.LinuxSeccomp, build func(raw []byte) ([]byte, error)) (*Program, error) {
	raw, hash := profileHash(p)
	if prog, ok := cache.Load(hash); ok {
		return prog.(*Program), nil
	}
	bpf, err := build(raw)
	if err != nil {
		return nil, err
	}
	prog, _ := cache.LoadOrStore(hash, &Program{BPF: bpf, Hash: hash})
	return prog.(*Program), nil
}

// profileHash returns p's encoding (profileBytes) and the hash that
// identifies it.
func profileHash(p *specs.LinuxSeccomp) (raw []byte, hash string) {
	raw = profileBytes(p)
	sum := sha256.Sum256(raw)
	return raw, fmt.Sprintf("%x", sum[:16])
}

// profileBytes encodes every field of p, each length-prefixed, so that
// two profiles encode alike only if they compile alike. Written out
// rather than JSON: encoding/json's first use in a process reflects over
// the types, 0.2 ms of every run's CPU. TestProfileBytesCoversEveryField
// fails when runtime-spec adds a field this does not encode.
func profileBytes(p *specs.LinuxSeccomp) []byte {
	b := make([]byte, 0, 1024)
	num := func(v uint64) { b = binary.AppendUvarint(b, v) }
	str := func(s string) { num(uint64(len(s))); b = append(b, s...) }
	opt := func(v *uint) {
		if v == nil {
			num(0)
			return
		}
		num(1)
		num(uint64(*v))
	}
	str(string(p.DefaultAction))
	opt(p.DefaultErrnoRet)
	num(uint64(len(p.Architectures)))
	for _, a := range p.Architectures {
		str(string(a))
	}
	num(uint64(len(p.Flags)))
	for _, f := range p.Flags {
		str(string(f))
	}
	str(p.ListenerPath)
	str(p.ListenerMetadata)
	num(uint64(len(p.Syscalls)))
	for _, s := range p.Syscalls {
		num(uint64(len(s.Names)))
		for _, n := range s.Names {
			str(n)
		}
		str(string(s.Action))
		opt(s.ErrnoRet)
		num(uint64(len(s.Args)))
		for _, a := range s.Args {
			num(uint64(a.Index))
			num(a.Value)
			num(a.ValueTwo)
			str(string(a.Op))
		}
	}
	return b
}

func compile(p *specs.LinuxSeccomp) ([]byte, error) {
	def, err := action(p.DefaultAction, p.DefaultErrnoRet)
	if err != nil {
		return nil, fmt.Errorf("defaultAction: %w", err)
	}
	f, err := libseccomp.NewFilter(def)
	if err != nil {
		return nil, fmt.Errorf("new filter: %w", err)
	}
	defer f.Release()
	if err := f.SetBadArchAction(libseccomp.ActKillProcess); err != nil {
		return nil, err
	}
	// The jail's init sets no_new_privs itself before loading.
	if err := f.SetNoNewPrivsBit(false); err != nil {
		return nil, err
	}
	for _, a := range p.Architectures {
		arch, err := libseccomp.GetArchFromString(archName(a))
		if err != nil {
			return nil, fmt.Errorf("architecture %q: %w", a, err)
		}
		if err := f.AddArch(arch); err != nil && !errors.Is(err, unix.EEXIST) {
			return nil, fmt.Errorf("architecture %q: %w", a, err)
		}
	}
	rules := 0
	for i, sc := range p.Syscalls {
		act, err := action(sc.Action, sc.ErrnoRet)
		if err != nil {
			return nil, fmt.Errorf("syscalls[%d].action: %w", i, err)
		}
		conds, err := conditions(sc.Args)
		if err != nil {
			return nil, fmt.Errorf("syscalls[%d].args: %w", i, err)
		}
		for _, name := range sc.Names {
			nr, err := libseccomp.GetSyscallFromName(name)
			if err != nil {
				return nil, fmt.Errorf("syscalls[%d]: unknown system call %q", i, name)
			}
			if act == def {
				continue // libseccomp refuses rules that repeat the default
			}
			if len(conds) == 0 {
				err = f.AddRule(nr, act)
			} else {
				err = f.AddRuleConditional(nr, act, conds)
			}
			if err != nil {
				return nil, fmt.Errorf("syscalls[%d] %s: %w", i, name, err)
			}
			rules++
		}
	}
	if rules >= treeRules && libraryAtLeast(2, 5, 0) {
		if err := f.SetOptimize(2); err != nil {
			return nil, fmt.Errorf("binary tree: %w", err)
		}
	}
	return exportBPF(f)
}

// treeRules is how many rules a filter needs to be compiled as a binary
// tree of system call numbers rather than a list. The tree halves the
// time the kernel takes to load the default profile's filter (about 80
// against 160 us here: seccomp(2) emulates a new filter for every system
// call number, to cache the ones always allowed) and each system call
// walks a few comparisons, not hundreds. Below a few rules it buys
// nothing, and libseccomp before 2.5.4 ignores the default action of a
// tree without rules (seccomp/libseccomp#370); the tree needs 2.5.0.
const treeRules = 8

// libraryAtLeast reports whether the libseccomp in use is at least
// major.minor.micro.
func libraryAtLeast(major, minor, micro uint) bool {
	a, b, c := libseccomp.GetLibraryVersion()
	if a != major {
		return a > major
	}
	if b != minor {
		return b > minor
	}
	return c >= micro
}

// exportBPF writes the filter to a memfd and reads it back: libseccomp
// 2.5 exports only to a file descriptor.
func exportBPF(f *libseccomp.ScmpFilter) ([]byte, error) {
	fd, err := unix.MemfdCreate("neonbox-seccomp", unix.MFD_CLOEXEC)
	if err != nil {
		return nil, os.NewSyscallError("memfd_create", err)
	}
	mf := os.NewFile(uintptr(fd), "neonbox-seccomp")
	defer mf.Close()
	if err := f.ExportBPF(mf); err != nil {
		return nil, fmt.Errorf("export bpf: %w", err)
	}
	if _, err := mf.Seek(0, io.SeekStart); err != nil {
		return nil, err
	}
	bpf, err := io.ReadAll(mf)
	if err != nil {
		return nil, err
	}
	if len(bpf) == 0 || len(bpf)%8 != 0 {
		return nil, fmt.Errorf("export bpf: %d bytes is not a filter", len(bpf))
	}
	return bpf, nil
}

func action(a specs.LinuxSeccompAction, errno *uint) (libseccomp.ScmpAction, error) {
	switch a {
	case specs.ActAllow:
		return libseccomp.ActAllow, nil
	case specs.ActErrno:
		code := uint(unix.EPERM)
		if errno != nil {
			code = *errno
		}
		if code > 4095 {
			return 0, fmt.Errorf("errnoRet %d out of range", code)
		}
		return libseccomp.ActErrno.SetReturnCode(int16(code)), nil
	case specs.ActKill, specs.ActKillThread:
		return libseccomp.ActKillThread, nil
	case specs.ActKillProcess:
		return libseccomp.ActKillProcess, nil
	case specs.ActTrap:
		return libseccomp.ActTrap, nil
	case specs.ActLog:
		return libseccomp.ActLog, nil
	}
	return 0, fmt.Errorf("unsupported action %q", a)
}

func conditions(args []specs.LinuxSeccompArg) ([]libseccomp.ScmpCondition, error) {
	var out []libseccomp.ScmpCondition
	for _, a := range args {
		op, ok := ops[a.Op]
		if !ok {
			return nil, fmt.Errorf("unsupported operator %q", a.Op)
		}
		if a.Index > 5 {
			return nil, fmt.Errorf("argument index %d out of range", a.Index)
		}
		vals := []uint64{a.Value}
		if a.Op == specs.OpMaskedEqual {
			vals = append(vals, a.ValueTwo)
		}
		c, err := libseccomp.MakeCondition(a.Index, op, vals...)
		if err != nil {
			return nil, err
		}
		out = append(out, c)
	}
	return out, nil
}

var ops = map[specs.LinuxSeccompOperator]libseccomp.ScmpCompareOp{
	specs.OpNotEqual:     libseccomp.CompareNotEqual,
	specs.OpLessThan:     libseccomp.CompareLess,
	specs.OpLessEqual:    libseccomp.CompareLessOrEqual,
	specs.OpEqualTo:      libseccomp.CompareEqual,
	specs.OpGreaterEqual: libseccomp.CompareGreaterEqual,
	specs.OpGreaterThan:  libseccomp.CompareGreater,
	specs.OpMaskedEqual:  libseccomp.CompareMaskedEqual,
}

// archName turns "SCMP_ARCH_X86_64" into libseccomp's "x86_64".
func archName(a specs.Arch) string {
	names := map[specs.Arch]string{
		specs.ArchX86: "x86", specs.ArchX86_64: "amd64", specs.ArchX32: "x32",
		specs.ArchARM: "arm", specs.ArchAARCH64: "arm64",
	}
	if n, ok := names[a]; ok {
		return n
	}
	return string(a)
}

// nativeArch is the runtime-spec name of the machine's architecture.
func nativeArch() specs.Arch {
	arch, err := libseccomp.GetNativeArch()
	if err != nil {
		return specs.ArchX86_64
	}
	switch arch.String() {
	case "x86":
		return specs.ArchX86
	case "arm64":
		return specs.ArchAARCH64
	case "arm":
		return specs.ArchARM
	}
	return specs.ArchX86_64
}
