package integration

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestPolicyCommands(t *testing.T) {
	dir := t.TempDir()
	r := neonbox(t, dir, "", "policy", "list")
	require.Equal(t, 0, r.code, r.stderr)
	for _, n := range []string{"default", "readonly", "strict", "network", "ci"} {
		assert.Contains(t, r.stdout, n)
	}
	r = neonbox(t, dir, "", "policy", "show", "strict")
	require.Equal(t, 0, r.code, r.stderr)
	assert.Contains(t, r.stdout, `"name": "strict"`)

	bad := filepath.Join(dir, "bad.json")
	require.NoError(t, os.WriteFile(bad, []byte(`{"name":"x","capabilities":["fly"],"limits":{"pids":{"limit":-3}},"colour":1}`), 0o644))
	r = neonbox(t, dir, "", "policy", "validate", bad)
	assert.Equal(t, 1, r.code)
	assert.Contains(t, r.stdout, "colour: unknown field")
	assert.Contains(t, r.stdout, "capabilities[0]: unknown capability")
	assert.Contains(t, r.stdout, "limits.pids.limit: must be positive")

	good := filepath.Join(dir, "good.json")
	require.NoError(t, os.WriteFile(good, []byte(`{"name":"mine","capabilities":["fs-write"]}`), 0o644))
	r = neonbox(t, dir, "", "policy", "validate", good)
	assert.Equal(t, 0, r.code, r.stdout)
	assert.Contains(t, r.stdout, "ok")
}

func TestPolicyFlags(t *testing.T) {
	e := newEnv(t)
	r := e.exec(t, "", []string{"--policy", "readonly", "--allow", "fs-write", "--json"}, "sh", "-c", "echo x > w")
	require.Equal(t, 0, r.code, r.stderr)
	rec := decodeReceipt(t, r.stdout)
	pol := rec["policy"].(map[string]any)
	assert.Equal(t, "readonly", pol["name"])
	assert.Equal(t, []any{"fs-write", "subprocess"}, pol["capabilities"])
	assert.Regexp(t, `^sha256:[0-9a-f]{64}$`, pol["hash"])
	_, err := os.Stat(filepath.Join(e.ws, "w"))
	assert.NoError(t, err, "--allow fs-write overrides the policy")

	for _, args := range [][]string{
		{"--policy", "no-such-policy"},
		{"--allow", "teleport"},
		{"--deny", "fs-write,warp"},
		{"--protect", "/etc/passwd"},
	} {
		r := e.exec(t, "", args, "true")
		assert.Equal(t, 2, r.code, "%v: %s", args, r.stderr)
	}
	r = e.exec(t, "", []string{"--deny", "subprocess,network"}, "sh", "-c", "true | true")
	assert.NotEqual(t, 0, r.code)
}

func TestHoldDiffCommitDiscard(t *testing.T) {
	e := newEnv(t)
	require.NoError(t, os.WriteFile(filepath.Join(e.ws, "a.txt"), []byte("one\ntwo\n"), 0o644))
	r := e.exec(t, "", []string{"--hold", "--json"}, "sh", "-c", "printf 'one\\nTWO\\n' > a.txt; echo new > b.txt")
	require.Equal(t, 0, r.code, r.stderr)
	rec := decodeReceipt(t, r.stdout)
	id := rec["id"].(string)
	assert.Equal(t, true, rec["held"])

	runs := neonbox(t, e.ws, "", "runs", "--state-dir", e.state)
	assert.Contains(t, runs.stdout, id)
	d := neonbox(t, e.ws, "", "diff", "--state-dir", e.state, id)
	assert.Equal(t, "A b.txt (4B)\nM a.txt (8B)\n", d.stdout)
	p := neonbox(t, e.ws, "", "diff", "--patch", "--state-dir", e.state, id)
	assert.Contains(t, p.stdout, "-two\n+TWO\n")

	c := neonbox(t, e.ws, "", "commit", "--state-dir", e.state, id)
	require.Equal(t, 0, c.code, c.stderr)
	assert.Contains(t, c.stdout, "1 added, 1 modified, 0 deleted")
	b, _ := os.ReadFile(filepath.Join(e.ws, "a.txt"))
	assert.Equal(t, "one\nTWO\n", string(b))

	r = e.exec(t, "", []string{"--hold", "--json"}, "sh", "-c", "rm a.txt")
	id = decodeReceipt(t, r.stdout)["id"].(string)
	x := neonbox(t, e.ws, "", "discard", "--state-dir", e.state, id)
	require.Equal(t, 0, x.code, x.stderr)
	_, err := os.Stat(filepath.Join(e.ws, "a.txt"))
	assert.NoError(t, err)
	bad := neonbox(t, e.ws, "", "commit", "--state-dir", e.state, id)
	assert.Equal(t, 1, bad.code)
	assert.Contains(t, bad.stderr, "no such held run")
}
