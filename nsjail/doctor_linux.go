package nsjail

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/neonbox/neonbox-ns/cgroup"
	"github.com/neonbox/neonbox-ns/internal/linux"
	"github.com/neonbox/neonbox-ns/reexec"
	"github.com/neonbox/neonbox-ns/seccomp"
)

// Check is one line of neonbox-ns doctor.
type Check struct {
	// Name is what is checked, OK whether it passed.
	Name string `json:"name"`
	OK   bool   `json:"ok"`
	// Required: the default policy cannot run without it.
	// Detail is what was found, Remedy what to do when the check
	// failed.
	Required bool   `json:"required"`
	Detail   string `json:"detail"`
	Remedy   string `json:"remedy,omitempty"`
}

// Words shared by doctor and the errors exec gives when a piece is
// missing.
const (
	remedyUserNS = "enable user namespaces: sysctl user.max_user_namespaces=15000" +
		" (Debian before 11: kernel.unprivileged_userns_clone=1;" +
		" Ubuntu 23.10+: kernel.apparmor_restrict_unprivileged_userns=0 or an AppArmor profile allowing userns)"
	remedyKernel   = "use Linux 5.12 or newer (idmapped mounts, overlayfs in user namespaces with userxattr)"
	remedyIdmap    = remedyKernel + "; the workspace's filesystem must support idmapped mounts (ext4, xfs, btrfs, tmpfs since 6.3)"
	remedyOverlay  = "modprobe overlay (and load it at boot); the state dir must be on a filesystem with user xattrs (ext4, xfs, btrfs; tmpfs since 6.6)"
	remedyCgroups  = "limits (--memory, --cpus, --pids, policies with limits) need cgroups: boot with cgroup v2 and delegate memory, cpu and pids (systemd: Delegate=yes), or run without limits"
	remedySeccomp  = "install libseccomp (Debian: libseccomp2)"
	remedyStateDir = "choose a state dir every ancestor of which has o+x (--state-dir)"
	remedyMount    = "the path is a mount point inside the workspace, which the jail saw without it and a commit never crosses: unmount it, or keep the run's changes away from it"
)

// withRemedy fills in se.Remedy for failures that come from the machine
// rather than from the command: the same words as neonbox-ns doctor.
func withRemedy(se *StepError) *StepError {
	if se == nil || se.Remedy != "" {
		return se
	}
	errno := unix.Errno(se.Errno)
	switch se.Stage {
	case "spawn":
		if errno == unix.EPERM || errno == unix.ENOSPC || errno == unix.EINVAL || errno == unix.EACCES || errno == 0 {
			se.Remedy = remedyUserNS
		}
	case "idmap":
		se.Remedy = remedyIdmap
	case "workspace":
		if errno == unix.EINVAL || errno == unix.ENODEV || errno == unix.EOPNOTSUPP || errno == unix.EIO {
			se.Remedy = remedyOverlay
		}
	case "rootfs", "binds":
		if errno == unix.EACCES {
			se.Remedy = remedyStateDir
		}
	case "cgroup":
		se.Remedy = remedyCgroups
	case "seccomp":
		se.Remedy = remedySeccomp
	case "commit":
		if errno == unix.EXDEV {
			se.Remedy = remedyMount
		}
	}
	return se
}

// Doctor checks what the default policy needs on this machine, running
// a real jail last. stateDir may be "" for the default.
func Doctor(ctx context.Context, stateDir string) []Check {
	var out []Check
	add := func(c Check) { out = append(out, c) }
	add(checkKernel())
	add(checkUserNS())
	add(checkOverlay())
	if os.Geteuid() == 0 {
		add(checkIdmap())
	}
	add(checkCgroups())
	add(checkSeccomp())
	add(checkPidfd())
	add(checkRun(ctx, stateDir))
	return out
}

// Healthy reports whether every required check passed.
func Healthy(checks []Check) bool {
	for _, c := range checks {
		if c.Required && !c.OK {
			return false
		}
	}
	return true
}

func kernelVersion() (int, int, string) {
	var u unix.Utsname
	_ = unix.Uname(&u)
	rel := unix.ByteSliceToString(u.Release[:])
	var ma, mi int
	fmt.Sscanf(rel, "%d.%d", &ma, &mi)
	return ma, mi, rel
}

func checkKernel() Check {
	ma, mi, rel := kernelVersion()
	c := Check{Name: "kernel", Required: true, Detail: "Linux " + rel, OK: ma > 5 || ma == 5 && mi >= 12}
	if !c.OK {
		c.Remedy = remedyKernel
	}
	return c
}

func readSysctl(p string) (int, bool) {
	b, err := os.ReadFile(p)
	if err != nil {
		return 0, false
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(b)))
	return n, err == nil
}

func checkUserNS() Check {
	c := Check{Name: "user namespaces", Required: true, OK: true}
	var notes []string
	if n, ok := readSysctl("/proc/sys/user/max_user_namespaces"); ok {
		notes = append(notes, fmt.Sprintf("max_user_namespaces=%d", n))
		if n == 0 {
			c.OK = false
		}
	}
	if os.Geteuid() != 0 {
		if n, ok := readSysctl("/proc/sys/kernel/unprivileged_userns_clone"); ok && n == 0 {
			c.OK = false
			notes = append(notes, "unprivileged_userns_clone=0")
		}
		if n, ok := readSysctl("/proc/sys/kernel/apparmor_restrict_unprivileged_userns"); ok && n != 0 {
			c.OK = false
			notes = append(notes, "apparmor_restrict_unprivileged_userns=1")
		}
	}
	c.Detail = strings.Join(notes, ", ")
	if !c.OK {
		c.Remedy = remedyUserNS
	}
	return c
}

