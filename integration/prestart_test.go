package integration

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
	"unsafe"

	libseccomp "github.com/seccomp/libseccomp-golang"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/neonbox/neonbox-ns/cgroup"
	"github.com/neonbox/neonbox-ns/internal/jailinit"
	"github.com/neonbox/neonbox-ns/reexec"
)

// spawnSteps returns the spawn steps of a --json run's receipt.
func spawnSteps(t *testing.T, r result) map[string]any {
	t.Helper()
	require.Equal(t, 0, r.code, r.stderr)
	phases, ok := decodeReceipt(t, r.stdout)["phases"].(map[string]any)
	require.True(t, ok, r.stdout)
	steps, ok := phases["spawn"].(map[string]any)
	require.True(t, ok, r.stdout)
	return steps
}

// `neonbox-ns exec` starts its jail's init before its Go runtime, where
// the init need not be born in its cgroup, and the run takes that init;
// a --disk run, whose tmpfs the prestarted init's mount namespace
// predates, starts a fresh one (and still sees its tmpfs), and so does a
// run with network (the prestarted init made a network namespace; the
// jail has the host's).
func TestExecTakesThePrestartedInit(t *testing.T) {
	e := newEnv(t)
	steps := spawnSteps(t, e.exec(t, "", []string{"--json"}, "true"))
	if cgroup.Unified() {
		assert.Contains(t, steps, "parent_started", "a unified cgroup2 host starts the init in its cgroup")
		assert.NotContains(t, steps, "adopted")
		return
	}
	assert.Contains(t, steps, "adopted")
	assert.NotContains(t, steps, "parent_started")

	r := e.exec(t, "", []string{"--json", "--disk", "16M"}, "sh", "-c", "df -k . | tail -1")
	steps = spawnSteps(t, r)
	assert.Contains(t, steps, "parent_started")
	assert.NotContains(t, steps, "adopted")
	assert.Contains(t, decodeReceipt(t, r.stdout)["stdout"], " 16384 ", "the run's tmpfs is its workspace's upper layer")

	ifaces, err := os.ReadDir("/sys/class/net")
	require.NoError(t, err)
	var host string
	for _, i := range ifaces {
		if i.Name() != "lo" {
			host = i.Name()
		}
	}
	if host == "" {
		t.Skip("the host has no network interface but lo")
	}
	r = e.exec(t, "", []string{"--json", "--allow", "network"}, "cat", "/proc/net/dev")
	steps = spawnSteps(t, r)
	assert.Contains(t, steps, "parent_started")
	assert.NotContains(t, steps, "adopted")
	assert.Contains(t, decodeReceipt(t, r.stdout)["stdout"], host+":", "the jail with network sees the host's interfaces")
}

