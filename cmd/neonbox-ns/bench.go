package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/neonbox/neonbox-ns/cgroup"
	"github.com/neonbox/neonbox-ns/internal/linux"
	"github.com/neonbox/neonbox-ns/nsjail"
)

const benchUsage = `Usage: neonbox-ns bench [flags] [-- CMD [ARG...]]

Measures the wall time of CMD (default /bin/true) run plainly, under
unshare -Urmpnf, under bwrap (each only if installed) and under
neonbox-ns exec with the default policy and cgroup limits (1 GiB of
memory, 2 CPUs, 4096 tasks: written, never reached), interleaved
after a warm-up (one run of each runner per round, in a shuffled order:
a run's leftover kernel work, such as the teardown of its network
namespace, falls on whichever runs next), then with -j workers in
parallel (the runners taking turns in rounds). With --pool, also
calls of a warm nsjail.Pool (jails prepared ahead, each call still a
fresh jail) made from this process. Each --baseline LABEL=PATH adds
another neonbox-ns binary (an older build, say) as a runner of its own,
"neonbox-ns@LABEL", so that before and after are measured in the same
run. Prints median, p95, p99, min, runs/s and the ratio of each to
bwrap, and neonbox-ns's own phases from its receipts.

Flags:
`

// runner is one way of running the command.
type runner struct {
	name string
	argv func(ws string) []string
	// receipts: the runner prints a neonbox-ns receipt on stdout.
	receipts bool
	// call, if set, runs the command in this process instead (a Pool).
	call func(ws string) (sample, error)
}

// sample is one timed run.
type sample struct {
	wall    time.Duration
	maxRSS  int64 // KiB, of the runner's own process tree as waited for
	receipt *nsjail.Receipt
}

// BenchStats summarises one runner.
type BenchStats struct {
	Runner       string  `json:"runner"`
	Runs         int     `json:"runs"`
	MedianMS     float64 `json:"median_ms"`
	P95MS        float64 `json:"p95_ms"`
	P99MS        float64 `json:"p99_ms"`
	MinMS        float64 `json:"min_ms"`
	RunsPerSec   float64 `json:"runs_per_sec"`
	RatioToBwrap float64 `json:"ratio_to_bwrap,omitempty"`
	// ParallelRunsPerSec is the throughput with Jobs workers.
	ParallelRunsPerSec float64 `json:"parallel_runs_per_sec,omitempty"`
	// MaxRSSKiB is, for neonbox-ns, the peak RSS of the neonbox-ns
	// process itself (from its receipts).
	MaxRSSKiB int64 `json:"max_rss_kib,omitempty"`
}

// BenchReport is what bench --json prints.
type BenchReport struct {
	Machine  map[string]string  `json:"machine"`
	Command  []string           `json:"command"`
	Jobs     int                `json:"jobs"`
	Runners  []BenchStats       `json:"runners"`
	Missing  []string           `json:"missing,omitempty"`
	Phases   map[string]float64 `json:"neonbox_phases_median_ms"`
	JailPeak float64            `json:"neonbox_jail_peak_memory_mb_median"`
	// PoolPhases are the phases of a Pool call (with --pool).
	PoolPhases map[string]float64 `json:"pool_phases_median_ms,omitempty"`
}

