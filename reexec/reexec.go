// Package reexec lets a binary start itself again as a different program.
//
// A program registers named entry points with Register. The first statement
// of main (and of every TestMain whose tests spawn children) calls Init: when
// the process was started under a registered name (argv[0]), Init runs that
// entry point and exits. Command builds an *exec.Cmd that starts the current
// executable under such a name.
package reexec

import (
	"fmt"
	"os"
	"os/exec"
)

var registry = map[string]func(){}

// Register makes fn the entry point of the process when argv[0] is name.
// It panics when name is registered twice, which is a programming error.
func Register(name string, fn func()) {
	if _, dup := registry[name]; dup {
		panic(fmt.Sprintf("reexec: %q registered twice", name))
	}
	registry[name] = fn
}

// Init runs the entry point registered for argv[0], if any, and then exits
// the process with status 0 should the entry point return. It reports false
// when argv[0] names no entry point, so that main carries on as usual.
func Init() bool {
	fn, ok := registry[os.Args[0]]
	if !ok {
		return false
	}
	fn()
	os.Exit(0)
	return true
}

// Self is the path that names the running executable. /proc/self/exe stays
// valid even if the file was replaced or deleted after the process started.
const Self = "/proc/self/exe"

// Command returns a command that runs the current executable with argv[0]
// set to name, so that Init dispatches to the registered entry point.
func Command(name string, args ...string) *exec.Cmd {
	return &exec.Cmd{
		Path: Self,
		Args: append([]string{name}, args...),
	}
}
