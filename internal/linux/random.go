package linux

import (
	"os"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Random fills b from getrandom(2), EINTR retried. The system call
// itself: unix.Getrandom goes through the vDSO, whose first call in a
// process maps and faults in its state (0.04 ms of a cold run), for the
// 8 bytes of a run id.
func Random(b []byte) error {
	for n := 0; n < len(b); {
		k, _, errno := unix.Syscall(unix.SYS_GETRANDOM, uintptr(unsafe.Pointer(&b[n])), uintptr(len(b)-n), 0)
		if errno == unix.EINTR {
			continue
		}
		if errno != 0 {
			return os.NewSyscallError("getrandom", errno)
		}
		n += int(k)
	}
	return nil
}
