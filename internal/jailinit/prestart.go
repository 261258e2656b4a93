package jailinit

/*
#include "prestart.h"
*/
import "C"

import (
	"errors"
	"os"
	"slices"
	"sync"
	"unsafe"
)

// Prestarted is a jail's init that the binary started before the Go
// runtime (prestart.c), with the spawn program for a jail with its own
// network namespace, for neonbox-ns run as root (Rootful) or not. Its
// first process is a child of this process; it reports pid 1's pid on
// Sock once it has mapped pid 1's ids. Its streams are this process's.
type Prestarted struct {
	Pid     int
	Sock    *os.File
	Rootful bool
	At      int64 // CLOCK_MONOTONIC just before it was started, in ns
	// Base is the base of the jail's program queued for it after the
	// spawn program, from the state dir's BaseFile, or nil: the init
	// builds it without waiting for Go.
	Base []byte
}

// BaseFile is the file in the state dir whose bytes `neonbox-ns exec`
// queues as the base of its prestarted init's program: package nsjail
// writes the base it sends there.
const BaseFile = C.JI_BASE_FILE

// BaseMagic begins BaseHeader.
const BaseMagic = C.JI_BASE_MAGIC

// BaseHeader is what BaseFile starts with, before the base: it names this
// binary (its device, inode, size and mtime), so that a base written by
// another build is not queued.
func BaseHeader() ([]byte, error) {
	h, err := baseHeader()
	return slices.Clone(h), err
}

// baseHeader is BaseHeader, once per process: the binary behind
// /proc/self/exe does not change while it runs.
var baseHeader = sync.OnceValues(func() ([]byte, error) {
	var h [C.JI_BASE_HEADER]C.uchar
	if C.ji_base_header(&h[0]) < 0 {
		return nil, errors.New("stat /proc/self/exe failed")
	}
	return C.GoBytes(unsafe.Pointer(&h[0]), C.JI_BASE_HEADER), nil
})

// RootStateDir is the state dir the prestart assumes for root when exec's
// command line names none (package nsjail's DefaultStateDir).
const RootStateDir = C.JI_DEFAULT_STATE_DIR

// MaxBase is the longest base the prestart reads from BaseFile.
const MaxBase = C.JI_MAX_BASE

// CallerTimerSlack is the timer slack (ns) the process had before the
// prestart widened its threads' (prestart.c), and whether it did: a
// process the binary starts should have the caller's slack back.
func CallerTimerSlack() (uint64, bool) {
	s := uint64(C.ji_caller_slack())
	return s, s != 0
}

// TakePrestarted returns the prestarted init, once. It is nil in a binary
// that does not ask for one (see prestart.c), after the first call, and
// where none could be started.
func TakePrestarted() *Prestarted {
	var p C.struct_ji_prestarted
	if C.ji_take_prestarted(&p) == 0 {
		return nil
	}
	pre := &Prestarted{
		Pid:     int(p.pid),
		Sock:    os.NewFile(uintptr(p.sock), "neonbox-sync"),
		Rootful: p.rootful != 0,
		At:      int64(p.at),
	}
	if p.base != nil {
		pre.Base = C.GoBytes(unsafe.Pointer(p.base), C.int(p.base_len))
	}
	return pre
}

// PrestartProgram is the spawn program compiled into the prestarting C
// (prestart_program.h), for neonbox-ns run as root or not.
func PrestartProgram(rootful bool) []byte {
	var n C.size_t
	var r C.int
	if rootful {
		r = 1
	}
	p := C.ji_spawn_program(r, &n)
	return C.GoBytes(unsafe.Pointer(p), C.int(n))
}
