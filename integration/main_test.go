package integration

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/neonbox/neonbox-ns/internal/testutil"
	"github.com/neonbox/neonbox-ns/reexec"
)

// binary is the neonbox-ns under test: NEONBOX_BIN, or one built for
// this run.
var binary string

func TestMain(m *testing.M) {
	if reexec.Init() {
		return
	}
	dir, err := os.MkdirTemp("", "neonbox-integration-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	// make test runs the binary it ships (the static musl build);
	// otherwise one is built here.
	binary = os.Getenv("NEONBOX_BIN")
	if binary == "" {
		binary = filepath.Join(dir, "neonbox-ns")
		out, err := exec.Command("go", "build", "-o", binary, "../cmd/neonbox-ns").CombinedOutput()
		if err != nil {
			fmt.Fprintf(os.Stderr, "build neonbox-ns: %v\n%s", err, out)
			os.Exit(1)
		}
	} else if !filepath.IsAbs(binary) {
		fmt.Fprintf(os.Stderr, "NEONBOX_BIN=%s: want an absolute path\n", binary)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// result is one invocation of the binary.
type result struct {
	code           int
	stdout, stderr string
}

// neonbox runs the binary with args in dir, with stdin as its input.
func neonbox(t *testing.T, dir, stdin string, args ...string) result {
	t.Helper()
	cmd := exec.Command(binary, args...)
	cmd.Dir = dir
	cmd.Stdin = bytes.NewBufferString(stdin)
	cmd.Env = []string{"PATH=/usr/bin:/bin", "LANG=C.UTF-8", "GITHUB_TOKEN=ghp_integration", "HOME=/root"}
	return runCmd(t, cmd)
}

// runCmd runs cmd, capturing its output; a non-zero exit is a result, not
// an error.
func runCmd(t *testing.T, cmd *exec.Cmd) result {
	t.Helper()
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var ee *exec.ExitError
	code := 0
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	} else {
		require.NoError(t, err)
	}
	return result{code: code, stdout: stdout.String(), stderr: stderr.String()}
}

// env is a workspace and state dir for one test.
type env struct {
	ws, state string
}

func newEnv(t *testing.T) env {
	t.Helper()
	testutil.RequireRoot(t)
	testutil.RequireUserNS(t)
	base := testutil.WorldTraversableTempDir(t)
	e := env{ws: filepath.Join(base, "ws"), state: filepath.Join(base, "state")}
	awaitHelpers(t, e.state)
	require.NoError(t, os.Mkdir(e.ws, 0o755))
	return e
}

// exec runs neonbox-ns exec over e's workspace with extra flags and argv.
func (e env) exec(t *testing.T, stdin string, flags []string, argv ...string) result {
	t.Helper()
	args := append([]string{"exec", "--workspace", e.ws, "--state-dir", e.state}, flags...)
	args = append(append(args, "--"), argv...)
	return neonbox(t, e.ws, stdin, args...)
}

func decodeReceipt(t *testing.T, s string) map[string]any {
	t.Helper()
	var r map[string]any
	require.NoError(t, json.Unmarshal([]byte(s), &r), "receipt: %s", s)
	return r
}