// `neonbox-ns exec` queues the base of its jail's program, as the last
// run with the same state dir wrote it, before its Go runtime starts, so
// that the init builds it meanwhile; neonbox-ns takes that init only if
// the base is byte for byte the one it would have sent, and otherwise
// starts another and writes its own base for the next run. A base file
// another user could have written is never queued.
func TestExecQueuesTheLastRunsBase(t *testing.T) {
	e := newEnv(t)
	if cgroup.Unified() {
		t.Skip("a unified cgroup2 host prestarts no init")
	}
	file := filepath.Join(e.state, jailinit.BaseFile)
	streams := []string{"sh", "-c", "echo out; echo err >&2"}
	run := func(flags ...string) (map[string]any, map[string]any) {
		t.Helper()
		r := e.exec(t, "", append([]string{"--json"}, flags...), streams...)
		rec := decodeReceipt(t, r.stdout)
		assert.Equal(t, "out\n", rec["stdout"], "CMD's streams come with the rest")
		assert.Equal(t, "err\n", rec["stderr"])
		return spawnSteps(t, r), rec
	}

	steps, _ := run()
	assert.Contains(t, steps, "base_sent", "no base to queue yet")
	assert.NotContains(t, steps, "base_prestarted")
	want, err := os.ReadFile(file)
	require.NoError(t, err, "the run wrote its base")
	var st unix.Stat_t
	require.NoError(t, unix.Stat(file, &st))
	assert.Equal(t, uint32(0o600), st.Mode&0o7777)

	steps, _ = run()
	assert.Contains(t, steps, "base_prestarted")
	assert.NotContains(t, steps, "base_sent")
	// The state dir from --state-dir=DIR too, a terminal's devpts and
	// a policy's binds notwithstanding (the rest has them).
	r := neonbox(t, e.ws, "", "exec", "--workspace", e.ws, "--state-dir="+e.state, "--json", "--", "true")
	assert.Contains(t, spawnSteps(t, r), "base_prestarted")

	// A base that is not this run's: another init, and this run's base
	// for the next.
	stale := bytes.Replace(want, []byte("/dev"), []byte("/dex"), 1)
	require.NotEqual(t, want, stale)
	require.NoError(t, os.WriteFile(file, stale, 0o600))
	steps, _ = run()
	assert.Contains(t, steps, "parent_started")
	assert.NotContains(t, steps, "adopted")
	got, err := os.ReadFile(file)
	require.NoError(t, err)
	assert.Equal(t, want, got)

	// Not queued, and replaced: a base another build wrote (its header
	// names another binary), ...
	other := bytes.Clone(want)
	other[len(jailinit.BaseMagic)] ^= 0xff
	require.NoError(t, os.WriteFile(file, other, 0o600))
	steps, _ = run()
	assert.Contains(t, steps, "adopted")
	assert.Contains(t, steps, "base_sent")
	got, err = os.ReadFile(file)
	require.NoError(t, err)
	assert.Equal(t, want, got)
	// ... a FIFO, which must not block the prestart, ...
	require.NoError(t, os.Remove(file))
	require.NoError(t, unix.Mkfifo(file, 0o600))
	steps, _ = run()
	assert.Contains(t, steps, "base_sent")
	// ... and a state dir others may write.
	require.NoError(t, os.Chmod(e.state, 0o771))
	steps, _ = run()
	assert.Contains(t, steps, "base_sent")
	require.NoError(t, os.Chmod(e.state, 0o711))
	steps, _ = run()
	assert.Contains(t, steps, "base_prestarted")

	// Group-writable: not queued, and replaced.
	require.NoError(t, os.Chmod(file, 0o620))
	steps, _ = run()
	assert.Contains(t, steps, "adopted")
	assert.Contains(t, steps, "base_sent")
	require.NoError(t, unix.Stat(file, &st))
	assert.Equal(t, uint32(0o600), st.Mode&0o7777)
	steps, _ = run()
	assert.Contains(t, steps, "base_prestarted")
}

// A run that wrote the state dir's base stamps it (the host as the survey
// sees it); the next run, with that base queued and the host unchanged,
// takes it without surveying. A stamp that names another base, or that
// others may write, is not taken, and is replaced.
func TestExecTakesAStampedBase(t *testing.T) {
	e := newEnv(t)
	if cgroup.Unified() {
		t.Skip("a unified cgroup2 host prestarts no init")
	}
	stamp := filepath.Join(e.state, jailinit.BaseFile+".stamp")
	run := func() map[string]any {
		t.Helper()
		return spawnSteps(t, e.exec(t, "", []string{"--json"}, "true"))
	}
	steps := run()
	assert.NotContains(t, steps, "base_stamped", "no base yet")
	for i := 0; i < 3; i++ {
		if _, err := os.Stat(stamp); err == nil {
			break
		}
		// One of the stamped host directories changed in the last 2 s.
		time.Sleep(2100 * time.Millisecond)
		run()
	}
	require.FileExists(t, stamp)
	steps = run()
	assert.Contains(t, steps, "base_prestarted")
	assert.Contains(t, steps, "base_stamped")

	good, err := os.ReadFile(stamp)
	require.NoError(t, err)
	bad := bytes.Clone(good)
	bad[0] ^= 0xff // the hash of another base
	require.NoError(t, os.WriteFile(stamp, bad, 0o600))
	steps = run()
	assert.Contains(t, steps, "base_prestarted", "the base itself is this run's")
	assert.NotContains(t, steps, "base_stamped")
	got, err := os.ReadFile(stamp)
	require.NoError(t, err)
	assert.Equal(t, good[:32], got[:32], "stamped again, with this base's hash")
	assert.Contains(t, run(), "base_stamped")

	require.NoError(t, os.Chmod(stamp, 0o622))
	assert.NotContains(t, run(), "base_stamped", "others may write it")
	assert.Contains(t, run(), "base_stamped", "replaced")

	// A stamped run that fails leaves no stamp: the next run surveys.
	busy := exec.Command(binary, "exec", "--workspace", e.ws, "--state-dir", e.state, "--", "sleep", "2")
	busy.Env = []string{"PATH=/usr/bin:/bin"}
	require.NoError(t, busy.Start())
	t.Cleanup(func() { _ = busy.Process.Kill(); _ = busy.Wait() })
	require.Eventually(t, func() bool {
		entries, _ := os.ReadDir(filepath.Join(e.state, "runs"))
		return len(entries) > 0
	}, 10*time.Second, 5*time.Millisecond)
	time.Sleep(200 * time.Millisecond) // past its lock
	r := e.exec(t, "", []string{"--json", "--lock-timeout", "50ms"}, "true")
	assert.Equal(t, "SANDBOX_ERROR", decodeReceipt(t, r.stdout)["status"], r.stderr)
	assert.NoFileExists(t, stamp)
	require.NoError(t, busy.Wait())
}