func benchMain(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	n := fs.Int("n", 200, "timed runs per runner (sequential)")
	warm := fs.Int("warmup", 10, "untimed runs per runner first")
	jobs := fs.Int("j", 2, "parallel workers for the throughput measurement (0: skip)")
	asJSON := fs.Bool("json", false, "print the report as JSON")
	withPool := fs.Bool("pool", false, "also measure calls of a warm nsjail.Pool")
	var baselines []string
	fs.Func("baseline", "`LABEL=PATH` of another neonbox-ns binary to measure too (repeatable)", func(v string) error {
		label, path, ok := strings.Cut(v, "=")
		if !ok || label == "" || path == "" {
			return fmt.Errorf("want LABEL=PATH, got %q", v)
		}
		baselines = append(baselines, v)
		return nil
	})
	sep := slices.Index(args, "--")
	flagArgs, cmd := args, []string{"/bin/true"}
	if sep >= 0 {
		flagArgs, cmd = args[:sep], args[sep+1:]
	}
	if err := fs.Parse(flagArgs); err != nil || fs.NArg() > 0 || len(cmd) == 0 || *n < 1 {
		fmt.Fprint(stderr, benchUsage)
		fs.SetOutput(stderr)
		fs.PrintDefaults()
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return nsjail.ExitUsage
	}
	self, err := os.Executable()
	if err != nil {
		return fail(stderr, "bench", err)
	}
	base, err := os.MkdirTemp("", "neonbox-bench-")
	if err != nil {
		return fail(stderr, "bench", err)
	}
	defer removeWhenDone(base)
	if err := os.Chmod(base, 0o711); err != nil {
		return fail(stderr, "bench", err)
	}
	state := filepath.Join(base, "state")

	runners, missing := benchRunners(self, state, cmd)
	for _, b := range baselines {
		label, path, _ := strings.Cut(b, "=")
		runners = append(runners, neonboxRunner("neonbox-ns@"+label, path, filepath.Join(base, "state-"+label), cmd))
	}
	if *withPool {
		pools := &benchPools{state: state, cmd: cmd, byWS: map[string]*nsjail.Pool{}}
		defer pools.close()
		runners = append(runners, runner{name: "pool", call: pools.call})
	}
	rep := BenchReport{Machine: machineInfo(), Command: cmd, Jobs: *jobs, Missing: missing}
	fmt.Fprintf(stderr, "bench: %d warm-up and %d timed runs per runner, interleaved; %s\n", *warm, *n, strings.Join(names(runners), ", "))

	ws := filepath.Join(base, "ws")
	if err := os.Mkdir(ws, 0o755); err != nil {
		return fail(stderr, "bench", err)
	}
	samples := map[string][]sample{}
	order := rand.New(rand.NewPCG(1, 2)) // the same shuffles every time
	for round := 0; round < *warm+*n; round++ {
		for _, k := range order.Perm(len(runners)) {
			r := runners[k]
			s, err := runOnce(r, ws)
			if err != nil {
				return fail(stderr, "bench", fmt.Errorf("%s: %w", r.name, err))
			}
			if round >= *warm {
				samples[r.name] = append(samples[r.name], s)
			}
		}
	}
	for _, r := range runners {
		rep.Runners = append(rep.Runners, summarize(r.name, samples[r.name]))
	}
	if *jobs > 0 {
		rps, err := parallelThroughputs(runners, base, *jobs, *n)
		if err != nil {
			return fail(stderr, "bench", fmt.Errorf("-j %d: %w", *jobs, err))
		}
		for i := range runners {
			rep.Runners[i].ParallelRunsPerSec = rps[i]
		}
	}
	var bwrap float64
	for _, s := range rep.Runners {
		if s.Runner == "bwrap" {
			bwrap = s.MedianMS
		}
	}
	for i := range rep.Runners {
		if bwrap > 0 {
			rep.Runners[i].RatioToBwrap = round3(rep.Runners[i].MedianMS / bwrap)
		}
	}
	rep.Phases = phases(samples["neonbox-ns"], &rep.JailPeak)
	if *withPool {
		rep.PoolPhases = phases(samples["pool"], new(float64))
	}

	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		_ = enc.Encode(rep)
		return 0
	}
	printBench(stdout, &rep)
	return 0
}

