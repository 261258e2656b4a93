// Package seccomp builds and loads the system-call filter every jail runs
// under.
//
// A profile is an OCI runtime-spec specs.LinuxSeccomp, so users can bring
// rules they know from OCI runtimes. Compile turns a profile into a
// classic-BPF program with libseccomp once per process (the result is
// cached by the profile's content), and CompileIn keeps it on disk for
// later processes too. The program is plain bytes: the jail's init (C,
// internal/jailinit) loads it with seccomp(2), and Load does the same
// for a Go process.
//
// Architectures other than the native one are killed: on x86-64 a 32-bit
// "int $0x80" system call would otherwise bypass a filter written for
// 64-bit numbers (libseccomp checks the audit architecture first; see
// Documentation/userspace-api/seccomp_filter.rst, "Caveats").
package seccomp
