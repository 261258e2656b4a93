// Package interrupt cancels a context when the process receives one of
// a few signals (SIGINT, SIGTERM, SIGHUP for `neonbox-ns exec`), as
// os/signal's Notify would, at a fraction of its cost for a process that
// lives a few milliseconds.
//
// os/signal's first Notify starts a goroutine locked to a thread of its
// own (runtime.ensureSigM) and the runtime's template thread, and hands
// every signal it enables to that thread and back: two threads made and
// a dozen context switches in each `neonbox-ns exec`, while the jail's
// init waits for one of the machine's two vCPUs. Here a small C handler,
// installed with SA_ONSTACK as the Go runtime requires of handlers that
// are not its own (os/signal's documentation, "Go programs that use cgo
// or SWIG"), writes the signal's number to a pipe that a goroutine
// waits on through Go's poller, with no thread of its own.
package interrupt

/*
#include "interrupt.h"
*/
import "C"

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

var (
	// mu makes Catch one at a time: the handlers are the process's.
	mu sync.Mutex
	// wake is the read end of the pipe the handler writes to. The
	// pipe stays for the process's life: a handler still running on
	// another thread as its signal is let go must not write to a
	// descriptor number that a later open has reused.
	wake *os.File
	// wakeW is its write end, the handler's.
	wakeW = -1
)

// Catch returns a context that the first of sigs received by the process
// cancels, with a cause naming the signal, and a function that puts back
// the handlers the signals had (the Go runtime's) and cancels the
// context. A signal after the first meets those handlers again: for
// SIGINT, SIGTERM and SIGHUP, without os/signal, that ends the process,
// as after os/signal's Stop. A signal the process was started with
// ignored (nohup) stays ignored. One Catch at a time: a second one before
// the first one's stop is an error. Not for signals that os/signal is
// given meanwhile.
func Catch(parent context.Context, sigs ...syscall.Signal) (context.Context, func(), error) {
	if len(sigs) == 0 || len(sigs) > C.NI_MAX_SIGNALS {
		return nil, nil, fmt.Errorf("interrupt: %d signals, want 1 to %d", len(sigs), C.NI_MAX_SIGNALS)
	}
	if !mu.TryLock() {
		return nil, nil, errors.New("interrupt: signals are caught already")
	}
	if err := openWake(); err != nil {
		mu.Unlock()
		return nil, nil, err
	}
	drain() // what a signal let go by an earlier stop may have written
	nums := make([]C.int, len(sigs))
	for i, s := range sigs {
		nums[i] = C.int(s)
	}
	if rc, err := C.ni_catch(&nums[0], C.int(len(nums))); rc < 0 {
		mu.Unlock()
		return nil, nil, os.NewSyscallError("sigaction", err)
	}
	ctx, cancel := context.WithCancelCause(parent)
	done := make(chan struct{})
	go func() {
		defer close(done)
		var b [1]byte
		if n, _ := wake.Read(b[:]); n == 1 {
			C.ni_restore()
			cancel(fmt.Errorf("interrupted by %s", unix.SignalName(syscall.Signal(b[0]))))
		}
	}()
	var once sync.Once
	stop := func() {
		once.Do(func() {
			_ = wake.SetReadDeadline(time.Now()) // ends the goroutine's wait
			<-done
			_ = wake.SetReadDeadline(time.Time{})
			C.ni_restore()
			cancel(context.Canceled)
			mu.Unlock()
		})
	}
	return ctx, stop, nil
}

// openWake makes the pipe, once; the handler gets its write end.
func openWake() error {
	if wake != nil {
		return nil
	}
	var p [2]int
	if err := unix.Pipe2(p[:], unix.O_CLOEXEC|unix.O_NONBLOCK); err != nil {
		return os.NewSyscallError("pipe2", err)
	}
	wake = os.NewFile(uintptr(p[0]), "interrupt") // non-blocking: Go's poller waits on it
	wakeW = p[1]
	C.ni_set_fd(C.int(wakeW))
	return nil
}

// drain empties the pipe without waiting.
func drain() {
	rc, err := wake.SyscallConn()
	if err != nil {
		return
	}
	_ = rc.Read(func(fd uintptr) bool {
		var b [16]byte
		for {
			n, err := unix.Read(int(fd), b[:])
			if n <= 0 && !errors.Is(err, unix.EINTR) {
				return true
			}
		}
	})
}
