package integration

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestExecUnderTheRaceDetector runs neonbox-ns built with -race through
// the paths where its goroutines meet: a prestarted init taken, one
// discarded (--disk, network), output captured and passed through, a
// failure and a timeout. (Its stdin is a file here; nsjail's tests cover
// readers.)
func TestExecUnderTheRaceDetector(t *testing.T) {
	if testing.Short() {
		t.Skip("builds neonbox-ns with -race")
	}
	e := newEnv(t)
	bin := filepath.Join(t.TempDir(), "neonbox-ns-race")
	out, err := exec.Command("go", "build", "-race", "-o", bin, "../cmd/neonbox-ns").CombinedOutput()
	require.NoError(t, err, "%s", out)
	cases := []struct {
		flags []string
		argv  []string
		stdin string
		code  int
	}{
		{[]string{"--json"}, []string{"sh", "-c", "echo out; echo err >&2"}, "", 0},
		{nil, []string{"cat"}, "in", 0},
		{[]string{"--disk", "8M"}, []string{"sh", "-c", "echo x > f; exit 3"}, "", 3},
		{[]string{"--timeout", "300ms"}, []string{"sleep", "10"}, "", 124},
		{[]string{"--allow", "network"}, []string{"true"}, "", 0},
	}
	// The detector sees a race only when both accesses fall within its
	// history: each case runs a few times.
	for i := 0; i < 4*len(cases); i++ {
		c := cases[i%len(cases)]
		args := append([]string{"exec", "--workspace", e.ws, "--state-dir", e.state}, c.flags...)
		cmd := exec.Command(bin, append(append(args, "--"), c.argv...)...)
		cmd.Env = append(os.Environ(), "GORACE=halt_on_error=1 exitcode=66")
		cmd.Stdin = strings.NewReader(c.stdin)
		r := runCmd(t, cmd)
		require.NotContains(t, r.stderr, "DATA RACE", "%v", c.argv)
		require.Equal(t, c.code, r.code, "%v: %s", c.argv, r.stderr)
	}
}
