package seccomp

import libseccomp "github.com/seccomp/libseccomp-golang"

// Denied lists the system calls every profile denies with EPERM.
func Denied() []string { return append([]string(nil), denied...) }

// Known reports whether libseccomp knows the system call name on any
// architecture.
func Known(name string) bool {
	_, err := libseccomp.GetSyscallFromName(name)
	return err == nil
}
