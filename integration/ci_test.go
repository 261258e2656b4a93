package integration

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The README's CI recipe: neonbox-ns exec --policy ci -- make test in a
// checkout, the receipt kept as an artifact. A failed step leaves the
// checkout clean; a passing one keeps what it produced.
func TestUseInCI(t *testing.T) {
	e := newEnv(t)
	git := func(args ...string) string {
		cmd := exec.Command("git", append([]string{"-C", e.ws}, args...)...)
		cmd.Env = []string{"PATH=/usr/bin:/bin", "HOME=" + e.ws, "GIT_CONFIG_NOSYSTEM=1"}
		out, err := cmd.CombinedOutput()
		require.NoError(t, err, "git %v: %s", args, out)
		return string(out)
	}
	makefile := "test:\n\tmkdir -p build && echo built > build/out.txt\n\ttest -f PASS\n"
	require.NoError(t, os.WriteFile(filepath.Join(e.ws, "Makefile"), []byte(makefile), 0o644))
	git("init", "-q")
	git("-c", "user.email=ci@example.invalid", "-c", "user.name=ci", "add", "Makefile")
	git("-c", "user.email=ci@example.invalid", "-c", "user.name=ci", "commit", "-qm", "init")
	artifacts := t.TempDir()

	receipt := filepath.Join(artifacts, "failed.json")
	r := e.exec(t, "", []string{"--policy", "ci", "--receipt", receipt}, "make", "test")
	assert.NotEqual(t, 0, r.code, "the step fails: no PASS file")
	assert.Empty(t, git("status", "--porcelain", "--ignored"), "a failed step leaves the checkout clean")
	rec := decodeReceipt(t, readFile(t, receipt))
	assert.Equal(t, "EXECUTION_ERROR", rec["status"])
	assert.Equal(t, "ci", rec["policy"].(map[string]any)["name"])

	require.NoError(t, os.WriteFile(filepath.Join(e.ws, "PASS"), nil, 0o644))
	receipt = filepath.Join(artifacts, "passed.json")
	r = e.exec(t, "", []string{"--policy", "ci", "--receipt", receipt}, "make", "test")
	require.Equal(t, 0, r.code, r.stderr)
	assert.Equal(t, "built\n", readFile(t, filepath.Join(e.ws, "build/out.txt")))
	assert.Equal(t, "SUCCESS", decodeReceipt(t, readFile(t, receipt))["status"])
}

func readFile(t *testing.T, p string) string {
	t.Helper()
	b, err := os.ReadFile(p)
	require.NoError(t, err)
	return string(b)
}
