package cgroup

import (
	"errors"
	"fmt"
	"math"
	"time"
)

// Limits are the resource limits of one run. Zero means "no limit".
type Limits struct {
	// MemoryBytes caps the run's memory (v2 memory.max with
	// memory.swap.max=0; v1 memory.limit_in_bytes, and memsw when present).
	// The kernel rounds it down to a whole page.
	MemoryBytes int64
	// CPUs caps CPU time in cores, e.g. 0.5 for half a core: the quota per
	// 100 ms period (v2 cpu.max; v1 cpu.cfs_quota_us/cpu.cfs_period_us).
	CPUs float64
	// Pids caps the number of tasks (processes and threads) in the run
	// (pids.max); a fork beyond it fails with EAGAIN.
	Pids int64
}

// Version names the cgroup interface a Cgroup uses.
type Version string

// The cgroup versions Detect reports.
const (
	V2   Version = "v2"
	V1   Version = "v1"
	None Version = "none"
)

// Stats is what a run used. A zero field can also mean "unknown": the
// kernel or the host's controllers do not report it.
type Stats struct {
	// PeakMemoryBytes is the highest memory use (v2 memory.peak, v1
	// memory.max_usage_in_bytes).
	PeakMemoryBytes int64
	// CPUUsage is the CPU time used (v2 cpu.stat usage_usec, v1
	// cpuacct.usage).
	CPUUsage time.Duration
	// OOMKills counts processes the OOM killer killed because of the
	// memory limit (v2 memory.events oom_kill, v1 memory.oom_control
	// oom_kill).
	OOMKills int64
	// PidsPeak is the highest number of tasks at once (pids.peak, where
	// the kernel has it).
	PidsPeak int64
	// NrThrottled counts the periods in which the CPU quota ran out, and
	// ThrottledTime is how long the run was held back (cpu.stat).
	NrThrottled   int64
	ThrottledTime time.Duration
}

// ErrUnsupported marks an error from New for a limit this host cannot
// enforce (no such controller, or it is not delegated to us) or for a host
// without usable cgroups. Test for it with errors.Is.
var ErrUnsupported = errors.New("cgroup limit cannot be enforced on this host")

// cfsPeriod is the CPU quota period, in microseconds (100 ms, the kernel's
// default).
const cfsPeriod = 100000

// minQuota is the smallest CPU quota the kernel accepts, in microseconds.
const minQuota = 1000

// killTimeout bounds how long Kill waits for the cgroup to empty.
const killTimeout = 5 * time.Second

// validate checks l and returns the CPU quota per cfsPeriod, in
// microseconds (0 for no CPU limit).
func (l Limits) validate() (quota int64, err error) {
	if l.MemoryBytes < 0 {
		return 0, fmt.Errorf("memory limit %d: must not be negative", l.MemoryBytes)
	}
	if l.Pids < 0 {
		return 0, fmt.Errorf("pids limit %d: must not be negative", l.Pids)
	}
	if math.IsNaN(l.CPUs) || math.IsInf(l.CPUs, 0) || l.CPUs < 0 {
		return 0, fmt.Errorf("cpu limit %v: must be a non-negative number of cores", l.CPUs)
	}
	if l.CPUs == 0 {
		return 0, nil
	}
	if l.CPUs > 1<<20 {
		return 0, fmt.Errorf("cpu limit %v: too many cores", l.CPUs)
	}
	quota = int64(math.Round(l.CPUs * cfsPeriod))
	if quota < minQuota {
		return 0, fmt.Errorf("cpu limit %v: below the kernel's minimum of %v cores", l.CPUs, float64(minQuota)/cfsPeriod)
	}
	return quota, nil
}

// validName checks that name can be a cgroup directory of its own: one
// path component of letters, digits, '.', '_' and '-', not starting with
// '.'.
func validName(name string) error {
	if name == "" || len(name) > 200 {
		return fmt.Errorf("cgroup name %q: must be 1 to 200 characters", name)
	}
	if name[0] == '.' {
		return fmt.Errorf("cgroup name %q: must not start with '.'", name)
	}
	for _, r := range name {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '.', r == '_', r == '-':
		default:
			return fmt.Errorf("cgroup name %q: only letters, digits, '.', '_' and '-' are allowed", name)
		}
	}
	return nil
}
