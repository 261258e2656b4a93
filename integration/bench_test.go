package integration

import (
	"encoding/json"
	"os/exec"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/neonbox/neonbox-ns/internal/testutil"
)

// bench: every runner is measured, a --baseline binary is a runner of its
// own, --pool adds calls of a warm Pool, and the phases of both come from
// real receipts. (Only that it works: the figures themselves are for
// make bench, not for a test.)
func TestBenchReportsEveryRunner(t *testing.T) {
	testutil.RequireRoot(t)
	testutil.RequireUserNS(t)
	r := neonbox(t, t.TempDir(), "", "bench", "-n", "3", "-warmup", "1", "-j", "2", "--pool", "--json", "--baseline", "again="+binary)
	require.Equal(t, 0, r.code, r.stderr)
	var rep struct {
		Runners []struct {
			Runner       string  `json:"runner"`
			Runs         int     `json:"runs"`
			MedianMS     float64 `json:"median_ms"`
			RatioToBwrap float64 `json:"ratio_to_bwrap"`
			Parallel     float64 `json:"parallel_runs_per_sec"`
		} `json:"runners"`
		Missing    []string           `json:"missing"`
		Phases     map[string]float64 `json:"neonbox_phases_median_ms"`
		PoolPhases map[string]float64 `json:"pool_phases_median_ms"`
	}
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &rep), r.stdout)
	want := []string{"exec", "neonbox-ns", "neonbox-ns@again", "pool"}
	for _, tool := range []string{"unshare", "bwrap"} {
		if _, err := exec.LookPath(tool); err == nil {
			want = append(want, tool)
		} else {
			assert.Contains(t, rep.Missing, tool)
		}
	}
	var got []string
	for _, s := range rep.Runners {
		got = append(got, s.Runner)
		assert.Equal(t, 3, s.Runs, s.Runner)
		assert.Positive(t, s.MedianMS, s.Runner)
		assert.Positive(t, s.Parallel, s.Runner)
		if _, err := exec.LookPath("bwrap"); err == nil {
			assert.Positive(t, s.RatioToBwrap, s.Runner)
		}
	}
	assert.ElementsMatch(t, want, got)
	for _, k := range []string{"prepare", "spawn", "run", "teardown", "spawn.started", "spawn.exec"} {
		assert.Contains(t, rep.Phases, k)
	}
	for _, k := range []string{"spawn", "run", "spawn.call", "spawn.exec"} {
		assert.Contains(t, rep.PoolPhases, k)
	}
}

func TestBenchRefusesABadBaseline(t *testing.T) {
	r := neonbox(t, t.TempDir(), "", "bench", "--baseline", "no-equals-sign")
	assert.Equal(t, 2, r.code)
	assert.Contains(t, r.stderr, "Usage: neonbox-ns bench")
}
