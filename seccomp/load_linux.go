package seccomp

import (
	"errors"
	"os"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Load installs prog in the calling thread; the thread must have set
// no_new_privs (or hold CAP_SYS_ADMIN). The filter is inherited across
// execve and by every process created afterwards. (The jail's init, in
// C, loads its programs itself; this is for Go processes.)
func Load(bpf []byte) error {
	if len(bpf) == 0 || len(bpf)%8 != 0 {
		return errors.New("seccomp: empty or malformed program")
	}
	prog := unix.SockFprog{
		Len:    uint16(len(bpf) / 8),
		Filter: (*unix.SockFilter)(unsafe.Pointer(&bpf[0])),
	}
	_, _, errno := unix.RawSyscall(unix.SYS_SECCOMP, unix.SECCOMP_SET_MODE_FILTER, 0, uintptr(unsafe.Pointer(&prog)))
	if errno != 0 {
		return os.NewSyscallError("seccomp", errno)
	}
	return nil
}
