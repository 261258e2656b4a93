package nsjail_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/neonbox/neonbox-ns/cgroup"
	"github.com/neonbox/neonbox-ns/internal/testutil"
	"github.com/neonbox/neonbox-ns/nsjail"
)

func requireCgroups(t *testing.T) cgroup.Version {
	t.Helper()
	v, why := cgroup.Detect()
	if v == cgroup.None {
		testutil.Skip(t, "no usable cgroups: "+why)
	}
	return v
}

func limits(l cgroup.Limits, timeout time.Duration) func(*nsjail.Options) {
	return func(o *nsjail.Options) { o.Limits, o.Timeout = l, timeout }
}

func TestMemoryLimitAndRollback(t *testing.T) {
	e := newJailEnv(t)
	requireCgroups(t)
	makeFixture(t, e.ws)
	before := testutil.Snapshot(t, e.ws)
	// The shell survives the OOM kill of its child and exits 0: the run
	// is still MEMORY_EXCEEDED and rolled back.
	r, _, _ := e.run(t, limits(cgroup.Limits{MemoryBytes: 64 << 20}, 0), "sh", "-c",
		"echo x >> f.txt; "+py+" -c 'b = bytearray(512 << 20)'; exit 0")
	assert.Equal(t, nsjail.StatusMemoryExceeded, r.Status)
	assert.Equal(t, 137, r.ExitStatus())
	assert.GreaterOrEqual(t, r.OOMKills, int64(1))
	assert.Equal(t, int64(64<<20), r.Limits.MemoryBytes)
	assert.True(t, r.RollbackPerformed)
	assert.Equal(t, before, testutil.Snapshot(t, e.ws))
}

func TestPeakMemoryMatchesAllocation(t *testing.T) {
	e := newJailEnv(t)
	requireCgroups(t)
	base, _, _ := e.run(t, nil, py, "-c", "pass")
	require.Equal(t, nsjail.StatusSuccess, base.Status, base.Error)
	r, _, _ := e.run(t, nil, py, "-c", "b = bytearray(64 << 20)")
	require.Equal(t, nsjail.StatusSuccess, r.Status, r.Error)
	got := r.PeakMemoryMB - base.PeakMemoryMB
	assert.InDelta(t, 64, got, 6.4, "peak %v MB, baseline %v MB", r.PeakMemoryMB, base.PeakMemoryMB)
}

func TestTimeoutKillsTreeIgnoringSIGTERM(t *testing.T) {
	e := newJailEnv(t)
	requireCgroups(t)
	start := time.Now()
	r, _, _ := e.run(t, limits(cgroup.Limits{}, 300*time.Millisecond), "sh", "-c",
		"trap '' TERM; (trap '' TERM; sleep 100) & (setsid sh -c \"trap '' TERM; sleep 100\" &) ; echo x > f; sleep 100")
	assert.Equal(t, nsjail.StatusTimeout, r.Status)
	assert.Less(t, time.Since(start), 10*time.Second)
	_, err := os.Stat(filepath.Join(e.ws, "f"))
	assert.True(t, os.IsNotExist(err))
	assertNoJailProcesses(t, r.ID)
}

func TestPidsLimitContainsForkBomb(t *testing.T) {
	e := newJailEnv(t)
	requireCgroups(t)
	r, _, _ := e.run(t, limits(cgroup.Limits{Pids: 64}, 2*time.Second), "sh", "-c", ":(){ :|:& };:; sleep 5")
	assert.Contains(t, []nsjail.Status{nsjail.StatusTimeout, nsjail.StatusExecutionError}, r.Status)
	if r.PidsPeak > 0 {
		assert.LessOrEqual(t, r.PidsPeak, int64(64))
	}
	assert.Equal(t, int64(64), r.Limits.Pids)
	assertNoJailProcesses(t, r.ID)
	// The host is still responsive: a normal run right after works.
	r, out, _ := e.run(t, nil, "echo", "alive")
	require.Equal(t, nsjail.StatusSuccess, r.Status, r.Error)
	assert.Equal(t, "alive\n", out)
}

