package nsjail

// This file and the other child_*.go files run in the jail's init: the
// neonbox-ns binary re-executed as "neonbox-init" by the parent, already
// inside the new user, mount, pid, net, uts and ipc namespaces, as root of
// the new user namespace and pid 1 of the new pid namespace. It builds the
// filesystem view, drops every privilege and execs CMD. Nothing here may
// carry on after a failed step: it reports the step and exits.

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"runtime"
	"strconv"

	"golang.org/x/sys/unix"

	"github.com/neonbox/neonbox-ns/internal/linux"
	"github.com/neonbox/neonbox-ns/reexec"
)

// syncFD is the init's end of the protocol socket.
const syncFD = 3

func init() {
	reexec.Register(initName, childMain)
}

// childMain is the init's entry point.
func childMain() {
	// Capabilities, no_new_privs and the credentials execve passes on
	// belong to a thread: do everything on this one.
	runtime.LockOSThread()
	// Nothing but stdin, stdout and stderr may reach CMD: not the sync
	// socket (its closing at execve tells the parent exec worked), and
	// not any descriptor neonbox-ns's caller left open without
	// close-on-exec (a directory fd would be a way out of the jail, as in
	// runc's CVE-2024-21626).
	if err := unix.CloseRange(3, math.MaxUint32, unix.CLOSE_RANGE_CLOEXEC); err != nil {
		markAllCloseOnExec()
	}
	err := runChild()
	msg, _ := json.Marshal(childMessage{Error: err})
	_, _ = unix.Write(syncFD, msg)
	os.Exit(1)
}

// runChild sets the jail up and execs CMD; it returns only on failure.
func runChild() *StepError {
	var steps []initStep
	mark := func(name string) { steps = append(steps, initStep{Name: name, At: monotonic()}) }
	mark("started")
	cfg, fds, err := receiveConfig()
	if err != nil {
		return stepError("config", err)
	}
	mark("config")
	var lowerFD = -1
	if cfg.WorkspaceFD {
		if len(fds) != 1 {
			return &StepError{Stage: "config", Message: fmt.Sprintf("want 1 workspace fd, got %d", len(fds))}
		}
		lowerFD = fds[0]
	}
	if se := buildRoot(cfg, lowerFD); se != nil {
		return se
	}
	mark("rootfs")
	if err := unix.Sethostname([]byte(cfg.Hostname)); err != nil {
		return stepError("hostname", os.NewSyscallError("sethostname", err))
	}
	if !cfg.Network {
		if err := linux.SetLinkUp("lo"); err != nil {
			return stepError("network", err)
		}
	}
	if cfg.Deferred {
		if se := awaitCall(cfg, mark); se != nil {
			return se
		}
	}
	if err := unix.Chdir(cfg.Cwd); err != nil {
		return stepError("cwd", &os.PathError{Op: "chdir", Path: cfg.Cwd, Err: err})
	}
	path, err := lookPath(cfg.Argv[0], cfg.Env)
	if err != nil {
		return stepError("exec", err)
	}
	mark("network")
	if err := dropPrivileges(cfg); err != nil {
		return stepError("credentials", err)
	}
	mark("credentials")
	ready, _ := json.Marshal(childMessage{Ready: true, Steps: steps})
	if _, err := unix.Write(syncFD, ready); err != nil {
		return stepError("sync", os.NewSyscallError("write", err))
	}
	if cfg.WaitGo {
		var b [1]byte
		for {
			n, err := unix.Read(syncFD, b[:])
			if errors.Is(err, unix.EINTR) {
				continue
			}
			if err != nil || n != 1 || b[0] != 'g' {
				return stepError("sync", fmt.Errorf("no go-ahead from the parent (n=%d): %v", n, err))
			}
			break
		}
	}
	err = unix.Exec(path, cfg.Argv, cfg.Env)
	return stepError("exec", &os.PathError{Op: "execve", Path: path, Err: err})
}

// awaitCall says the jail is prepared, waits for the command, takes its
// stdio and mounts the workspace overlay.
func awaitCall(cfg *childConfig, mark func(string)) *StepError {
	msg, _ := json.Marshal(childMessage{Prepared: true})
	if _, err := unix.Write(syncFD, msg); err != nil {
		return stepError("sync", os.NewSyscallError("write", err))
	}
	var call callMessage
	fds, err := receive(&call)
	if err != nil {
		return stepError("call", err)
	}
	if len(fds) != 3 || len(call.Argv) == 0 {
		return &StepError{Stage: "call", Message: fmt.Sprintf("want a command and 3 descriptors, got %d", len(fds))}
	}
	for i, fd := range fds {
		if err := unix.Dup3(fd, i, 0); err != nil {
			return stepError("call", os.NewSyscallError("dup3", err))
		}
		unix.Close(fd)
	}
	cfg.Argv, cfg.Env, cfg.Cwd = call.Argv, call.Env, call.Cwd
	mark("call")
	if !cfg.ReadOnlyWorkspace {
		if err := mountDeferredWorkspace(cfg, mark); err != nil {
			return stepError("workspace", err)
		}
	}
	return nil
}

// markAllCloseOnExec is CloseRange(CLOSE_RANGE_CLOEXEC) for kernels
// before 5.11.
func markAllCloseOnExec() {
	entries, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return
	}
	for _, e := range entries {
		if fd, err := strconv.Atoi(e.Name()); err == nil && fd > 2 {
			unix.CloseOnExec(fd)
		}
	}
}

// receiveConfig reads the config message and the fds that came with it.
func receiveConfig() (*childConfig, []int, error) {
	var cfg *childConfig
	fds, err := receiveWith(func(b []byte) (err error) { cfg, err = decodeConfig(b); return err })
	return cfg, fds, err
}

// receive reads one JSON message (strictly) and the fds that came with it.
func receive(v any) ([]int, error) {
	return receiveWith(func(b []byte) error {
		dec := json.NewDecoder(bytes.NewReader(b))
		dec.DisallowUnknownFields()
		return dec.Decode(v)
	})
}

func receiveWith(decode func([]byte) error) ([]int, error) {
	buf := make([]byte, 1<<20)
	oob := make([]byte, unix.CmsgSpace(4*4))
	for {
		n, oobn, _, _, err := unix.Recvmsg(syncFD, buf, oob, unix.MSG_CMSG_CLOEXEC)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return nil, os.NewSyscallError("recvmsg", err)
		}
		if n == 0 {
			return nil, errors.New("the parent closed the socket before sending a message")
		}
		var fds []int
		if oobn > 0 {
			msgs, err := unix.ParseSocketControlMessage(oob[:oobn])
			if err != nil {
				return nil, err
			}
			for _, m := range msgs {
				got, err := unix.ParseUnixRights(&m)
				if err != nil {
					return nil, err
				}
				fds = append(fds, got...)
			}
		}
		return fds, decode(buf[:n])
	}
}
