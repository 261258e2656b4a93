package jailinit

/*
#include "prestart.h"
#include "teardown.h"
*/
import "C"

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"strings"
	"syscall"
)

// Teardown is a helper process that removes a run's cgroup and run dir
// after neonbox-ns has exited (teardown.c): the init of `neonbox-ns exec`
// forks it at its start, so the caller of neonbox-ns does not wait for
// the cleanup. It takes one job; it exits at once if its socket closes
// without one (neonbox-ns ended first).
type Teardown struct {
	// sock is a raw descriptor, not an os.File, whose finalizer could
	// close it, and start the helper, before this process exits.
	sock int
	pid  int
}

// TeardownFallback is argv[0] under which the helper re-executes the
// binary when it could not remove all of a run (a cgroup still busy, a
// very deep tree), with the run dir as its argument: the binary's Go
// then removes the run (package nsjail registers it with reexec).
const TeardownFallback = C.JT_FALLBACK_NAME

// TeardownJob is what the helper removes, in this order: the run's
// cgroup directories (rmdir, EBUSY retried for a second), the shared
// parents they leave empty, then the run dir's contents and, if every
// cgroup directory went, its owner file and the run dir itself. MountNS,
// the jail's mount namespace, is closed first.
type TeardownJob struct {
	Cgroups []string
	Shared  []string
	RunDir  string
	// Spare, if set, is where the run dir goes, emptied but for its
	// empty upper and work dirs, for a later run to reuse, when every
	// cgroup directory went and the spare's directory holds fewer
	// than MaxSpares entries (else it is removed).
	Spare   string
	MountNS *os.File
}

// MaxSpares is how many spare run dirs the helper keeps, at most.
const MaxSpares = C.JT_MAX_SPARES

// TakeTeardown returns the helper of `neonbox-ns exec`, once; nil in a
// binary that starts none (see prestart.c) and after the first call. Its
// Pid says whether it started.
func TakeTeardown() *Teardown {
	sock := C.ji_take_teardown()
	if sock < 0 {
		return nil
	}
	return &Teardown{sock: int(sock)}
}

// StartTeardown forks a helper from this process (tests: neonbox-ns's
// init forks its own). The caller reaps it (Wait).
func StartTeardown() (*Teardown, error) {
	sock, err := C.jt_start()
	if sock < 0 {
		return nil, fmt.Errorf("start teardown helper: %w", err)
	}
	return &Teardown{sock: int(sock)}, nil
}

// Pid returns the helper's pid, which it sends first; it waits for it.
// An error means there is no helper (its init could not start it).
func (t *Teardown) Pid() (int, error) {
	if t.pid > 0 {
		return t.pid, nil
	}
	if t.sock < 0 {
		return 0, errors.New("teardown helper: closed")
	}
	var b [4]byte
	n, err := syscall.Read(t.sock, b[:])
	for err == syscall.EINTR {
		n, err = syscall.Read(t.sock, b[:])
	}
	if err == nil && n != len(b) {
		err = fmt.Errorf("a message of %d bytes", n)
	}
	if err != nil {
		return 0, fmt.Errorf("teardown helper: read its pid: %w", os.NewSyscallError("read", err))
	}
	t.pid = int(int32(binary.NativeEndian.Uint32(b[:])))
	return t.pid, nil
}

// Hand gives the helper its job. Once Hand has returned nil the helper
// owns what the job names, MountNS included, which Hand has closed; the
// helper does the job once the socket ends, at Close or this process's
// exit (neonbox-ns exec exits right after: its exit then has both CPUs,
// not one shared with the cleanup), and lets go of its own MountNS only
// then, so that the last reference, and the unmount, are the helper's.
// On an error nothing was handed over, MountNS is still open, and the
// caller cleans up itself and calls Close (the helper exits).
func (t *Teardown) Hand(job TeardownJob) error {
	var b strings.Builder
	b.WriteString(C.JT_MAGIC + "\x00")
	add := func(op, path string) error {
		if path == "" || strings.IndexByte(path, 0) >= 0 {
			return fmt.Errorf("teardown helper: bad path %q", path)
		}
		b.WriteString(op + "\x00" + path + "\x00")
		return nil
	}
	var errs []error
	for _, d := range job.Cgroups {
		errs = append(errs, add("cgroup", d))
	}
	for _, d := range job.Shared {
		errs = append(errs, add("shared", d))
	}
	if job.RunDir != "" {
		if job.Spare != "" {
			errs = append(errs, add("spare", job.Spare))
		}
		errs = append(errs, add("rundir", job.RunDir))
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	if b.Len() > C.JT_MAX_JOB {
		return fmt.Errorf("teardown helper: job of %d bytes is too long", b.Len())
	}
	var rights []byte
	if job.MountNS != nil {
		rights = syscall.UnixRights(int(job.MountNS.Fd()))
	}
	if t.sock < 0 {
		return errors.New("teardown helper: closed")
	}
	if err := syscall.Sendmsg(t.sock, []byte(b.String()), rights, nil, syscall.MSG_NOSIGNAL); err != nil {
		return fmt.Errorf("teardown helper: %w", os.NewSyscallError("sendmsg", err))
	}
	if job.MountNS != nil {
		_ = job.MountNS.Close()
	}
	return nil
}

// Close lets go of the helper: it does the job Hand gave it, or exits
// without one.
func (t *Teardown) Close() error {
	if t.sock < 0 {
		return nil
	}
	err := syscall.Close(t.sock)
	t.sock = -1
	if err != nil {
		return os.NewSyscallError("close", err)
	}
	return nil
}

// Wait reaps a helper from StartTeardown (tests) and reports whether it
// did all of its job.
func (t *Teardown) Wait() (bool, error) {
	pid, err := t.Pid()
	if err != nil {
		return false, err
	}
	p, err := os.FindProcess(pid)
	if err != nil {
		return false, err
	}
	st, err := p.Wait()
	if err != nil {
		return false, err
	}
	return st.Success(), nil
}
