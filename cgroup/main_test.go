package cgroup

import (
	"fmt"
	"io"
	"os"
	"strconv"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/neonbox/neonbox-ns/reexec"
)

// Helper processes: the test binary re-executed under these names.
const (
	// helperGate waits for one byte on stdin and then execs its
	// arguments (path, argv...): the test adds it to a cgroup before it
	// runs the real workload.
	helperGate = "cgroup-test-gate"
	// helperAlloc maps and touches N bytes of anonymous memory, then
	// exits. The memory is mapped outside Go's heap and without huge
	// pages, so that the peak grows by N and not by whatever the
	// runtime's heap metadata and transparent huge pages add (up to
	// 10 MB more for 64 MiB in a VM whose kernel backs them with THP).
	helperAlloc = "cgroup-test-alloc"
	// helperSpin burns CPU until it has used the given CPU time (not wall
	// time, so that a loaded host does not change what it measures).
	helperSpin = "cgroup-test-spin"
)

// sink holds the mapping of helperAlloc.
var sink []byte

func init() {
	reexec.Register(helperGate, func() {
		if _, err := io.ReadFull(os.Stdin, make([]byte, 1)); err != nil {
			fmt.Fprintln(os.Stderr, "gate: read stdin:", err)
			os.Exit(126)
		}
		err := syscall.Exec(os.Args[1], os.Args[2:], os.Environ())
		fmt.Fprintln(os.Stderr, "gate: exec:", err)
		os.Exit(127)
	})
	reexec.Register(helperAlloc, func() {
		n, err := strconv.Atoi(os.Args[1])
		if err != nil {
			os.Exit(2)
		}
		if n > 0 {
			if sink, err = unix.Mmap(-1, 0, n, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS); err != nil {
				os.Exit(3)
			}
			_ = unix.Madvise(sink, unix.MADV_NOHUGEPAGE)
			for i := 0; i < n; i += 4096 {
				sink[i] = 1
			}
		}
		fmt.Println("allocated", len(sink))
	})
	reexec.Register(helperSpin, func() {
		d, err := time.ParseDuration(os.Args[1])
		if err != nil {
			os.Exit(2)
		}
		x := 0
		for cpuTime() < d {
			for i := 0; i < 100000; i++ {
				x += i
			}
		}
		fmt.Println("spun", x != 0)
	})
}

// cpuTime is the CPU time this process has used.
func cpuTime() time.Duration {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_PROCESS_CPUTIME_ID, &ts); err != nil {
		panic(err)
	}
	return time.Duration(ts.Nano())
}

func TestMain(m *testing.M) {
	if reexec.Init() {
		return
	}
	os.Exit(m.Run())
}
