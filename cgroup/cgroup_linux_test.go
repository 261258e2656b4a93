package cgroup

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/neonbox/neonbox-ns/internal/testutil"
	"github.com/neonbox/neonbox-ns/reexec"
)

// Privileged tests. Each runs on whatever Detect reports (v1 on a hybrid
// host, v2 on a unified one) and skips, with the reason, when the host has
// neither or cannot enforce the limit under test. Every cgroup a test
// makes is deleted in t.Cleanup, which also checks its directories are
// gone; every process a test starts is killed (by pid) and reaped.

// requireCgroups skips t unless it runs as root on a host with cgroups.
func requireCgroups(t *testing.T) Version {
	t.Helper()
	testutil.RequireRoot(t)
	v, why := Detect()
	if v == None {
		testutil.Skip(t, "no usable cgroups: "+why)
	}
	return v
}

var runSeq atomic.Int64

// runName is a cgroup name unique to this call, test and test process.
func runName(t *testing.T) string {
	name := strings.Map(func(r rune) rune {
		if validName(string(r)) == nil {
			return r
		}
		return '-'
	}, t.Name())
	return fmt.Sprintf("test-%d-%d-%s", os.Getpid(), runSeq.Add(1), name)
}

// newCgroup creates a cgroup for t with l (skipping t if the host cannot
// enforce l) and deletes it when t ends.
func newCgroup(t *testing.T, l Limits) *Cgroup {
	t.Helper()
	requireCgroups(t)
	return cleanupCgroup(t, func(name string) (*Cgroup, error) { return New(name, l) })
}

// cleanupCgroup calls create with a fresh name and makes t delete the
// cgroup at its end and check that its directories are gone.
func cleanupCgroup(t *testing.T, create func(name string) (*Cgroup, error)) *Cgroup {
	t.Helper()
	c, err := create(runName(t))
	if errors.Is(err, ErrUnsupported) {
		testutil.Skip(t, err.Error())
	}
	require.NoError(t, err)
	t.Cleanup(func() {
		assert.NoError(t, c.Delete())
		requireGone(t, c)
	})
	return c
}

// requireGone checks that none of c's directories exist any more.
func requireGone(t *testing.T, c *Cgroup) {
	t.Helper()
	for _, r := range c.runs {
		_, err := os.Stat(r.dir)
		assert.ErrorIs(t, err, fs.ErrNotExist, "%s still exists", r.dir)
		// neonbox/ goes with the last run in it.
		if entries, err := os.ReadDir(r.parent); err == nil {
			assert.True(t, slices.ContainsFunc(entries, fs.DirEntry.IsDir), "%s is left empty", r.parent)
		}
	}
}

// command describes a process to start: a program on PATH or one of the
// test binary's helpers.
func command(argv ...string) *exec.Cmd {
	if strings.HasPrefix(argv[0], "cgroup-test-") {
		return reexec.Command(argv[0], argv[1:]...)
	}
	return exec.Command(argv[0], argv[1:]...)
}

// start starts cmd inside c: through CLONE_INTO_CGROUP when c has an FD,
// else gated (see startGated). The process is killed and reaped when t
// ends, unless the test waited for it.
func start(t *testing.T, c *Cgroup, cmd *exec.Cmd) *exec.Cmd {
	t.Helper()
	fd, ok := c.FD()
	if !ok {
		return startGated(t, c, cmd)
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: fd}
	require.NoError(t, cmd.Start())
	reap(t, cmd)
	return cmd
}

// startGated starts cmd under helperGate, adds it to c with Add, and only
// then lets it exec cmd's program, so that none of cmd's work escapes the
// cgroup.
func startGated(t *testing.T, c *Cgroup, cmd *exec.Cmd) *exec.Cmd {
	t.Helper()
	path := cmd.Path
	gate := reexec.Command(helperGate, append([]string{path}, cmd.Args...)...)
	gate.Stdout, gate.Stderr, gate.Env, gate.ExtraFiles = cmd.Stdout, cmd.Stderr, cmd.Env, cmd.ExtraFiles
	w, err := gate.StdinPipe()
	require.NoError(t, err)
	require.NoError(t, gate.Start())
	reap(t, gate)
	require.NoError(t, c.Add(gate.Process.Pid))
	_, err = w.Write([]byte{1})
	require.NoError(t, err)
	require.NoError(t, w.Close())
	return gate
}

