package seccomp

// Denied lists the system calls every profile denies with EPERM.
func Denied() []string { return append([]string(nil), denied...) }
