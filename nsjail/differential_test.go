package nsjail_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/neonbox/neonbox-ns/internal/testutil"
	"github.com/neonbox/neonbox-ns/internal/testutil/fsops"
	"github.com/neonbox/neonbox-ns/nsjail"
)

// Differential test sizes: cases (seeds 0 to n-1) and operations per
// script. Every rollbackEvery-th case also checks a CommitNever run.
// Cases run differentialWorkers at a time: a case mostly waits (for
// Python, for the commit's syncfs), so more than one per CPU pays.
const (
	differentialCases      = 1000
	differentialCasesShort = 100
	differentialOps        = 40
	rollbackEvery          = 10
	differentialWorkers    = 4
)

// TestDifferential runs seeded random scripts of filesystem operations
// (internal/testutil/fsops) once in a jail over a fixture and once
// directly, as root, on a copy of it; after the commit both trees must
// be the same. It is TestCommitMatchesDirectOperations with generated
// cases. A failing case reproduces from its seed:
//
//	go test -run 'TestDifferential/seed=123$' ./nsjail/
func TestDifferential(t *testing.T) {
	e := newJailEnv(t)
	base := filepath.Dir(e.ws)
	n := differentialCases
	if testing.Short() {
		n = differentialCasesShort
	}
	// A pool of workers, each running its cases as subtests one after
	// the other (t.Run may be called from several goroutines). Each case
	// has its own workspace and state dir: jailEnv.run checks that no
	// run dir or mount is left in the state dir, which a concurrent run
	// would have.
	seeds := make(chan int64)
	var wg sync.WaitGroup
	for range differentialWorkers {
		wg.Go(func() {
			for seed := range seeds {
				t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
					differentialCase(t, filepath.Join(base, fmt.Sprint(seed)), seed)
				})
			}
		})
	}
	// After a failure, finish the cases under way but start no more:
	// the first failing seeds are what matters.
	for seed := int64(0); seed < int64(n) && !t.Failed(); seed++ {
		seeds <- seed
	}
	close(seeds)
	wg.Wait()
}

func differentialCase(t *testing.T, dir string, seed int64) {
	s := fsops.Generate(seed, differentialOps)
	script := s.Python()
	argv := slices.Concat([]string{py}, fsops.PythonFlags, []string{"-c", script})
	repro := func(what string) string {
		return fmt.Sprintf("%s; seed %d, reproduce with: go test -run 'TestDifferential/seed=%d$' ./nsjail/\n--- script ---\n%s", what, seed, seed, script)
	}

	e := jailEnv{ws: filepath.Join(dir, "ws"), state: filepath.Join(dir, "state")}
	direct := filepath.Join(dir, "direct")
	require.NoError(t, os.MkdirAll(e.ws, 0o755))
	require.NoError(t, fsops.Write(e.ws, s.Fixture), "seed %d", seed)
	testutil.SetTreeTimes(t, e.ws)
	testutil.CopyTree(t, e.ws, direct)
	fixture := testutil.Snapshot(t, e.ws)

	if seed%rollbackEvery == 0 {
		r, stdout, stderr := e.run(t, func(o *nsjail.Options) { o.Commit = nsjail.CommitNever }, argv...)
		require.Equal(t, nsjail.StatusSuccess, r.Status, repro(fmt.Sprintf("run with commit never: %v\n%s%s", r.Error, stdout, stderr)))
		require.False(t, r.Committed, repro("run with commit never"))
		require.True(t, r.RollbackPerformed, repro("run with commit never"))
		require.Equal(t, fixture, testutil.Snapshot(t, e.ws), repro("workspace changed by a run with commit never"))
	}

	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Dir = direct
	cmd.Env = []string{"PATH=/usr/bin:/bin", "LANG=C.UTF-8"}
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, repro("direct run: "+string(out)))

	r, stdout, stderr := e.run(t, nil, argv...)
	require.Equal(t, nsjail.StatusSuccess, r.Status, repro(fmt.Sprintf("jail run: %v\n%s%s", r.Error, stdout, stderr)))
	require.True(t, r.Committed, repro("jail run"))
	require.Empty(t, r.Warnings, repro("jail run"))
	require.Equal(t, testutil.Snapshot(t, direct), testutil.Snapshot(t, e.ws), repro("committed tree differs from the direct run's"))
}