// reap kills (by pid) and reaps cmd when t ends, if the test did not.
func reap(t *testing.T, cmd *exec.Cmd) {
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
	})
}

// waitProcs waits until c holds at least n processes.
func waitProcs(t *testing.T, c *Cgroup, n int) []int {
	t.Helper()
	var pids []int
	require.Eventually(t, func() bool {
		var err error
		pids, err = c.procs()
		require.NoError(t, err)
		return len(pids) >= n
	}, 10*time.Second, 5*time.Millisecond, "want %d processes in the cgroup", n)
	return pids
}

// killedBy reports the signal that ended cmd, or -1.
func killedBy(cmd *exec.Cmd) syscall.Signal {
	if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return ws.Signal()
	}
	return -1
}

func TestAddPutsProcessInEveryHierarchy(t *testing.T) {
	c := newCgroup(t, Limits{})
	cmd := startGated(t, c, command("sleep", "1000"))
	pids := waitProcs(t, c, 1)
	assert.Equal(t, []int{cmd.Process.Pid}, pids)

	f, err := os.Open(fmt.Sprintf("/proc/%d/cgroup", cmd.Process.Pid))
	require.NoError(t, err)
	defer f.Close()
	v1, unified, err := procCgroups(f)
	require.NoError(t, err)
	for _, r := range c.runs {
		if r.ctrls == nil {
			assert.Equal(t, r.path, unified)
		}
		for _, ctrl := range r.ctrls {
			assert.Equal(t, r.path, v1[ctrl], ctrl)
		}
		procs, err := os.ReadFile(filepath.Join(r.dir, "cgroup.procs"))
		require.NoError(t, err)
		assert.Equal(t, fmt.Sprint(cmd.Process.Pid), strings.TrimSpace(string(procs)), r.dir)
	}
	ok, gone, err := c.owns(cmd.Process.Pid)
	require.NoError(t, err)
	assert.True(t, ok)
	assert.False(t, gone)
	assert.Error(t, c.Add(0))
}

func TestFDIsForCloneIntoCgroup(t *testing.T) {
	c := newCgroup(t, Limits{})
	fd, ok := c.FD()
	if c.Version() == V1 {
		assert.False(t, ok, "v1 has no CLONE_INTO_CGROUP")
		return
	}
	require.True(t, ok)
	cmd := command("sleep", "1000")
	cmd.SysProcAttr = &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: fd}
	require.NoError(t, cmd.Start())
	reap(t, cmd)
	assert.Equal(t, []int{cmd.Process.Pid}, waitProcs(t, c, 1))
}

func TestOpenTasksLetsAThreadJoin(t *testing.T) {
	c := newCgroup(t, Limits{Pids: 10})
	files, err := c.OpenTasks()
	require.NoError(t, err)
	if c.Version() != V1 {
		assert.Nil(t, files, "v2 joins by CLONE_INTO_CGROUP")
		return
	}
	require.Len(t, files, len(c.runs))
	defer func() {
		for _, f := range files {
			f.Close()
		}
	}()
	if d := c.dir("memory"); d != "" {
		assert.Equal(t, filepath.Join(d, "tasks"), files[0].Name(), "memory's first")
	}
	// The shell writes "0" to each tasks file it was handed (fds 3 and
	// on), then execs: the new program is in the run's cgroup.
	script := fmt.Sprintf(`for fd in $(seq 3 %d); do eval "echo 0 >&$fd"; done; exec cat /proc/self/cgroup`, 2+len(files))
	cmd := command("sh", "-c", script)
	cmd.ExtraFiles = files
	out, err := cmd.Output()
	require.NoError(t, err)
	v1, _, err := procCgroups(strings.NewReader(string(out)))
	require.NoError(t, err)
	for _, r := range c.runs {
		for _, ctrl := range r.ctrls {
			assert.Equal(t, r.path, v1[ctrl], ctrl)
		}
	}
}

