package nsjail

// Runs in the parent: the jail's processes that this process waits for.

import (
	"fmt"
	"os"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"
)

// child is a process of this one's: the jail's first process, or its
// init (a child by CLONE_PARENT). Until it is reaped its pid cannot be
// reused, so it is signalled by pid; wait reaps it holding the lock
// under which kill signals, so no signal reaches a reused pid.
// (os.FindProcess would do the same through a pidfd, once package os has
// checked that pidfds work, which it does once per process by forking a
// child and waiting for it: 0.4 ms on the way to the first jail here.)
type child struct {
	pid  int
	mu   sync.Mutex
	done bool
}

// exitState is how a process ended, or err why that is not known.
type exitState struct {
	status syscall.WaitStatus
	rusage syscall.Rusage
	err    error
}

// kill sends SIGKILL, unless c has been reaped (os.ErrProcessDone).
func (c *child) kill() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.done {
		return os.ErrProcessDone
	}
	return unix.Kill(c.pid, unix.SIGKILL)
}

// wait waits for c to end and reaps it.
func (c *child) wait() *exitState {
	// Waitable first, without reaping: the pid stays c's until the
	// reaping below, which holds the lock.
	var info unix.Siginfo
	err := c.pollExit()
	if err != nil {
		err = unix.Waitid(unix.P_PID, c.pid, &info, unix.WEXITED|unix.WNOWAIT, nil)
		for err == unix.EINTR {
			err = unix.Waitid(unix.P_PID, c.pid, &info, unix.WEXITED|unix.WNOWAIT, nil)
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	var s exitState
	if err == nil {
		var pid int
		for pid, err = syscall.Wait4(c.pid, &s.status, 0, &s.rusage); err == syscall.EINTR; {
			pid, err = syscall.Wait4(c.pid, &s.status, 0, &s.rusage)
		}
		if err == nil && pid != c.pid {
			err = fmt.Errorf("wait4 returned pid %d", pid)
		}
	}
	// Reaped, or not this process's to reap (ECHILD: reaped by someone
	// else, with SIGCHLD ignored say): either way its pid is no longer
	// its own.
	c.done = true
	if err != nil {
		s.err = os.NewSyscallError("wait", err)
	}
	return &s
}

// pollExit waits until c has exited, through a pidfd in Go's poller: no
// thread sits in a system call meanwhile, holding a P that other
// goroutines of a short run are waiting for. An error: wait otherwise.
func (c *child) pollExit() error {
	fd, err := unix.PidfdOpen(c.pid, unix.PIDFD_NONBLOCK)
	if err != nil {
		return err
	}
	f := os.NewFile(uintptr(fd), "pidfd")
	defer f.Close()
	rc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	var werr error
	err = rc.Read(func(fd uintptr) bool {
		var info unix.Siginfo
		werr = unix.Waitid(unix.P_PIDFD, int(fd), &info, unix.WEXITED|unix.WNOWAIT|unix.WNOHANG, nil)
		return werr != unix.EAGAIN && werr != unix.EINTR && (werr != nil || info.Signo != 0)
	})
	if err != nil {
		return err
	}
	return werr
}
