package integration

import (
	"fmt"
	"math/rand"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/neonbox/neonbox-ns/internal/testutil"
)

// bigChange rewrites, deletes and adds thousands of files.
const bigChange = `
import os, shutil
for i in range(0, 2000, 2):
    with open("f%d" % i, "w") as f: f.write("changed %d\n" % i)
for i in range(1, 2000, 4):
    os.remove("f%d" % i)
shutil.rmtree("sub")
os.mkdir("sub")
for i in range(1500):
    with open("sub/n%d" % i, "w") as f: f.write("new %d\n" % i)
`

func makeBigWorkspace(t *testing.T, dir string) {
	t.Helper()
	require.NoError(t, os.MkdirAll(filepath.Join(dir, "sub"), 0o755))
	for i := 0; i < 2000; i++ {
		require.NoError(t, os.WriteFile(filepath.Join(dir, fmt.Sprintf("f%d", i)), []byte(fmt.Sprint(i)), 0o644))
	}
	for i := 0; i < 500; i++ {
		require.NoError(t, os.WriteFile(filepath.Join(dir, "sub", fmt.Sprintf("o%d", i)), []byte(fmt.Sprint(i)), 0o644))
	}
	testutil.SetTreeTimes(t, dir)
}

// kill -9 of neonbox-ns at random moments of a commit of thousands of
// files: after recovery the workspace is exactly as before the run or
// exactly as after it, never a mix.
func TestKillDuringCommit(t *testing.T) {
	e := newEnv(t)
	makeBigWorkspace(t, e.ws)
	before := testutil.Snapshot(t, e.ws)

	ref := newEnv(t)
	makeBigWorkspace(t, ref.ws)
	r := ref.exec(t, "", nil, "/usr/bin/python3", "-c", bigChange)
	require.Equal(t, 0, r.code, r.stderr)
	after := testutil.Snapshot(t, ref.ws)

	rng := rand.New(rand.NewSource(time.Now().UnixNano()))
	outcomes := map[string]int{}
	for round := 0; round < 8; round++ {
		cmd := exec.Command(binary, "exec", "--workspace", e.ws, "--state-dir", e.state, "--", "/usr/bin/python3", "-c", bigChange)
		cmd.Env = []string{"PATH=/usr/bin:/bin"}
		require.NoError(t, cmd.Start())
		// Wait for the commit to begin (its journal appears), then kill
		// after a random part of the time it takes.
		for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Microsecond) {
			if m, _ := filepath.Glob(filepath.Join(e.state, "txn", "*", "*", "journal.json")); len(m) > 0 {
				break
			}
		}
		time.Sleep(time.Duration(rng.Intn(150000)) * time.Microsecond)
		require.NoError(t, cmd.Process.Signal(syscall.SIGKILL))
		_ = cmd.Wait()
		killed, _ := os.ReadDir(filepath.Join(e.state, "runs"))

		rec := neonbox(t, e.ws, "", "recover", "--workspace", e.ws, "--state-dir", e.state)
		require.Equal(t, 0, rec.code, rec.stderr)
		got := testutil.Snapshot(t, e.ws)
		switch {
		case mapsEqual(got, before):
			outcomes["before"]++
			assert.Contains(t, rec.stderr, "rolled back the interrupted commit")
		case mapsEqual(got, after):
			outcomes["after"]++
			// Put the workspace back for the next round.
			u := neonbox(t, e.ws, "", "undo", "--workspace", e.ws, "--state-dir", e.state)
			require.Equal(t, 0, u.code, u.stderr)
			require.Equal(t, before, testutil.Snapshot(t, e.ws))
		default:
			t.Fatalf("round %d: the workspace is neither as before nor as after the run", round)
		}
		assert.Empty(t, runsLeft(t, e.state), "round %d: abandoned run dirs are cleaned up", round)
		for _, d := range killed {
			assert.Empty(t, runCgroups("run-"+d.Name()), "round %d: the killed run's cgroup is removed", round)
		}
	}
	t.Logf("outcomes over 8 kills: %v", outcomes)
}