func TestLimitsAreWritten(t *testing.T) {
	c := newCgroup(t, Limits{MemoryBytes: 64 << 20, CPUs: 0.5, Pids: 10})
	assert.Equal(t, Limits{MemoryBytes: 64 << 20, CPUs: 0.5, Pids: 10}, c.Limits())
	self, err := os.ReadFile("/proc/self/cgroup")
	require.NoError(t, err)
	t.Logf("we are in %q; the run is %+v", self, c.runs)

	read := func(dir, file string) string {
		t.Helper()
		data, err := os.ReadFile(filepath.Join(dir, file))
		require.NoError(t, err)
		return strings.TrimSpace(string(data))
	}
	if c.Version() == V2 {
		dir := c.runs[0].dir
		assert.Equal(t, fmt.Sprint(64<<20), read(dir, "memory.max"))
		if exists(filepath.Join(dir, "memory.swap.max")) {
			assert.Equal(t, "0", read(dir, "memory.swap.max"))
		}
		assert.Equal(t, "50000 100000", read(dir, "cpu.max"))
		assert.Equal(t, "10", read(dir, "pids.max"))
		// neonbox/ hands the controllers on and never holds processes.
		assert.Subset(t, strings.Fields(read(c.runs[0].parent, "cgroup.subtree_control")), []string{"memory", "cpu", "pids"})
		assert.Empty(t, read(c.runs[0].parent, "cgroup.procs"))
		return
	}
	mem := c.dir("memory")
	assert.Equal(t, fmt.Sprint(64<<20), read(mem, "memory.limit_in_bytes"))
	if exists(filepath.Join(mem, "memory.memsw.limit_in_bytes")) {
		assert.Equal(t, fmt.Sprint(64<<20), read(mem, "memory.memsw.limit_in_bytes"))
	}
	assert.Equal(t, "100000", read(c.dir("cpu"), "cpu.cfs_period_us"))
	assert.Equal(t, "50000", read(c.dir("cpu"), "cpu.cfs_quota_us"))
	assert.Equal(t, "10", read(c.dir("pids"), "pids.max"))
}

func TestMemoryLimitOOMKills(t *testing.T) {
	const limit = 32 << 20
	c := newCgroup(t, Limits{MemoryBytes: limit})
	assert.Equal(t, int64(limit), c.Limits().MemoryBytes)

	cmd := start(t, c, command(helperAlloc, fmt.Sprint(256<<20)))
	err := cmd.Wait()
	require.Error(t, err, "allocating 256 MiB under a 32 MiB limit must fail")
	assert.Equal(t, syscall.SIGKILL, killedBy(cmd), "%v", err)

	s, err := c.Stats()
	require.NoError(t, err)
	t.Logf("stats: %+v", s)
	assert.GreaterOrEqual(t, s.OOMKills, int64(1))
	// The peak can pass the limit by a few pages charged in flight.
	assert.LessOrEqual(t, s.PeakMemoryBytes, int64(limit+limit/100))
	assert.Greater(t, s.PeakMemoryBytes, int64(limit/2))
}

func TestPeakMemoryMatchesAllocation(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector's shadow memory inflates the helper's allocation")
	}
	const alloc = 64 << 20
	peak := func(n int) int64 {
		t.Helper()
		c := newCgroup(t, Limits{MemoryBytes: 1 << 30})
		require.NoError(t, start(t, c, command(helperAlloc, fmt.Sprint(n))).Wait())
		s, err := c.Stats()
		require.NoError(t, err)
		t.Logf("alloc %d: %+v", n, s)
		require.NotZero(t, s.PeakMemoryBytes)
		return s.PeakMemoryBytes
	}
	// The helper's own footprint (Go runtime, binary pages) is measured
	// by a run that allocates nothing and taken off.
	base, big := peak(0), peak(alloc)
	delta := big - base
	assert.InEpsilon(t, float64(alloc), float64(delta), 0.10, "peak %d - baseline %d = %d, want about %d", big, base, delta, alloc)
}