func checkOverlay() Check {
	b, _ := os.ReadFile("/proc/filesystems")
	c := Check{Name: "overlayfs", Required: true, OK: strings.Contains(string(b), "\toverlay\n")}
	if c.OK {
		c.Detail = "available (mounted in the jail's user namespace with userxattr; the real run below proves it)"
	} else {
		c.Detail = "not in /proc/filesystems"
		c.Remedy = remedyOverlay
	}
	return c
}

// checkIdmap makes an idmapped mount of a temporary directory with a
// fresh user namespace, the way a run presents the workspace.
func checkIdmap() Check {
	c := Check{Name: "idmapped mounts", Required: true}
	dir, err := os.MkdirTemp("", "neonbox-doctor-")
	if err != nil {
		c.Detail = err.Error()
		return c
	}
	defer os.Remove(dir)
	// A user namespace to map with: the jail's init is not needed, a
	// sleeping child in a new user namespace will do.
	child, userns, err := userNamespaceFD()
	if err != nil {
		c.Detail, c.Remedy = "cannot create a user namespace: "+err.Error(), remedyUserNS
		return c
	}
	defer child.Kill()
	defer unix.Close(userns)
	fd, err := linux.CloneTree(dir, false)
	if err == nil {
		err = linux.SetMountAttr(fd, unix.MOUNT_ATTR_IDMAP, userns, false)
		unix.Close(fd)
	}
	if err != nil {
		c.Detail, c.Remedy = err.Error(), remedyIdmap
		return c
	}
	c.OK, c.Detail = true, "open_tree + mount_setattr(MOUNT_ATTR_IDMAP) work"
	return c
}

func checkCgroups() Check {
	v, why := cgroup.Detect()
	c := Check{Name: "cgroups", OK: v != cgroup.None, Detail: string(v)}
	switch v {
	case cgroup.V2:
		c.Detail = "v2 with memory, cpu and pids; CLONE_INTO_CGROUP"
	case cgroup.V1:
		c.Detail = "v1 hierarchies for memory, cpu and pids (" + why + ")"
	default:
		c.Detail = why
		c.Remedy = remedyCgroups
	}
	return c
}

func checkSeccomp() Check {
	c := Check{Name: "seccomp", Required: true}
	b, _ := os.ReadFile("/proc/self/status")
	if !strings.Contains(string(b), "Seccomp:") {
		c.Detail, c.Remedy = "the kernel has no seccomp", "use a kernel built with CONFIG_SECCOMP_FILTER"
		return c
	}
	prog, err := seccomp.CompileDefault(true)
	if err != nil {
		c.Detail, c.Remedy = err.Error(), remedySeccomp
		return c
	}
	c.OK, c.Detail = true, fmt.Sprintf("default filter compiles to %d instructions", len(prog.BPF)/8)
	return c
}

func checkPidfd() Check {
	c := Check{Name: "pidfd", Detail: "pidfd_open works"}
	fd, err := unix.PidfdOpen(os.Getpid(), 0)
	if err != nil {
		c.Detail, c.Remedy = "pidfd_open: "+err.Error(), "Linux 5.3 or newer kills with pidfds; older kernels fall back to kill(2)"
		return c
	}
	unix.Close(fd)
	c.OK = true
	return c
}

// checkRun runs a real jail in a temporary workspace.
func checkRun(ctx context.Context, stateDir string) Check {
	c := Check{Name: "a real run", Required: true}
	dir, err := os.MkdirTemp("", "neonbox-doctor-ws-")
	if err != nil {
		c.Detail = err.Error()
		return c
	}
	defer os.RemoveAll(dir)
	r, err := Run(ctx, Options{
		Command: []string{"sh", "-c", "echo ok > probe"}, Workspace: dir, StateDir: stateDir,
		Stdout: io.Discard, Stderr: io.Discard, Commit: CommitAlways,
	})
	switch {
	case err != nil:
		c.Detail = err.Error()
		if errors.Is(err, ErrInvalid) && strings.Contains(err.Error(), "state dir") {
			c.Remedy = remedyStateDir
		}
	case r.Status != StatusSuccess:
		c.Detail = fmt.Sprintf("%s: %v", r.Status, r.Error)
		if r.Error != nil {
			c.Remedy = r.Error.Remedy
		}
	default:
		if _, err := os.Stat(filepath.Join(dir, "probe")); err != nil {
			c.Detail = "the run's change was not committed: " + err.Error()
			return c
		}
		c.OK, c.Detail = true, fmt.Sprintf("sh in a jail with an overlay workspace, committed, in %.1f ms", r.TotalMS)
	}
	return c
}

// holderName is the entry point of a process that only holds a user
// namespace open, for checks that need one.
const holderName = "neonbox-userns-holder"

func init() {
	reexec.Register(holderName, func() {
		// Runs in a new user namespace; waits until its stdin closes.
		_, _ = io.Copy(io.Discard, os.Stdin)
	})
}

// userNamespaceFD starts a process in a new user namespace with the
// jail's mapping and returns it with an fd of that namespace.
func userNamespaceFD() (*os.Process, int, error) {
	cmd := reexec.Command(holderName)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, -1, err
	}
	m := []syscall.SysProcIDMap{{ContainerID: 0, HostID: hostIDBase, Size: jailIDCount}}
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: unix.CLONE_NEWUSER, UidMappings: m, GidMappings: m, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return nil, -1, err
	}
	fd, err := unix.Open(fmt.Sprintf("/proc/%d/ns/user", cmd.Process.Pid), unix.O_RDONLY|unix.O_CLOEXEC, 0)
	stdin.Close()
	go cmd.Wait()
	if err != nil {
		return nil, -1, err
	}
	return cmd.Process, fd, nil
}