// A prestarted init that no run takes holds the caller's stdout and
// stderr: it must go with neonbox-ns, or a caller that reads them to the
// end would wait forever.
func TestUnusedPrestartedInitGoesWithNeonboxNS(t *testing.T) {
	e := newEnv(t)
	if cgroup.Unified() {
		t.Skip("a unified cgroup2 host prestarts no init")
	}
	cmd := exec.Command(binary, "exec", "--workspace", e.ws, "--no-such-flag", "--", "true")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	cmd.WaitDelay = 10 * time.Second
	err := cmd.Run()
	require.False(t, errors.Is(err, exec.ErrWaitDelay), "something neonbox-ns started still holds its output")
	var ee *exec.ExitError
	require.ErrorAs(t, err, &ee)
	assert.Equal(t, 2, ee.ExitCode(), out.String())
}

// A prestarted init discarded in the middle of a run (--disk) is reaped
// at once: while CMD runs, neonbox-ns's only child is the jail's init.
func TestDiscardedPrestartedInitIsReaped(t *testing.T) {
	e := newEnv(t)
	if cgroup.Unified() {
		t.Skip("a unified cgroup2 host prestarts no init")
	}
	cmd := exec.Command(binary, "exec", "--workspace", e.ws, "--state-dir", e.state, "--disk", "16M", "--", "sleep", "30")
	require.NoError(t, cmd.Start())
	t.Cleanup(func() {
		// Ended as a caller would: the run is killed and cleaned up.
		_ = cmd.Process.Signal(syscall.SIGTERM)
		_ = cmd.Wait()
	})
	var kids []int
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		kids = children(t, cmd.Process.Pid)
		if len(kids) == 1 && comm(kids[0]) == "sleep" {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("neonbox-ns's children are %v, not just the jail's sleep", kids)
}

// children lists the children of every thread of pid.
func children(t *testing.T, pid int) []int {
	t.Helper()
	dir := "/proc/" + strconv.Itoa(pid) + "/task"
	tasks, err := os.ReadDir(dir)
	require.NoError(t, err)
	var kids []int
	for _, task := range tasks {
		b, err := os.ReadFile(dir + "/" + task.Name() + "/children")
		if err != nil {
			continue // the thread has exited
		}
		for _, f := range strings.Fields(string(b)) {
			k, err := strconv.Atoi(f)
			require.NoError(t, err)
			kids = append(kids, k)
		}
	}
	return kids
}

func comm(pid int) string {
	b, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/comm")
	return strings.TrimSpace(string(b))
}

// A signal to neonbox-ns cancels the run: the jail is killed, its
// changes are rolled back and its run dir is removed.
func TestSignalCancelsTheRun(t *testing.T) {
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP} {
		t.Run(sig.String(), func(t *testing.T) {
			e := newEnv(t)
			cmd := exec.Command(binary, "exec", "--workspace", e.ws, "--state-dir", e.state, "--json", "--",
				"sh", "-c", "echo changed > f; exec sleep 30")
			var out bytes.Buffer
			cmd.Stdout = &out
			require.NoError(t, cmd.Start())
			deadline := time.Now().Add(20 * time.Second)
			for !hasChild(t, cmd.Process.Pid, "sleep") {
				require.True(t, time.Now().Before(deadline), "the jail's sleep never started")
				time.Sleep(10 * time.Millisecond)
			}
			require.NoError(t, cmd.Process.Signal(sig))
			err := cmd.Wait()
			var ee *exec.ExitError
			require.ErrorAs(t, err, &ee)
			assert.Equal(t, 130, ee.ExitCode())
			r := decodeReceipt(t, out.String())
			assert.Equal(t, "CANCELED", r["status"])
			assert.Equal(t, true, r["rollback_performed"])
			assert.NoFileExists(t, e.ws+"/f")
			assert.Empty(t, runsLeft(t, e.state))
		})
	}
}