// OpenStats keeps the files Stats reads open: Stats then reads the
// same counters through them, and a deleted cgroup's are closed and
// stay closed.
func TestOpenStatsReadsTheSameCounters(t *testing.T) {
	c := newCgroup(t, Limits{MemoryBytes: 1 << 30, CPUs: 1, Pids: 64})
	require.NoError(t, start(t, c, command(helperAlloc, fmt.Sprint(16<<20))).Wait())
	byName, err := c.Stats()
	require.NoError(t, err)
	require.NotZero(t, byName.PeakMemoryBytes)

	c.OpenStats()
	files := c.statsFiles()
	var open []string
	for p := range c.stats {
		open = append(open, p)
	}
	assert.ElementsMatch(t, files, open, "every file Stats reads is open")
	opened, err := c.Stats()
	require.NoError(t, err)
	assert.Equal(t, byName, opened)

	require.NoError(t, c.Delete())
	assert.Empty(t, c.stats, "Delete closes them")
	c.OpenStats()
	assert.Empty(t, c.stats, "a deleted cgroup's are not opened again")
}

func TestPidsLimitMakesForkFail(t *testing.T) {
	const limit = 8
	c := newCgroup(t, Limits{Pids: limit})
	out, err := os.CreateTemp(t.TempDir(), "out")
	require.NoError(t, err)

	var cmd *exec.Cmd
	py := python3()
	if py != "" {
		// Forks children that sleep until the limit stops it; prints the
		// errno and how many forks succeeded.
		cmd = command(py, "-c", `
import errno, os, time
n = 0
try:
    while n < 100:
        if os.fork() == 0:
            os.close(1); os.close(2); time.sleep(600); os._exit(0)
        n += 1
except OSError as e:
    print(errno.errorcode[e.errno], n)
else:
    print("no error", n)
`)
	} else {
		cmd = command("sh", "-c", `i=0; while [ $i -lt 100 ]; do sleep 600 >/dev/null 2>&1 & i=$((i+1)); done; echo forked $i`)
	}
	cmd.Stdout, cmd.Stderr = out, out
	err = start(t, c, cmd).Wait()
	got, rerr := os.ReadFile(out.Name())
	require.NoError(t, rerr)
	t.Logf("output: %q (%v)", got, err)
	if py != "" {
		require.NoError(t, err)
		f := strings.Fields(string(got))
		require.Len(t, f, 2)
		assert.Equal(t, "EAGAIN", f[0], "fork beyond pids.max fails with EAGAIN")
		assert.Equal(t, fmt.Sprint(limit-1), f[1], "the python process plus %d children fill the limit", limit-1)
	} else {
		assert.NotContains(t, string(got), "forked 100")
	}
	ev, err := c.readKeyed(filepath.Join(c.pidsDir(), "pids.events"))
	require.NoError(t, err)
	assert.GreaterOrEqual(t, ev["max"], int64(1), "pids.events counts the refused forks")

	s, err := c.Stats()
	require.NoError(t, err)
	t.Logf("stats: %+v", s)
	assert.LessOrEqual(t, s.PidsPeak, int64(limit))
	if exists(filepath.Join(c.pidsDir(), "pids.peak")) {
		assert.Equal(t, int64(limit), s.PidsPeak)
	}
	require.NoError(t, c.Kill()) // the sleeping children
	pids, err := c.procs()
	require.NoError(t, err)
	assert.Empty(t, pids)
}

// pidsDir is c's directory that has the pids files.
func (c *Cgroup) pidsDir() string {
	if c.version == V2 {
		return c.runs[0].dir
	}
	return c.dir("pids")
}

