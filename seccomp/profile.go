package seccomp

import (
	"sort"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"
)

// denied are the system calls every profile denies with EPERM: those
// Docker's default profile keeps from unprivileged containers (kernel
// modules, kexec, keyrings, mount and namespace changes, tracing other
// processes, bpf and perf, clocks, swap, reboot), plus io_uring, whose
// operations bypass the filter.
var denied = []string{
	"acct", "add_key", "bpf", "clock_adjtime", "clock_settime", "settimeofday",
	"create_module", "delete_module", "finit_module", "init_module", "get_kernel_syms", "query_module",
	"kexec_file_load", "kexec_load", "keyctl", "request_key", "lookup_dcookie",
	"mount", "umount2", "pivot_root", "chroot", "move_mount", "open_tree", "fsopen", "fsconfig",
	"fsmount", "fspick", "mount_setattr", "name_to_handle_at", "open_by_handle_at",
	"nfsservctl", "perf_event_open", "fanotify_init", "ptrace", "process_vm_readv", "process_vm_writev",
	"process_madvise", "kcmp", "pidfd_getfd", "quotactl", "quotactl_fd", "reboot", "setns",
	"swapon", "swapoff", "syslog", "sysfs", "_sysctl", "uselib", "userfaultfd", "ustat",
	"vhangup", "iopl", "ioperm", "io_uring_setup", "io_uring_enter", "io_uring_register",
	"get_mempolicy", "set_mempolicy", "mbind", "move_pages",
}

// subprocessCalls are denied when a policy does not grant "subprocess".
var subprocessCalls = []string{"fork", "vfork"}

// personalities a process may select (Docker's list): Linux and 32-bit
// Linux, with or without UNAME26, and the query value. Anything else, such
// as ADDR_NO_RANDOMIZE or READ_IMPLIES_EXEC, weakens the process.
var personalities = []uint32{0x0, 0x8, 0x20000, 0x20008, 0xffffffff}

const eperm = uint(unix.EPERM)

// DefaultProfile is the filter of every run: default allow, with the deny
// list above and these argument checks: no new user namespaces (clone and
// unshare with CLONE_NEWUSER), no terminal input injection (ioctl
// TIOCSTI, TIOCLINUX), only harmless personalities, and clone3 reported
// as missing (ENOSYS) because its flags cannot be inspected; libc then
// falls back to clone. With subprocess false, creating processes is
// denied as well (fork, vfork, clone without CLONE_THREAD), while threads
// still work.
func DefaultProfile(subprocess bool) *specs.LinuxSeccomp {
	p := &specs.LinuxSeccomp{
		DefaultAction: specs.ActAllow,
		Architectures: []specs.Arch{nativeArch()},
	}
	names := append([]string(nil), denied...)
	if !subprocess {
		names = append(names, subprocessCalls...)
	}
	sort.Strings(names)
	p.Syscalls = append(p.Syscalls, specs.LinuxSyscall{Names: names, Action: specs.ActErrno, ErrnoRet: ptr(eperm)})
	enosys := uint(unix.ENOSYS)
	p.Syscalls = append(p.Syscalls, specs.LinuxSyscall{Names: []string{"clone3"}, Action: specs.ActErrno, ErrnoRet: &enosys})

	// Several entries for one call are alternatives: any match denies.
	flagSet := func(name string, index uint, flag uint64) specs.LinuxSyscall {
		return specs.LinuxSyscall{
			Names: []string{name}, Action: specs.ActErrno, ErrnoRet: ptr(eperm),
			Args: []specs.LinuxSeccompArg{{Index: index, Value: flag, ValueTwo: flag, Op: specs.OpMaskedEqual}},
		}
	}
	p.Syscalls = append(p.Syscalls,
		flagSet("clone", 0, unix.CLONE_NEWUSER),
		flagSet("unshare", 0, unix.CLONE_NEWUSER),
	)
	if !subprocess {
		p.Syscalls = append(p.Syscalls, specs.LinuxSyscall{
			Names: []string{"clone"}, Action: specs.ActErrno, ErrnoRet: ptr(eperm),
			Args: []specs.LinuxSeccompArg{{Index: 0, Value: unix.CLONE_THREAD, ValueTwo: 0, Op: specs.OpMaskedEqual}},
		})
	}
	for _, req := range []uint64{unix.TIOCSTI, unix.TIOCLINUX} {
		p.Syscalls = append(p.Syscalls, specs.LinuxSyscall{
			Names: []string{"ioctl"}, Action: specs.ActErrno, ErrnoRet: ptr(eperm),
			Args: []specs.LinuxSeccompArg{{Index: 1, Value: 0xffffffff, ValueTwo: req, Op: specs.OpMaskedEqual}},
		})
	}
	for _, m := range complement32(personalities) {
		p.Syscalls = append(p.Syscalls, specs.LinuxSyscall{
			Names: []string{"personality"}, Action: specs.ActErrno, ErrnoRet: ptr(eperm),
			Args: []specs.LinuxSeccompArg{{Index: 0, Value: m.mask, ValueTwo: m.value, Op: specs.OpMaskedEqual}},
		})
	}
	return p
}

func ptr[T any](v T) *T { return &v }

// maskedValue matches x when x&mask == value.
type maskedValue struct{ mask, value uint64 }

// complement32 covers every 32-bit value except those in allowed with
// masked comparisons. libseccomp takes one comparison per argument in a
// rule, so "not one of these" is written as a union of prefixes: walk the
// binary trie of the allowed values and emit each subtree that holds none
// of them. Only the low 32 bits are compared, as the kernel truncates
// such arguments.
func complement32(allowed []uint32) []maskedValue {
	var out []maskedValue
	var walk func(prefix uint32, bits uint)
	walk = func(prefix uint32, bits uint) {
		var mask uint32
		if bits > 0 {
			mask = ^uint32(0) << (32 - bits)
		}
		any := false
		for _, a := range allowed {
			if a&mask == prefix {
				any = true
				break
			}
		}
		switch {
		case !any:
			out = append(out, maskedValue{mask: uint64(mask), value: uint64(prefix)})
		case bits < 32:
			walk(prefix, bits+1)
			walk(prefix|1<<(31-bits), bits+1)
		}
	}
	walk(0, 0)
	return out
}
