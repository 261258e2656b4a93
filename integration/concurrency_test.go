package integration

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/neonbox/neonbox-ns/nsjail"
)

// Two runs on one workspace never overlap: the second waits for the
// first, up to --lock-timeout, then gives up with a clear error.
func TestConcurrentRunsOnOneWorkspace(t *testing.T) {
	e := newEnv(t)
	first := exec.Command(binary, "exec", "--workspace", e.ws, "--state-dir", e.state, "--",
		"sh", "-c", "echo first > first.txt; sleep 1")
	first.Env = []string{"PATH=/usr/bin:/bin"}
	var firstErr bytes.Buffer
	first.Stderr = &firstErr
	require.NoError(t, first.Start())
	// Its command runs (it has written to its upper dir): the lock is
	// held. (A run dir alone is reserved before the lock is taken.)
	waitFor(t, func() bool {
		found, _ := filepath.Glob(filepath.Join(e.state, "runs", "*", "upper", "first.txt"))
		return len(found) > 0
	})

	busy := e.exec(t, "", []string{"--lock-timeout", "100ms", "--json"}, "sh", "-c", "echo second > second.txt")
	assert.Equal(t, 125, busy.code)
	rec := decodeReceipt(t, busy.stdout)
	errObj := rec["error"].(map[string]any)
	assert.Equal(t, "lock", errObj["stage"])
	assert.Contains(t, errObj["message"], "in use by another run")

	waited := e.exec(t, "", []string{"--lock-timeout", "20s"}, "sh", "-c", "cat first.txt > second.txt")
	assert.Equal(t, 0, waited.code, waited.stderr)
	require.NoError(t, first.Wait(), firstErr.String())
	got, err := os.ReadFile(filepath.Join(e.ws, "second.txt"))
	require.NoError(t, err)
	assert.Equal(t, "first\n", string(got), "the second run saw the first one's commit")
}

// runsLeft returns the run dirs left in state once cleanup is done: the
// teardown helper of neonbox-ns exec removes a run's dir (and cgroup)
// after neonbox-ns has exited, so it waits up to 10 s for them to go.
func runsLeft(t *testing.T, state string) []string {
	t.Helper()
	return settled(func() []string {
		var names []string
		entries, _ := os.ReadDir(filepath.Join(state, "runs"))
		for _, e := range entries {
			names = append(names, e.Name())
		}
		return names
	})
}

// awaitHelpers makes the test's cleanup wait for the teardown helpers of
// its runs in state first: one that moves its run dir into the spare dir
// while the test's temporary directory is being removed makes that
// removal fail.
func awaitHelpers(t *testing.T, state string) {
	t.Cleanup(func() { nsjail.AwaitTeardowns(state, 10*time.Second) })
}

// settled returns what list says once it says nothing, or after 10 s.
func settled(list func() []string) []string {
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		if left := list(); len(left) == 0 || time.Now().After(deadline) {
			return left
		}
	}
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		if cond() {
			return
		}
	}
	t.Fatal("condition not met in 10s")
}