func hasChild(t *testing.T, pid int, name string) bool {
	for _, k := range children(t, pid) {
		if comm(k) == name {
			return true
		}
	}
	return false
}

// A prestarted init that cannot start (here execve(2) is denied to
// neonbox-ns by a seccomp filter): the run says which step failed and
// why (the prestarted init's report, or a fresh start's error when it
// fell back to one), not just that the init went away.
func TestPrestartedInitThatCannotStart(t *testing.T) {
	e := newEnv(t)
	if cgroup.Unified() {
		t.Skip("a unified cgroup2 host prestarts no init")
	}
	cmd := reexec.Command(denyExecveName, binary, "exec", "--workspace", e.ws, "--state-dir", e.state, "--", "true")
	r := runCmd(t, cmd)
	require.Equal(t, 125, r.code, r.stderr)
	assert.Contains(t, r.stderr, "sandbox error: spawn:")
	assert.Contains(t, r.stderr, "/proc/self/exe: operation not permitted")
	assert.NotContains(t, r.stderr, "exited before")
}

const denyExecveName = "neonbox-test-deny-execve"

func init() { reexec.Register(denyExecveName, denyExecveThenExec) }

// denyExecveThenExec runs os.Args[1:] with execve(2) denied (EPERM) by a
// seccomp filter, starting it with execveat(2), which the filter allows.
func denyExecveThenExec() {
	runtime.LockOSThread() // the filter is this thread's
	fail := func(err error) {
		fmt.Fprintln(os.Stderr, "deny execve:", err)
		os.Exit(111)
	}
	f, err := libseccomp.NewFilter(libseccomp.ActAllow)
	if err != nil {
		fail(err)
	}
	sc, err := libseccomp.GetSyscallFromName("execve")
	if err == nil {
		err = f.AddRule(sc, libseccomp.ActErrno.SetReturnCode(int16(unix.EPERM)))
	}
	if err == nil {
		err = f.Load()
	}
	if err != nil {
		fail(err)
	}
	path, err := unix.BytePtrFromString(os.Args[1])
	if err != nil {
		fail(err)
	}
	argv, err := syscall.SlicePtrFromStrings(os.Args[1:])
	if err != nil {
		fail(err)
	}
	envv, err := syscall.SlicePtrFromStrings(os.Environ())
	if err != nil {
		fail(err)
	}
	cwd := unix.AT_FDCWD
	_, _, errno := unix.Syscall6(unix.SYS_EXECVEAT, uintptr(cwd), uintptr(unsafe.Pointer(path)),
		uintptr(unsafe.Pointer(&argv[0])), uintptr(unsafe.Pointer(&envv[0])), 0, 0)
	fail(errno)
}

// The jail's processes keep the caller's timer slack, whether the init
// was started before neonbox-ns's Go runtime or by it (--disk), while
// neonbox-ns's own threads run with a wider one (prestart.c).
func TestJailKeepsTheCallersTimerSlack(t *testing.T) {
	const callers = 70_000 // ns; the kernel's default is 50,000
	for name, flags := range map[string][]string{"prestarted": nil, "started by Go": {"--disk", "16M"}} {
		t.Run(name, func(t *testing.T) {
			e := newEnv(t)
			if flags != nil {
				requireKernel66(t)
			}
			// No init is prestarted on a unified cgroup2 host.
			startedByGo := flags != nil || cgroup.Unified()
			cmd, line := e.startFromThread(t, flags, "cat /proc/self/timerslack_ns", func() error {
				return unix.Prctl(unix.PR_SET_TIMERSLACK, callers, 0, 0, 0)
			})
			assert.Equal(t, strconv.Itoa(callers), line, "the jail's slack")

			// Every thread's but that of the one that started an init
			// from Go, which keeps the caller's for the jail's life.
			tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", cmd.Process.Pid))
			require.NoError(t, err)
			slacks := map[string]int{}
			n := 0
			for _, task := range tasks {
				// /proc/TID is each thread's own, not listed in /proc.
				b, err := os.ReadFile(fmt.Sprintf("/proc/%s/timerslack_ns", task.Name()))
				if err != nil {
					continue // the thread has exited
				}
				slacks[strings.TrimSpace(string(b))]++
				n++
			}
			want := map[string]int{"1000000": n}
			if startedByGo {
				want = map[string]int{"1000000": n - 1, strconv.Itoa(callers): 1}
			}
			assert.Equal(t, want, slacks, "neonbox-ns's threads")
		})
	}
}

