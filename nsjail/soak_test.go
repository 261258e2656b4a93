package nsjail_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/neonbox/neonbox-ns/cgroup"
	"github.com/neonbox/neonbox-ns/nsjail"
)

// soakRuns is how many runs TestSoak makes: NEONBOX_SOAK (make soak sets
// 10000); unset, the test does not run (it takes minutes).
func soakRuns(t *testing.T) int {
	n, err := strconv.Atoi(os.Getenv("NEONBOX_SOAK"))
	if err != nil || n <= 0 {
		t.Skip("a soak test: set NEONBOX_SOAK=N (make soak runs 10000)")
	}
	return n
}

// TestSoak makes N mixed runs, two at a time (success, failure, timeout,
// OOM, canceled), then a long series of pool calls, and checks that
// nothing leaked: mounts, cgroups, processes, run dirs, our own
// descriptors, and the pool's memory.
func TestSoak(t *testing.T) {
	n := soakRuns(t)
	e := newJailEnv(t)
	requireCgroups(t)
	fdsBefore := countFDs(t)
	var mu sync.Mutex
	ids := map[string]bool{}
	var wg sync.WaitGroup
	errs := make(chan error, 2)
	for w := 0; w < 2; w++ {
		ws := filepath.Join(filepath.Dir(e.ws), fmt.Sprintf("soak%d", w))
		require.NoError(t, os.MkdirAll(ws, 0o755))
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < n; i += 2 {
				o := nsjail.Options{Workspace: ws, StateDir: e.state, Cwd: ws, HostEnv: []string{"PATH=/usr/bin:/bin"}, Command: []string{"sh", "-c", "echo $$ > f"}}
				ctx, cancel := context.WithCancel(context.Background())
				switch {
				case i%100 == 37:
					o.Limits.MemoryBytes, o.Command = 32<<20, []string{py, "-c", "b = bytearray(256 << 20)"}
				case i%10 == 1:
					o.Timeout, o.Command = 20*time.Millisecond, []string{"sleep", "10"}
				case i%10 == 2:
					o.Command = []string{"sh", "-c", "echo x > g; exit 3"}
				case i%10 == 3:
					o.Command = []string{"sleep", "10"}
					time.AfterFunc(20*time.Millisecond, cancel)
				}
				r, err := nsjail.Run(ctx, o)
				cancel()
				if err == nil && (r.Status == nsjail.StatusSandboxError || len(r.Warnings) > 0) {
					err = fmt.Errorf("run %d: %s %v %v", i, r.Status, r.Error, r.Warnings)
				}
				if err != nil {
					errs <- err
					return
				}
				mu.Lock()
				ids[r.ID] = true
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	close(errs)
	require.NoError(t, <-errs)

	// The pool: its process's memory must stay flat over many calls.
	p, err := nsjail.NewPool(context.Background(), nsjail.Options{Workspace: e.ws, StateDir: e.state, HostEnv: []string{"PATH=/usr/bin:/bin"}}, 2)
	require.NoError(t, err)
	calls := max(n/5, 100)
	var rssWarm int64
	for i := 0; i < calls; i++ {
		r, err := p.Exec(context.Background(), nsjail.Options{Command: []string{"true"}})
		require.NoError(t, err)
		require.Equal(t, nsjail.StatusSuccess, r.Status, "call %d: %v", i, r.Error)
		ids[r.ID] = true
		if i == 50 {
			rssWarm = rssKiB(t)
		}
	}
	rssEnd := rssKiB(t)
	require.NoError(t, p.Close())
	assert.Less(t, rssEnd-rssWarm, int64(20<<10), "pool memory grew from %d to %d KiB over %d calls", rssWarm, rssEnd, calls)

	e.requireClean(t)
	var runs []string
	for id := range ids {
		runs = append(runs, id)
	}
	assertNoJailProcesses(t, runs...)
	var left []string
	for _, dir := range ourCgroups(t) {
		if ids[strings.TrimPrefix(filepath.Base(dir), "run-")] {
			left = append(left, dir)
		}
	}
	assert.Empty(t, left, "cgroups left behind")
	assert.LessOrEqual(t, countFDs(t), fdsBefore+2, "descriptors leaked")
	t.Logf("%d runs and %d pool calls; pool RSS %d -> %d KiB; cgroup %v", n, calls, rssWarm, rssEnd, func() cgroup.Version { v, _ := cgroup.Detect(); return v }())
}

func countFDs(t *testing.T) int {
	entries, err := os.ReadDir("/proc/self/fd")
	require.NoError(t, err)
	return len(entries)
}

func rssKiB(t *testing.T) int64 {
	b, err := os.ReadFile("/proc/self/status")
	require.NoError(t, err)
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "VmRSS:"); ok {
			n, _ := strconv.ParseInt(strings.Fields(v)[0], 10, 64)
			return n
		}
	}
	return 0
}
