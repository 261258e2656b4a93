package integration

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/neonbox/neonbox-ns/cgroup"
)

// neonbox-ns exec hands its run's cleanup to the teardown helper and
// exits: the run dir and the cgroup go all the same, after it.
func TestExecHandsItsCleanupToAHelper(t *testing.T) {
	e := newEnv(t)
	r := e.exec(t, "", []string{"--json"}, "sh", "-c", "echo x > f")
	require.Equal(t, 0, r.code, r.stderr)
	rec := decodeReceipt(t, r.stdout)
	assert.Equal(t, true, rec["committed"])
	phases := rec["phases"].(map[string]any)
	if cgroup.Unified() {
		// Its init is born in its cgroup, not prestarted: no helper.
		assert.Nil(t, phases["teardown_handed_over"])
	} else {
		assert.Equal(t, true, phases["teardown_handed_over"])
	}
	id := rec["id"].(string)
	assert.Empty(t, runsLeft(t, e.state), "the run dir goes")
	waitFor(t, func() bool { return len(runCgroups("run-"+id)) == 0 })

	// A --disk run dir is a mount of its own: neonbox-ns removes it
	// itself, before it exits.
	r = e.exec(t, "", []string{"--json", "--disk", "16M"}, "true")
	require.Equal(t, 0, r.code, r.stderr)
	rec = decodeReceipt(t, r.stdout)
	assert.Nil(t, rec["phases"].(map[string]any)["teardown_handed_over"])
	runs, _ := os.ReadDir(filepath.Join(e.state, "runs"))
	assert.Empty(t, runs)
	assert.Empty(t, runCgroups("run-"+rec["id"].(string)))
}

// What the helper's C leaves (a tree deeper than it goes), neonbox-ns's
// Go code, which it re-executes, removes.
func TestTeardownHelperLeavesDeepTreesToGo(t *testing.T) {
	e := newEnv(t)
	if cgroup.Unified() {
		t.Skip("a unified cgroup2 host prestarts no init, and so no teardown helper")
	}
	r := e.exec(t, "", []string{"--json"}, "sh", "-c", `mkdir -p "$(printf 'd/%.0s' $(seq 300))" && exit 3`)
	require.Equal(t, 3, r.code, r.stderr)
	rec := decodeReceipt(t, r.stdout)
	assert.Equal(t, true, rec["rollback_performed"])
	assert.Equal(t, true, rec["phases"].(map[string]any)["teardown_handed_over"])
	assert.Empty(t, runsLeft(t, e.state), "the run dir goes")
	waitFor(t, func() bool { return len(runCgroups("run-"+rec["id"].(string))) == 0 })
}

// The helper keeps a run's emptied run dir as a spare for the next run:
// nothing of one run shows in the next (files, the root's mode, its
// xattrs), and the next run's own run dir becomes the spare in turn.
func TestSpareRunDirsCarryNothingOver(t *testing.T) {
	e := newEnv(t)
	if cgroup.Unified() {
		t.Skip("a unified cgroup2 host prestarts no init, and so no teardown helper that keeps spares")
	}
	spares := func() []string {
		var names []string
		entries, _ := os.ReadDir(filepath.Join(e.state, "spare"))
		for _, d := range entries {
			names = append(names, d.Name())
		}
		return names
	}
	r := e.exec(t, "", []string{"--json"}, "sh", "-c",
		`chmod 700 . && echo leak > leak && mkdir -p d/e && python3 -c 'import os; os.setxattr(".", "user.leak", b"1")' && exit 3`)
	require.Equal(t, 3, r.code, r.stderr)
	first := decodeReceipt(t, r.stdout)
	assert.Equal(t, true, first["rollback_performed"])
	assert.Empty(t, runsLeft(t, e.state))
	waitFor(t, func() bool { return len(spares()) == 1 })
	assert.Equal(t, []string{first["id"].(string)}, spares())

	r = e.exec(t, "", []string{"--json"}, "sh", "-c",
		`stat -c %a .; ls -A; python3 -c 'import os; print(os.listxattr("."))'`)
	require.Equal(t, 0, r.code, r.stderr)
	second := decodeReceipt(t, r.stdout)
	assert.Equal(t, "755\n[]\n", second["stdout"])
	assert.Empty(t, runsLeft(t, e.state))
	waitFor(t, func() bool { s := spares(); return len(s) == 1 && s[0] == second["id"] })
}