// python3 returns the real python3 executable (not a pyenv shim, which
// forks on its own), or "" if there is none.
func python3() string {
	out, err := exec.Command("python3", "-c", "import sys; print(sys.executable)").Output()
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(out))
}

func TestCPUQuotaThrottles(t *testing.T) {
	c := newCgroup(t, Limits{CPUs: 0.2})
	assert.InDelta(t, 0.2, c.Limits().CPUs, 1e-9)

	// 300 ms of CPU time at 20 ms per 100 ms period takes 1.5 s or more.
	begin := time.Now()
	require.NoError(t, start(t, c, command(helperSpin, "300ms")).Wait())
	wall := time.Since(begin)

	s, err := c.Stats()
	require.NoError(t, err)
	t.Logf("wall %v, stats %+v", wall, s)
	assert.GreaterOrEqual(t, s.NrThrottled, int64(1), "a busy loop under a 0.2 CPU quota is throttled")
	assert.NotZero(t, s.ThrottledTime)
	assert.NotZero(t, s.CPUUsage)
	// 0.2 of a core is expected; half the wall time is a clearly safe bound.
	assert.Less(t, s.CPUUsage, wall/2)
}

// treeScript starts a process tree that ignores SIGTERM: sh, a sleep, and
// a second sh with its own sleep. It prints "ready" once all are started.
const treeScript = `trap '' TERM
sleep 1000 &
sh -c 'trap "" TERM; sleep 1000 & echo ready; wait' &
wait`

// On v1 a cgroup joins the cpu hierarchy only for a CPU limit (where cpu
// and cpuacct are mounted together, their directory stays, for cpuacct).
func TestV1CPUHierarchyOnlyForACPULimit(t *testing.T) {
	requireCgroups(t)
	h := Probe()
	if v, _ := h.h.version(); v != V1 {
		t.Skip("not a v1 host")
	}
	none := cleanupCgroup(t, func(name string) (*Cgroup, error) { return h.New(name, Limits{Pids: 64}) })
	assert.Empty(t, none.dir("cpu"))
	assert.NotEmpty(t, none.dir("cpuacct"))
	s, err := none.Stats()
	require.NoError(t, err)
	assert.Zero(t, s.NrThrottled)
	limited := cleanupCgroup(t, func(name string) (*Cgroup, error) { return h.New(name, Limits{CPUs: 1}) })
	assert.NotEmpty(t, limited.dir("cpu"))
}

// A cgroup made WithoutFreezer has no freezer directory on v1, and Kill
// still ends a process tree in it.
func TestWithoutFreezer(t *testing.T) {
	requireCgroups(t)
	c := cleanupCgroup(t, func(name string) (*Cgroup, error) { return Probe().WithoutFreezer().New(name, Limits{Pids: 64}) })
	if c.Version() == V1 {
		assert.Empty(t, c.dir("freezer"))
		if _, err := os.Stat("/sys/fs/cgroup/freezer"); err == nil {
			full := cleanupCgroup(t, func(name string) (*Cgroup, error) { return New(name, Limits{Pids: 64}) })
			assert.NotEmpty(t, full.dir("freezer"), "New alone keeps the freezer where it is mounted")
		}
	}
	cmd := start(t, c, command("sh", "-c", treeScript))
	pids := waitProcs(t, c, 4)
	require.NoError(t, c.Kill())
	left, err := c.procs()
	require.NoError(t, err)
	assert.Empty(t, left)
	assert.Error(t, cmd.Wait())
	for _, pid := range pids {
		assert.True(t, deadOrZombie(pid), "pid %d lives on", pid)
	}
}

