package seccomp

import (
	"os"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"

	"github.com/neonbox/neonbox-ns/reexec"
)

func init() {
	// A child that loads the default filter (or not) and exits: the
	// difference between the two is what loading costs a run.
	reexec.Register("seccomp-bench-child", func() {
		if len(os.Args) > 1 && os.Args[1] == "load" {
			loadOrExit(func() (*Program, error) { return CompileDefault(true) })
		}
		os.Exit(0)
	})
	// A child under a profile whose rules all repeat its default (allow):
	// compiled with no rule at all, which must still allow.
	reexec.Register("seccomp-no-rules-child", func() {
		loadOrExit(func() (*Program, error) {
			return Compile(&specs.LinuxSeccomp{
				DefaultAction: specs.ActAllow,
				Architectures: []specs.Arch{nativeArch()},
				Syscalls:      []specs.LinuxSyscall{{Names: []string{"getppid", "write", "exit_group"}, Action: specs.ActAllow}},
			})
		})
		if unix.Getppid() <= 0 {
			os.Exit(5)
		}
		os.Exit(0)
	})
}

// loadOrExit loads the program compile gives into this (child) process,
// or exits with the failing step's status.
func loadOrExit(compile func() (*Program, error)) {
	prog, err := compile()
	if err != nil {
		os.Exit(2)
	}
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		os.Exit(3)
	}
	if err := Load(prog.BPF); err != nil {
		os.Exit(4)
	}
}

func TestMain(m *testing.M) {
	if reexec.Init() {
		return
	}
	os.Exit(m.Run())
}

// BenchmarkCompile: a profile compiled earlier in the process is a hash
// and a map lookup; one cached on disk is a hash and a file read; a fresh
// one goes through libseccomp.
func BenchmarkCompile(b *testing.B) {
	p := DefaultProfile(true)
	b.Run("cached", func(b *testing.B) {
		for b.Loop() {
			if _, err := Compile(p); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("default", func(b *testing.B) {
		for b.Loop() {
			if _, err := CompileDefault(true); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("uncached", func(b *testing.B) {
		for b.Loop() {
			if _, err := compile(p); err != nil {
				b.Fatal(err)
			}
		}
	})
	// What a new process pays with the state dir's cache (CompileIn):
	// hashing the profile and reading the program back.
	b.Run("disk", func(b *testing.B) {
		dir := b.TempDir()
		for b.Loop() {
			raw, _ := profileHash(p)
			if _, err := loadOrCompile(dir, diskKey(raw), p); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkChild runs a child process that loads the filter and one that
// does not; the difference is the per-run cost of compiling (once per
// process) and loading it.
func BenchmarkChild(b *testing.B) {
	for _, mode := range []string{"noload", "load"} {
		b.Run(mode, func(b *testing.B) {
			for b.Loop() {
				cmd := reexec.Command("seccomp-bench-child", mode)
				if err := cmd.Run(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// A filter without rules keeps its default action (libseccomp before
// 2.5.4 dropped it from a binary tree without rules: every call was
// killed).
func TestFilterWithoutRulesAllows(t *testing.T) {
	cmd := reexec.Command("seccomp-no-rules-child")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
}

func TestChildLoadsFilter(t *testing.T) {
	cmd := reexec.Command("seccomp-bench-child", "load")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
}
