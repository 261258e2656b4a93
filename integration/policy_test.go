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
