package integration

import (
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestPassesThroughStdio(t *testing.T) {
	e := newEnv(t)
	r := e.exec(t, "from stdin\n", nil, "sh", "-c", "cat; echo to-stderr >&2")
	assert.Equal(t, 0, r.code, r.stderr)
	assert.Equal(t, "from stdin\n", r.stdout)
	assert.Equal(t, "to-stderr\n", r.stderr, "neonbox-ns prints nothing of its own on success")
}

func TestExitStatuses(t *testing.T) {
	e := newEnv(t)
	assert.Equal(t, 7, e.exec(t, "", nil, "sh", "-c", "exit 7").code)
	assert.Equal(t, 128+11, e.exec(t, "", nil, "python3", "-c", "import ctypes; ctypes.string_at(0)").code)
	r := e.exec(t, "", []string{"--timeout", "200ms"}, "sleep", "10")
	assert.Equal(t, 124, r.code)
	assert.Contains(t, r.stderr, "timed out")
	r = e.exec(t, "", nil, "no-such-command")
	assert.Equal(t, 127, r.code)
	assert.Contains(t, r.stderr, "command not found")
}

func TestSandboxErrorExits125(t *testing.T) {
	e := newEnv(t)
	require.NoError(t, os.MkdirAll(e.state, 0o711))
	// A file where the runs directory belongs: the run cannot be set up.
	require.NoError(t, os.WriteFile(filepath.Join(e.state, "runs"), nil, 0o644))
	r := e.exec(t, "", []string{"--json"}, "true")
	assert.Equal(t, 125, r.code)
	rec := decodeReceipt(t, r.stdout)
	assert.Equal(t, "SANDBOX_ERROR", rec["status"])
	errObj, _ := rec["error"].(map[string]any)
	require.NotNil(t, errObj, "the receipt names the failed step")
	assert.Equal(t, "state", errObj["stage"])
	policy, _ := rec["policy"].(map[string]any)
	assert.Equal(t, "default", policy["name"], "a failed run's receipt names its policy too")
	assert.Contains(t, policy["hash"], "sha256:")
}

func TestReceiptFields(t *testing.T) {
	e := newEnv(t)
	require.NoError(t, os.WriteFile(filepath.Join(e.ws, "old.txt"), []byte("old\n"), 0o644))
	receipt := filepath.Join(t.TempDir(), "r.json")
	r := e.exec(t, "", []string{"--json", "--receipt", receipt}, "sh", "-c", "echo out; echo err >&2; echo new > new.txt; rm old.txt")
	require.Equal(t, 0, r.code, r.stderr)
	rec := decodeReceipt(t, r.stdout)
	var keys []string
	for k := range rec {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range []string{"id", "status", "exit_code", "signal", "execution_time_ms", "cpu_time_ms", "peak_memory_mb",
		"filesystem_modified", "committed", "rollback_performed", "changes", "scrubbed_env", "limits", "cgroup", "error",
		"stdout", "stderr", "stdout_truncated", "stderr_truncated"} {
		assert.Contains(t, keys, k)
	}
	assert.Equal(t, "SUCCESS", rec["status"])
	assert.Equal(t, "out\n", rec["stdout"])
	assert.Equal(t, "err\n", rec["stderr"])
	assert.Equal(t, true, rec["committed"])
	assert.Equal(t, false, rec["rollback_performed"])
	assert.Contains(t, []any{"v1", "v2"}, rec["cgroup"], "every run gets a cgroup on these hosts")
	assert.Greater(t, rec["peak_memory_mb"], 0.0)
	assert.Greater(t, rec["setup_ms"], 0.0)
	assert.Greater(t, rec["total_ms"], rec["setup_ms"])
	assert.Contains(t, rec["scrubbed_env"], "GITHUB_TOKEN")
	assert.NotContains(t, r.stdout, "ghp_integration", "names of scrubbed variables, never values")
	changes := rec["changes"].(map[string]any)
	assert.Equal(t, []any{map[string]any{"path": "new.txt", "type": "file", "size": 4.0,
		"sha256": "7aa7a5359173d05b63cfd682e3c38487f3cb4f7f1d60659fe59fab1505977d4c"}}, changes["added"])
	assert.Equal(t, []any{map[string]any{"path": "old.txt", "type": "file"}}, changes["deleted"])

	saved, err := os.ReadFile(receipt)
	require.NoError(t, err)
	assert.Equal(t, rec["id"], decodeReceipt(t, string(saved))["id"])
}

func TestOutputIsBoundedAndReceiptStaysJSON(t *testing.T) {
	e := newEnv(t)
	r := e.exec(t, "", []string{"--json", "--output-limit", "1K"}, "sh", "-c", "head -c 100000 /dev/zero | tr '\\0' a; printf '\\377\\376 bad utf8' >&2")
	require.Equal(t, 0, r.code, r.stderr)
	rec := decodeReceipt(t, r.stdout)
	assert.Len(t, rec["stdout"], 1024)
	assert.Equal(t, true, rec["stdout_truncated"])
	assert.Equal(t, false, rec["stderr_truncated"])
	assert.Contains(t, rec["stderr"], "bad utf8")
}

func TestFailedRunLeavesWorkspaceAlone(t *testing.T) {
	e := newEnv(t)
	require.NoError(t, os.WriteFile(filepath.Join(e.ws, "keep.txt"), []byte("keep\n"), 0o644))
	r := e.exec(t, "", []string{"--json"}, "sh", "-c", "echo junk > junk.txt; rm keep.txt; exit 1")
	assert.Equal(t, 1, r.code)
	rec := decodeReceipt(t, r.stdout)
	assert.Equal(t, "EXECUTION_ERROR", rec["status"])
	assert.Equal(t, true, rec["rollback_performed"])
	assert.Equal(t, true, rec["filesystem_modified"])
	entries, err := os.ReadDir(e.ws)
	require.NoError(t, err)
	require.Len(t, entries, 1)
	assert.Equal(t, "keep.txt", entries[0].Name())
}

// Bad input gets one clear line on stderr, exit 2, and touches nothing.
func TestUsageErrors(t *testing.T) {
	e := newEnv(t)
	file := filepath.Join(e.ws, "a-file")
	require.NoError(t, os.WriteFile(file, nil, 0o644))
	cases := []struct {
		name string
		args []string
		want string
	}{
		{"no subcommand", nil, "Usage"},
		{"unknown subcommand", []string{"frobnicate"}, "unknown command"},
		{"unknown flag", []string{"exec", "--frob", "--", "true"}, "flag provided but not defined"},
		{"missing --", []string{"exec", "true"}, "put the command after --"},
		{"missing -- without flags", []string{"exec"}, "missing --"},
		{"nothing after --", []string{"exec", "--"}, "no command after --"},
		{"workspace missing", []string{"exec", "--workspace", filepath.Join(e.ws, "nope"), "--", "true"}, "does not exist"},
		{"workspace is a file", []string{"exec", "--workspace", file, "--", "true"}, "not a directory"},
		{"state dir inside workspace", []string{"exec", "--workspace", e.ws, "--state-dir", filepath.Join(e.ws, "st"), "--", "true"}, "inside the workspace"},
		{"bad duration", []string{"exec", "--timeout", "soon", "--", "true"}, "--timeout"},
		{"bad commit mode", []string{"exec", "--commit", "sometimes", "--", "true"}, "--commit"},
		{"bad size", []string{"exec", "--output-limit", "lots", "--", "true"}, "--output-limit"},
		{"secret kept", []string{"exec", "--workspace", e.ws, "--state-dir", e.state, "--keep-env", "GITHUB_TOKEN", "--", "true"}, "--allow-secret GITHUB_TOKEN"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := neonbox(t, e.ws, "", c.args...)
			assert.Equal(t, 2, r.code)
			assert.Contains(t, r.stderr, c.want)
			assert.Empty(t, r.stdout)
			if c.name != "no subcommand" {
				assert.Equal(t, 1, strings.Count(strings.TrimSpace(r.stderr), "\n")+1, "one line: %q", r.stderr)
			}
			entries, err := os.ReadDir(e.ws)
			require.NoError(t, err)
			assert.Len(t, entries, 1, "the workspace is untouched")
		})
	}
}

func TestAllowSecret(t *testing.T) {
	e := newEnv(t)
	r := e.exec(t, "", []string{"--keep-env", "GITHUB_TOKEN", "--allow-secret", "GITHUB_TOKEN"}, "sh", "-c", "echo $GITHUB_TOKEN")
	require.Equal(t, 0, r.code, r.stderr)
	assert.Equal(t, "ghp_integration\n", r.stdout)
}