func benchRunners(self, state string, cmd []string) ([]runner, []string) {
	rs := []runner{{name: "exec", argv: func(string) []string { return cmd }}}
	var missing []string
	if p, err := exec.LookPath("unshare"); err == nil {
		rs = append(rs, runner{name: "unshare", argv: func(string) []string {
			return append([]string{p, "-Urmpnf", "--mount-proc"}, cmd...)
		}})
	} else {
		missing = append(missing, "unshare")
	}
	if p, err := exec.LookPath("bwrap"); err == nil {
		rs = append(rs, runner{name: "bwrap", argv: func(string) []string {
			return append([]string{p, "--unshare-user", "--unshare-pid", "--unshare-net", "--unshare-ipc", "--unshare-uts",
				"--die-with-parent", "--ro-bind", "/", "/", "--proc", "/proc", "--dev", "/dev"}, cmd...)
		}})
	} else {
		missing = append(missing, "bwrap")
	}
	rs = append(rs, neonboxRunner("neonbox-ns", self, state, cmd))
	return rs, missing
}

// benchLimits are the cgroup limits every neonbox-ns run and Pool call
// gets in the benchmark: generous, so that they never bite, but written.
var benchLimits = cgroup.Limits{MemoryBytes: 1 << 30, CPUs: 2, Pids: 4096}

// neonboxRunner runs cmd with the neonbox-ns binary at bin.
func neonboxRunner(name, bin, state string, cmd []string) runner {
	return runner{name: name, receipts: true, argv: func(ws string) []string {
		return append([]string{bin, "exec", "--workspace", ws, "--state-dir", state, "--json",
			"--memory", fmt.Sprint(benchLimits.MemoryBytes), "--cpus", fmt.Sprint(benchLimits.CPUs), "--pids", fmt.Sprint(benchLimits.Pids),
			"--"}, cmd...)
	}}
}

func names(rs []runner) []string {
	var out []string
	for _, r := range rs {
		out = append(out, r.name)
	}
	return out
}

func runOnce(r runner, ws string) (sample, error) {
	if r.call != nil {
		return r.call(ws)
	}
	argv := r.argv(ws)
	c := exec.Command(argv[0], argv[1:]...)
	c.Dir = ws
	var out bytes.Buffer
	if r.receipts {
		c.Stdout = &out
	}
	start := time.Now()
	err := c.Run()
	wall := time.Since(start)
	if err != nil {
		return sample{}, err
	}
	s := sample{wall: wall}
	if r.receipts {
		var rec nsjail.Receipt
		if err := json.Unmarshal(out.Bytes(), &rec); err != nil {
			return s, fmt.Errorf("receipt: %w", err)
		}
		if rec.Status != nsjail.StatusSuccess {
			return s, fmt.Errorf("run failed: %s %v", rec.Status, rec.Error)
		}
		s.receipt = &rec
		s.maxRSS = rec.Phases.ParentPeakRSSKiB
	}
	return s, nil
}

// parallelRounds is how many turns the runners take at the parallel
// measurement.
const parallelRounds = 5

// parallelThroughputs measures each runner with jobs workers, each on its
// own workspace (a workspace takes one writing run at a time), about n
// runs in all, and returns runs per second. The runners take turns, in
// rounds, as in the sequential measurement: a slow spell of the machine
// falls on all of them.
func parallelThroughputs(rs []runner, base string, jobs, n int) ([]float64, error) {
	dirs := make([][]string, len(rs))
	for i, r := range rs {
		for w := 0; w < jobs; w++ {
			ws := filepath.Join(base, fmt.Sprintf("ws-%s-%d", r.name, w))
			if err := os.MkdirAll(ws, 0o755); err != nil {
				return nil, err
			}
			// An untimed run per worker first: a pool is made on
			// its first call.
			if _, err := runOnce(r, ws); err != nil {
				return nil, fmt.Errorf("%s: %w", r.name, err)
			}
			dirs[i] = append(dirs[i], ws)
		}
	}
	per := max(n/jobs/parallelRounds, 1)
	took := make([]time.Duration, len(rs))
	order := rand.New(rand.NewPCG(3, 4))
	for round := 0; round < parallelRounds; round++ {
		for _, i := range order.Perm(len(rs)) {
			r := rs[i]
			d, err := parallelBatch(r, dirs[i], per)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", r.name, err)
			}
			took[i] += d
		}
	}
	rps := make([]float64, len(rs))
	for i := range rs {
		rps[i] = round3(float64(per*jobs*parallelRounds) / took[i].Seconds())
	}
	return rps, nil
}