// The jail and neonbox-ns's threads keep the caller's CPU affinity: the
// prestart narrows neonbox-ns's own while it starts the init, and puts
// it back before the Go runtime makes a thread. (With one CPU, or on a
// unified cgroup2 host, which prestarts nothing, nothing is narrowed:
// the test then checks only that the caller's affinity is kept.)
func TestJailKeepsTheCallersCPUs(t *testing.T) {
	var all unix.CPUSet
	require.NoError(t, unix.SchedGetaffinity(0, &all))
	masks := map[string]unix.CPUSet{"all": all}
	if all.Count() > 1 {
		var last unix.CPUSet
		for c := 0; c < len(all)*64; c++ {
			if all.IsSet(c) {
				last.Zero()
				last.Set(c)
			}
		}
		masks["one"] = last
	}
	for name, mask := range masks {
		for how, flags := range map[string][]string{"prestarted": nil, "started by Go": {"--disk", "16M"}} {
			t.Run(name+"/"+how, func(t *testing.T) {
				e := newEnv(t)
				if flags != nil {
					requireKernel66(t)
				}
				cmd, line := e.startFromThread(t, flags, "grep Cpus_allowed_list /proc/self/status", func() error {
					return unix.SchedSetaffinity(0, &mask)
				})
				want := cpuList(mask)
				assert.Equal(t, "Cpus_allowed_list:\t"+want, line, "the jail's CPUs")

				tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", cmd.Process.Pid))
				require.NoError(t, err)
				for _, task := range tasks {
					var got unix.CPUSet
					tid, _ := strconv.Atoi(task.Name())
					if unix.SchedGetaffinity(tid, &got) != nil {
						continue // the thread has exited
					}
					assert.Equal(t, want, cpuList(got), "neonbox-ns thread %d", tid)
				}
			})
		}
	}
}

// cpuList writes a CPU set as the kernel's lists do ("0-1", "3").
func cpuList(s unix.CPUSet) string {
	var parts []string
	n := len(s) * 64
	for c := 0; c < n; c++ {
		if !s.IsSet(c) {
			continue
		}
		end := c
		for end+1 < n && s.IsSet(end+1) {
			end++
		}
		if end == c {
			parts = append(parts, strconv.Itoa(c))
		} else {
			parts = append(parts, fmt.Sprintf("%d-%d", c, end))
		}
		c = end
	}
	return strings.Join(parts, ",")
}

// startFromThread starts neonbox-ns exec over e with flags, running the
// shell command script and then a long sleep, and returns it and the
// first line script printed; the run is ended at the test's cleanup.
// neonbox-ns is forked from a thread locked to the test's goroutine,
// which setup changes first (neonbox-ns inherits the thread's slack and
// affinity); the thread ends with the goroutine.
func (e env) startFromThread(t *testing.T, flags []string, script string, setup func() error) (*exec.Cmd, string) {
	t.Helper()
	args := append([]string{"exec", "--workspace", e.ws, "--state-dir", e.state}, flags...)
	cmd := exec.Command(binary, append(args, "--", "sh", "-c", script+"; exec sleep 30")...)
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	runtime.LockOSThread()
	require.NoError(t, setup())
	require.NoError(t, cmd.Start())
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		_ = cmd.Wait()
	})
	line, err := bufio.NewReader(out).ReadString('\n')
	require.NoError(t, err)
	return cmd, strings.TrimSpace(line)
}