func TestKillKillsProcessTree(t *testing.T) {
	for _, tc := range []struct {
		name string
		kill func(c *Cgroup) error
	}{
		{"Kill", (*Cgroup).Kill},
		{"signal each, no freezer", func(c *Cgroup) error { return c.killRounds(time.Now().Add(killTimeout), nil) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newCgroup(t, Limits{})
			cmd := start(t, c, command("sh", "-c", treeScript))
			pids := waitProcs(t, c, 4)

			// SIGTERM does nothing to them.
			for _, pid := range pids {
				require.NoError(t, syscall.Kill(pid, syscall.SIGTERM))
			}
			time.Sleep(100 * time.Millisecond)
			still, err := c.procs()
			require.NoError(t, err)
			require.Equal(t, pids, still, "the tree ignores SIGTERM")

			// Kill before reaping: the unreaped sh must not count.
			require.NoError(t, tc.kill(c))
			left, err := c.procs()
			require.NoError(t, err)
			assert.Empty(t, left)
			assert.Error(t, cmd.Wait())
			assert.Equal(t, syscall.SIGKILL, killedBy(cmd))
			for _, pid := range pids {
				assert.True(t, deadOrZombie(pid), "pid %d lives on", pid)
			}
			require.NoError(t, c.Kill(), "killing an empty cgroup")
		})
	}
}

// deadOrZombie reports whether pid has exited (the grandchildren Kill
// killed are reaped by init, in its own time).
func deadOrZombie(pid int) bool {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true
	}
	f := strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+1:]))
	return len(f) > 0 && (f[0] == "Z" || f[0] == "X")
}

func TestDeleteRemovesEverything(t *testing.T) {
	c := newCgroup(t, Limits{MemoryBytes: 256 << 20, Pids: 64, CPUs: 1})
	// A process in the run, and one in a cgroup the run made below its
	// own (as a jail with its own cgroup tree would).
	cmd := start(t, c, command("sleep", "1000"))
	inner := command("sleep", "1000")
	require.NoError(t, inner.Start())
	reap(t, inner)
	for _, r := range c.runs {
		require.NoError(t, os.Mkdir(filepath.Join(r.dir, "inner"), 0o755))
		require.NoError(t, writeFile(filepath.Join(r.dir, "inner", "cgroup.procs"), fmt.Sprint(inner.Process.Pid)))
	}
	waitProcs(t, c, 2)

	require.NoError(t, c.Delete())
	requireGone(t, c)
	assert.Equal(t, syscall.SIGKILL, func() syscall.Signal { _ = cmd.Wait(); return killedBy(cmd) }())
	assert.Equal(t, syscall.SIGKILL, func() syscall.Signal { _ = inner.Wait(); return killedBy(inner) }())
	_, ok := c.FD()
	assert.False(t, ok, "no FD after Delete")
	require.NoError(t, c.Delete(), "Delete again")
	// The cleanup runs Delete a third time and checks again.
}

func TestNewRefuses(t *testing.T) {
	v := requireCgroups(t)

	t.Run("existing name", func(t *testing.T) {
		c := newCgroup(t, Limits{})
		_, err := New(c.name, Limits{})
		require.Error(t, err)
		assert.Contains(t, err.Error(), "exists already")
		for _, r := range c.runs {
			assert.DirExists(t, r.dir, "the first cgroup is left alone")
		}
	})

	t.Run("bad input", func(t *testing.T) {
		for _, tc := range []struct {
			name string
			l    Limits
		}{
			{"../escape", Limits{}},
			{"ok", Limits{MemoryBytes: -1}},
			{"ok", Limits{CPUs: 0.0001}},
		} {
			_, err := New(tc.name, tc.l)
			assert.Error(t, err, "%+v", tc)
			assert.NotErrorIs(t, err, ErrUnsupported)
		}
	})

	t.Run("limit without controller", func(t *testing.T) {
		h := probe(defaultV2Mount)
		var l Limits
		switch v {
		case V1: // pretend the pids hierarchy is not mounted
			delete(h.v1, "pids")
			h.v1Full = false
			l = Limits{Pids: 10, MemoryBytes: 64 << 20}
		case V2: // pretend there are no cgroups at all
			h = &host{v2Why: "pretend", v1: map[string]v1Hier{}, v1Why: "pretend"}
			l = Limits{MemoryBytes: 64 << 20}
		}
		name := runName(t)
		_, err := newAt(h, name, l)
		require.ErrorIs(t, err, ErrUnsupported)
		t.Log(err)
		if v == V1 {
			assert.Contains(t, err.Error(), "pids")
			assert.NoDirExists(t, filepath.Join(h.v1["memory"].own.dir, runsDir, name), "nothing is created")
		}
	})
}