func TestCPUQuotaThrottles(t *testing.T) {
	e := newJailEnv(t)
	requireCgroups(t)
	// Spin until 300 ms of CPU time are used: at 0.2 cores that takes at
	// least 1.5 s of wall time, however slow the machine.
	r, _, _ := e.run(t, limits(cgroup.Limits{CPUs: 0.2}, time.Minute), py, "-c",
		"import time\nwhile time.process_time() < 0.3: pass")
	require.Equal(t, nsjail.StatusSuccess, r.Status, r.Error)
	assert.Greater(t, r.CPUThrottled, int64(0), "cpu.stat nr_throttled")
	assert.Less(t, r.CPUTimeMS, 0.5*r.ExecutionTimeMS, "CPU time %vms over %vms", r.CPUTimeMS, r.ExecutionTimeMS)
	assert.InDelta(t, 0.2, r.Limits.CPUs, 0.001)
}

func TestUnenforceableLimitsAreRefused(t *testing.T) {
	e := newJailEnv(t)
	if v, _ := cgroup.Detect(); v != cgroup.None {
		t.Skip("this host can enforce limits; the refusal path needs one that cannot")
	}
	r, _, _ := e.run(t, limits(cgroup.Limits{MemoryBytes: 1 << 30}, 0), "true")
	assert.Equal(t, nsjail.StatusSandboxError, r.Status)
	assert.Contains(t, r.Error.Message, "--allow-unlimited")
	r, _, _ = e.run(t, func(o *nsjail.Options) { o.Limits.MemoryBytes, o.AllowUnlimited = 1<<30, true }, "true")
	assert.Equal(t, nsjail.StatusSuccess, r.Status)
	assert.True(t, r.Limits.Unenforced)
}

// After many runs, killed and OOM'd ones among them, nothing of ours is
// left: no cgroup, mount, process or run directory.
func TestNoLeftoversAfterManyRuns(t *testing.T) {
	e := newJailEnv(t)
	requireCgroups(t)
	n := 1000
	if testing.Short() {
		n = 100
	}
	ids := map[string]bool{}
	for i := range n {
		var edit func(*nsjail.Options)
		argv := []string{"true"}
		switch {
		case i%100 == 7:
			edit, argv = limits(cgroup.Limits{MemoryBytes: 32 << 20}, 0), []string{py, "-c", "b = bytearray(256 << 20)"}
		case i%10 == 3:
			edit, argv = limits(cgroup.Limits{}, 20*time.Millisecond), []string{"sleep", "10"}
		case i%10 == 5:
			argv = []string{"sh", "-c", "echo $$ > f; exit 1"}
		case i%10 == 8:
			argv = []string{"sh", "-c", "echo x > f$$"}
		}
		r, _, _ := e.run(t, edit, argv...)
		ids["run-"+r.ID] = true
		require.NotEqual(t, nsjail.StatusSandboxError, r.Status, "run %d: %v", i, r.Error)
		require.Empty(t, r.Warnings, "run %d", i)
	}
	var runs []string
	for id := range ids {
		runs = append(runs, strings.TrimPrefix(id, "run-"))
	}
	assertNoJailProcesses(t, runs...)
	// Other tests may be running jails at the same time: look for the
	// cgroups of these runs only.
	var left []string
	for _, dir := range ourCgroups(t) {
		if ids[filepath.Base(dir)] {
			left = append(left, dir)
		}
	}
	assert.Empty(t, left, "cgroups left behind")
}

// ourCgroups lists run cgroups below this process's cgroups.
func ourCgroups(t *testing.T) []string {
	t.Helper()
	var out []string
	b, err := os.ReadFile("/proc/self/cgroup")
	require.NoError(t, err)
	for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		parts := strings.SplitN(l, ":", 3)
		if len(parts) != 3 {
			continue
		}
		ctrls := parts[1]
		if ctrls == "" {
			ctrls = "unified"
		}
		for _, c := range strings.Split(ctrls, ",") {
			dirs, _ := filepath.Glob(filepath.Join("/sys/fs/cgroup", c, parts[2], "neonbox", "run-*"))
			if c == "unified" {
				more, _ := filepath.Glob(filepath.Join("/sys/fs/cgroup", parts[2], "neonbox", "run-*"))
				dirs = append(dirs, more...)
			}
			out = append(out, dirs...)
		}
	}
	return out
}