func mapsEqual(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

// kill -9 of neonbox-ns while CMD runs: the jail dies with it (parent
// death signal), the workspace is untouched, and the next command cleans
// up the abandoned run dir and cgroup.
func TestKillParentMidRun(t *testing.T) {
	e := newEnv(t)
	require.NoError(t, os.WriteFile(filepath.Join(e.ws, "keep"), []byte("keep\n"), 0o644))
	cmd := exec.Command(binary, "exec", "--workspace", e.ws, "--state-dir", e.state, "--",
		"sh", "-c", "echo partial > partial; (setsid sleep 60 &); sleep 60")
	cmd.Env = []string{"PATH=/usr/bin:/bin"}
	require.NoError(t, cmd.Start())
	var runID string
	waitFor(t, func() bool {
		entries, _ := os.ReadDir(filepath.Join(e.state, "runs"))
		if len(entries) == 1 {
			runID = entries[0].Name()
			return true
		}
		return false
	})
	time.Sleep(300 * time.Millisecond) // let CMD start and write
	require.NoError(t, cmd.Process.Signal(syscall.SIGKILL))
	_ = cmd.Wait()

	// Every process of the jail dies: nothing stays in its cgroup.
	waitFor(t, func() bool { return !processInCgroup("run-" + runID) })

	r := e.exec(t, "", []string{"--json"}, "cat", "keep")
	require.Equal(t, 0, r.code, r.stderr)
	assert.Contains(t, r.stderr, "cleaned up run "+runID)
	assert.Empty(t, runsLeft(t, e.state))
	_, err := os.Stat(filepath.Join(e.ws, "partial"))
	assert.True(t, os.IsNotExist(err), "the killed run's changes never reached the workspace")
	dirs, _ := filepath.Glob("/sys/fs/cgroup/*/neonbox/run-" + runID)
	assert.Empty(t, dirs, "the abandoned cgroup is removed")
}

// kill -9 of neonbox-ns at moments all through its start: whatever a
// killed run had made (its run dir, its cgroup), the next run removes.
func TestKillParentDuringStart(t *testing.T) {
	e := newEnv(t)
	seen := map[string]bool{}
	// The kills step through the start 0.5 ms apart. Where start is
	// slow (a loaded machine) the steps go on until a few kills have
	// come after a run dir was made.
	for i := 0; i < 24 || (len(seen) < 3 && i < 200); i++ {
		cmd := exec.Command(binary, "exec", "--workspace", e.ws, "--state-dir", e.state, "--", "sleep", "60")
		cmd.Env = []string{"PATH=/usr/bin:/bin"}
		require.NoError(t, cmd.Start())
		time.Sleep(time.Duration(i) * 500 * time.Microsecond)
		require.NoError(t, cmd.Process.Signal(syscall.SIGKILL))
		_ = cmd.Wait()
		entries, _ := os.ReadDir(filepath.Join(e.state, "runs"))
		for _, d := range entries {
			seen[d.Name()] = true
		}
	}
	require.NotEmpty(t, seen, "no kill came after a run dir was made")
	for id := range seen {
		waitFor(t, func() bool { return !processInCgroup("run-" + id) })
	}

	r := e.exec(t, "", nil, "true")
	require.Equal(t, 0, r.code, r.stderr)
	// A run killed between the mkdir and the owner file is taken for
	// abandoned only after a while; the last run's own dir goes with
	// its teardown helper.
	owned := func() []string {
		var left []string
		entries, _ := os.ReadDir(filepath.Join(e.state, "runs"))
		for _, d := range entries {
			if _, err := os.Stat(filepath.Join(e.state, "runs", d.Name(), "owner")); err == nil {
				left = append(left, d.Name())
			}
		}
		return left
	}
	assert.Empty(t, settled(owned), "run dirs with their owner are left: %s", r.stderr)
	for id := range seen {
		assert.Empty(t, runCgroups("run-"+id), "the cgroup of run %s is left", id)
	}
}

// runCgroups lists the cgroup directories named name.
func runCgroups(name string) []string {
	var found []string
	_ = filepath.WalkDir("/sys/fs/cgroup", func(path string, d os.DirEntry, err error) error {
		if err != nil || !d.IsDir() {
			return nil
		}
		if d.Name() == name {
			found = append(found, path)
			return filepath.SkipDir
		}
		if strings.Count(path, "/") > 7 {
			return filepath.SkipDir
		}
		return nil
	})
	return found
}

// processInCgroup reports whether any process is in a cgroup named name.
func processInCgroup(name string) bool {
	procs, _ := filepath.Glob("/proc/[0-9]*/cgroup")
	for _, p := range procs {
		if b, err := os.ReadFile(p); err == nil && strings.Contains(string(b), "/"+name) {
			return true
		}
	}
	return false
}

// kill -9 of neonbox-ns undo at random moments: after recovery the
// workspace is exactly as after the commit (the undo had not started) or
// exactly as before it (recovery finished the undo), never a mix.
func TestKillDuringUndo(t *testing.T) {
	e := newEnv(t)
	makeBigWorkspace(t, e.ws)
	before := testutil.Snapshot(t, e.ws)
	rng := rand.New(rand.NewSource(time.Now().UnixNano()))
	outcomes := map[string]int{}
	for round := 0; round < 5; round++ {
		r := e.exec(t, "", nil, "/usr/bin/python3", "-c", bigChange)
		require.Equal(t, 0, r.code, r.stderr)
		after := testutil.Snapshot(t, e.ws)

		cmd := exec.Command(binary, "undo", "--workspace", e.ws, "--state-dir", e.state)
		require.NoError(t, cmd.Start())
		// Wait for the undo to begin (its scratch dir appears), then
		// kill after a random part of the time it takes.
		for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Microsecond) {
			if m, _ := filepath.Glob(filepath.Join(e.state, "txn", "*", "*.undo")); len(m) > 0 {
				break
			}
		}
		time.Sleep(time.Duration(rng.Intn(40000)) * time.Microsecond)
		require.NoError(t, cmd.Process.Signal(syscall.SIGKILL))
		_ = cmd.Wait()

		rec := neonbox(t, e.ws, "", "recover", "--workspace", e.ws, "--state-dir", e.state)
		require.Equal(t, 0, rec.code, rec.stderr)
		switch got := testutil.Snapshot(t, e.ws); {
		case mapsEqual(got, before):
			outcomes["undone"]++
		case mapsEqual(got, after):
			outcomes["not undone"]++
			u := neonbox(t, e.ws, "", "undo", "--workspace", e.ws, "--state-dir", e.state)
			require.Equal(t, 0, u.code, u.stderr)
			require.Equal(t, before, testutil.Snapshot(t, e.ws))
		default:
			t.Fatalf("round %d: the workspace is neither as before nor as after the undo", round)
		}
	}
	t.Logf("outcomes over 5 kills: %v", outcomes)
}