// TestHybridUnified runs a v2 cgroup on a hybrid host's controller-less
// cgroup2 mount (/sys/fs/cgroup/unified): no limits are possible there,
// but CLONE_INTO_CGROUP, cgroup.kill, cgroup.freeze, cpu.stat and removal
// are, so the v2 code paths that do not need controllers get exercised on
// hosts that otherwise use v1.
func TestHybridUnified(t *testing.T) {
	testutil.RequireRoot(t)
	const mount = "/sys/fs/cgroup/unified"
	if !isCgroup2(mount) {
		t.Skip("not a hybrid host: no cgroup2 at " + mount)
	}
	h := probe(mount)
	require.NotNil(t, h.v2, h.v2Why)

	t.Run("limits refused", func(t *testing.T) {
		ctrls, err := readControllers(h.v2.base.dir, "cgroup.controllers")
		require.NoError(t, err)
		if ctrls["memory"] {
			t.Skip("this cgroup2 mount has the memory controller")
		}
		_, err = newV2(h.v2, runName(t), Limits{MemoryBytes: 64 << 20}, 0)
		require.ErrorIs(t, err, ErrUnsupported)
		assert.Contains(t, err.Error(), "memory")
	})

	newUnified := func(t *testing.T) *Cgroup {
		return cleanupCgroup(t, func(name string) (*Cgroup, error) { return newV2(h.v2, name, Limits{}, 0) })
	}

	t.Run("clone into, stats, kill", func(t *testing.T) {
		c := newUnified(t)
		_, ok := c.FD()
		require.True(t, ok)
		require.NoError(t, start(t, c, command(helperSpin, "100ms")).Wait())
		s, err := c.Stats()
		require.NoError(t, err)
		t.Logf("stats: %+v", s)
		assert.GreaterOrEqual(t, s.CPUUsage, 100*time.Millisecond)

		cmd := start(t, c, command("sh", "-c", treeScript))
		waitProcs(t, c, 4)
		require.NoError(t, c.Kill())
		_ = cmd.Wait()
		assert.Equal(t, syscall.SIGKILL, killedBy(cmd))
	})

	t.Run("freeze and signal fallback", func(t *testing.T) {
		c := newUnified(t)
		cmd := startGated(t, c, command("sh", "-c", treeScript))
		waitProcs(t, c, 4)
		require.NoError(t, c.killRounds(time.Now().Add(killTimeout), c.freezeV2))
		_ = cmd.Wait()
		assert.Equal(t, syscall.SIGKILL, killedBy(cmd))
		ev, err := c.readKeyed(filepath.Join(c.runs[0].dir, "cgroup.events"))
		require.NoError(t, err)
		assert.Equal(t, int64(0), ev["frozen"], "thawed again")
	})
}

// RemoveStale finds the cgroup of a run whose owner died by its name
// alone, kills what is still in it (recognising its processes by the
// path /proc/<pid>/cgroup shows) and removes its directories.
func TestRemoveStaleKillsAndRemoves(t *testing.T) {
	c := newCgroup(t, Limits{})
	cmd := start(t, c, command("sleep", "1000"))
	waitProcs(t, c, 1)
	require.NoError(t, RemoveStale(c.name))
	_ = cmd.Wait()
	assert.Equal(t, syscall.SIGKILL, killedBy(cmd))
	requireGone(t, c)
}

// exists reports whether path exists.
func exists(path string) bool {
	_, err := os.Lstat(path)
	return err == nil
}
