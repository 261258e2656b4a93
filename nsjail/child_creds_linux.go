package nsjail

// Runs in the jail's init (see child_linux.go), on its locked thread, as
// the last step before execve: gives up every capability for good.

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/neonbox/neonbox-ns/internal/linux"
	"github.com/neonbox/neonbox-ns/seccomp"
)

// dropPrivileges leaves the thread with no capabilities in any set and no
// way back: securebits keep uid 0 from regaining them at execve
// (capabilities(7), "The securebits flags"), the bounding set is empty,
// no_new_privs is set, the jail ids are cfg.UID and cfg.GID, and the
// seccomp filter is loaded.
func dropPrivileges(cfg *childConfig) error {
	// No core dumps (they would land in the workspace and could leak
	// memory contents into a commit), and a ceiling on open files.
	if err := unix.Setrlimit(unix.RLIMIT_CORE, &unix.Rlimit{}); err != nil {
		return os.NewSyscallError("setrlimit core", err)
	}
	var nofile unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &nofile); err == nil && nofile.Max > maxOpenFiles {
		nofile.Max, nofile.Cur = maxOpenFiles, min(nofile.Cur, maxOpenFiles)
		if err := unix.Setrlimit(unix.RLIMIT_NOFILE, &nofile); err != nil {
			return os.NewSyscallError("setrlimit nofile", err)
		}
	}
	last, err := linux.LastCap()
	if err != nil {
		return fmt.Errorf("read cap_last_cap: %w", err)
	}
	bits := linux.SecbitNoroot | linux.SecbitNorootLocked | linux.SecbitKeepCapsLocked |
		linux.SecbitNoCapAmbientRaise | linux.SecbitNoCapAmbientRaiseLockd
	if err := linux.Prctl(unix.PR_SET_SECUREBITS, uintptr(bits), 0); err != nil {
		return err
	}
	for c := 0; c <= last; c++ {
		if err := linux.Prctl(unix.PR_CAPBSET_DROP, uintptr(c), 0); err != nil {
			return err
		}
	}
	if err := linux.Prctl(unix.PR_CAP_AMBIENT, unix.PR_CAP_AMBIENT_CLEAR_ALL, 0); err != nil {
		return err
	}
	// Raw calls: only this thread's credentials reach execve, and the
	// Go wrappers would change every thread's.
	if cfg.SetGroups {
		if _, _, e := unix.RawSyscall(unix.SYS_SETGROUPS, 0, 0, 0); e != 0 {
			return os.NewSyscallError("setgroups", e)
		}
	}
	if _, _, e := unix.RawSyscall(unix.SYS_SETRESGID, uintptr(cfg.GID), uintptr(cfg.GID), uintptr(cfg.GID)); e != 0 {
		return os.NewSyscallError("setresgid", e)
	}
	if _, _, e := unix.RawSyscall(unix.SYS_SETRESUID, uintptr(cfg.UID), uintptr(cfg.UID), uintptr(cfg.UID)); e != 0 {
		return os.NewSyscallError("setresuid", e)
	}
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capset(&hdr, &data[0]); err != nil {
		return os.NewSyscallError("capset", err)
	}
	if err := linux.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0); err != nil {
		return err
	}
	for _, prog := range cfg.Seccomp {
		if err := seccomp.Load(prog); err != nil {
			return err
		}
	}
	// A change of credentials clears the parent-death signal; set it
	// again so the jail dies with neonbox-ns.
	return linux.Prctl(unix.PR_SET_PDEATHSIG, uintptr(unix.SIGKILL), 0)
}

// maxOpenFiles caps RLIMIT_NOFILE in the jail.
const maxOpenFiles = 65536

// errNotFound is what lookPath reports for a command that is not there.
var errNotFound = fmt.Errorf("command not found in the jail's PATH: %w", unix.ENOENT)

// lookPath finds the executable for argv0 in the jail, searching the
// jail's PATH as execvp(3) would.
func lookPath(argv0 string, env []string) (string, error) {
	if strings.Contains(argv0, "/") {
		return argv0, nil
	}
	path := DefaultPath
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "PATH="); ok {
			path = v
		}
	}
	for _, dir := range filepath.SplitList(path) {
		if dir == "" {
			dir = "."
		}
		p := filepath.Join(dir, argv0)
		if st, err := os.Stat(p); err == nil && st.Mode().IsRegular() && st.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", &os.PathError{Op: "exec", Path: argv0, Err: errNotFound}
}