// parallelBatch runs per runs of r on each of dirs at once, one worker
// per dir, and returns how long that took.
func parallelBatch(r runner, dirs []string, per int) (time.Duration, error) {
	var wg sync.WaitGroup
	errs := make(chan error, len(dirs))
	start := time.Now()
	for _, ws := range dirs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < per; i++ {
				if _, err := runOnce(r, ws); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	took := time.Since(start)
	close(errs)
	return took, <-errs
}

func summarize(name string, ss []sample) BenchStats {
	var ws []float64
	var total time.Duration
	var rss int64
	for _, s := range ss {
		ws = append(ws, float64(s.wall.Microseconds())/1000)
		total += s.wall
		rss = max(rss, s.maxRSS)
	}
	sort.Float64s(ws)
	return BenchStats{
		Runner: name, Runs: len(ws),
		MedianMS: round3(quantile(ws, 0.5)), P95MS: round3(quantile(ws, 0.95)), P99MS: round3(quantile(ws, 0.99)),
		MinMS: round3(ws[0]), RunsPerSec: round3(float64(len(ws)) / total.Seconds()), MaxRSSKiB: rss,
	}
}

func quantile(sorted []float64, q float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	i := int(q * float64(len(sorted)-1))
	return sorted[i]
}

func round3(x float64) float64 { return float64(int64(x*1000+0.5)) / 1000 }

// phases takes the median of each phase over the samples' receipts, and
// of the jail's peak memory.
func phases(ss []sample, jailPeak *float64) map[string]float64 {
	out := map[string]float64{}
	cols := map[string][]float64{}
	var peaks []float64
	for _, s := range ss {
		if s.receipt == nil {
			continue
		}
		p := s.receipt.Phases
		for k, v := range map[string]float64{"prepare": p.PrepareMS, "spawn": p.SpawnMS, "run": p.RunMS, "finish": p.FinishMS, "teardown": p.TeardownMS, "total": s.receipt.TotalMS} {
			cols[k] = append(cols[k], v)
		}
		for k, v := range p.Spawn {
			cols["spawn."+k] = append(cols["spawn."+k], v)
		}
		peaks = append(peaks, s.receipt.PeakMemoryMB)
	}
	for k, v := range cols {
		sort.Float64s(v)
		out[k] = round3(quantile(v, 0.5))
	}
	sort.Float64s(peaks)
	*jailPeak = round3(quantile(peaks, 0.5))
	return out
}

// benchPools keeps one Pool per workspace (the -j workers each have
// their own) and times calls to it.
type benchPools struct {
	state string
	cmd   []string
	mu    sync.Mutex
	byWS  map[string]*nsjail.Pool
}

func (b *benchPools) call(ws string) (sample, error) {
	b.mu.Lock()
	p, ok := b.byWS[ws]
	if !ok {
		var err error
		p, err = nsjail.NewPool(context.Background(), nsjail.Options{Workspace: ws, StateDir: b.state, Limits: benchLimits}, 2)
		if err != nil {
			b.mu.Unlock()
			return sample{}, err
		}
		b.byWS[ws] = p
	}
	b.mu.Unlock()
	start := time.Now()
	r, err := p.Exec(context.Background(), nsjail.Options{Command: b.cmd})
	wall := time.Since(start)
	if err != nil {
		return sample{}, err
	}
	if r.Status != nsjail.StatusSuccess {
		return sample{}, fmt.Errorf("pool call failed: %s %v", r.Status, r.Error)
	}
	return sample{wall: wall, receipt: r}, nil
}

func (b *benchPools) close() {
	for _, p := range b.byWS {
		_ = p.Close()
	}
}

func machineInfo() map[string]string {
	var u unix.Utsname
	_ = unix.Uname(&u)
	v, _ := cgroup.Detect()
	return map[string]string{
		"kernel": unix.ByteSliceToString(u.Release[:]),
		"cpus":   fmt.Sprint(runtime.NumCPU()),
		"cgroup": string(v),
		"go":     runtime.Version(),
	}
}

// printPhases prints the median of each phase in keys, then the steps
// (the "spawn." phases) in the order they happened.
func printPhases(w io.Writer, title string, phases map[string]float64, keys []string, stepsTitle string) {
	fmt.Fprintf(w, "%s (median ms):", title)
	for _, k := range keys {
		fmt.Fprintf(w, " %s %.2f", k, phases[k])
	}
	var steps []string
	for k, v := range phases {
		if strings.HasPrefix(k, "spawn.") && v >= 0 {
			steps = append(steps, k)
		}
	}
	sort.Slice(steps, func(i, j int) bool { return phases[steps[i]] < phases[steps[j]] })
	fmt.Fprintf(w, "\n%s:", stepsTitle)
	for _, k := range steps {
		fmt.Fprintf(w, " %s %.2f", strings.TrimPrefix(k, "spawn."), phases[k])
	}
	fmt.Fprintln(w)
}

func printBench(w io.Writer, rep *BenchReport) {
	m := rep.Machine
	fmt.Fprintf(w, "machine: kernel %s, %s CPUs, cgroup %s; command: %s\n\n", m["kernel"], m["cpus"], m["cgroup"], strings.Join(rep.Command, " "))
	fmt.Fprintf(w, "| runner | median ms | p95 ms | p99 ms | min ms | runs/s | runs/s -j %d | × bwrap |\n|---|---|---|---|---|---|---|---|\n", rep.Jobs)
	for _, s := range rep.Runners {
		ratio := "-"
		if s.RatioToBwrap > 0 {
			ratio = fmt.Sprintf("%.2f", s.RatioToBwrap)
		}
		parallel := "-"
		if rep.Jobs > 0 {
			parallel = fmt.Sprintf("%.0f", s.ParallelRunsPerSec)
		}
		fmt.Fprintf(w, "| %s | %.2f | %.2f | %.2f | %.2f | %.0f | %s | %s |\n", s.Runner, s.MedianMS, s.P95MS, s.P99MS, s.MinMS, s.RunsPerSec, parallel, ratio)
	}
	for _, m := range rep.Missing {
		fmt.Fprintf(w, "(%s is not installed: not measured)\n", m)
	}
	fmt.Fprintln(w)
	printPhases(w, "neonbox-ns phases", rep.Phases, []string{"prepare", "spawn", "run", "finish", "teardown", "total"}, "spawn steps (ms after the clone)")
	var rss int64
	for _, s := range rep.Runners {
		if s.Runner == "neonbox-ns" {
			rss = s.MaxRSSKiB
		}
	}
	fmt.Fprintf(w, "jail peak memory (median): %.2f MB; neonbox-ns process peak RSS (max): %d KiB\n", rep.JailPeak, rss)
	if rep.PoolPhases != nil {
		printPhases(w, "pool call phases", rep.PoolPhases, []string{"prepare", "spawn", "run", "finish", "total"}, "pool call steps (ms after the command was sent)")
	}
}

// removeWhenDone removes the bench's directory once the teardown helpers
// of its runs are done with its state dirs (nsjail.AwaitTeardowns).
func removeWhenDone(base string) {
	states, _ := filepath.Glob(filepath.Join(base, "*"))
	for _, state := range states {
		nsjail.AwaitTeardowns(state, 5*time.Second)
	}
	// Never through a mount point, should a helper still hold one.
	_ = linux.RemoveAll(base)
}
