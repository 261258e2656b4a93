package integration

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/neonbox/neonbox-ns/internal/testutil"
)

// Run by an ordinary user, the jail's root is that user: no idmapped
// mount, no privilege, and the commit keeps the user's ownership.
func TestRootlessRun(t *testing.T) {
	testutil.RequireRoot(t) // to become another user
	testutil.RequireUserNS(t)
	const nobody = 65534
	base := testutil.WorldTraversableTempDir(t)
	ws, state, bin := filepath.Join(base, "ws"), filepath.Join(base, "state"), filepath.Join(base, "neonbox-ns")
	awaitHelpers(t, state)
	for _, d := range []string{ws, state} {
		require.NoError(t, os.Mkdir(d, 0o755))
		require.NoError(t, os.Chown(d, nobody, nobody))
	}
	data, err := os.ReadFile(binary)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(bin, data, 0o755))

	cmd := exec.Command(bin, "exec", "--workspace", ws, "--state-dir", state, "--",
		"sh", "-c", "id -u; cat /proc/self/uid_map; echo shadow:$(cat /etc/shadow 2>/dev/null | wc -c); echo hi > new.txt")
	cmd.Dir = ws
	cmd.Env = []string{"PATH=/usr/bin:/bin"}
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: nobody, Gid: nobody}}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		if bytes.Contains(stderr.Bytes(), []byte("operation not permitted")) {
			testutil.Skip(t, "unprivileged user namespaces are restricted here: "+stderr.String())
		}
		t.Fatalf("rootless run: %v\n%s", err, stderr.String())
	}
	assert.Equal(t, []string{"0", "0", "65534", "1", "shadow:0"}, splitFields(stdout.String()))
	st, err := os.Stat(filepath.Join(ws, "new.txt"))
	require.NoError(t, err)
	assert.Equal(t, uint32(nobody), st.Sys().(*syscall.Stat_t).Uid)
	assert.Empty(t, runsLeft(t, state))
}

func splitFields(s string) []string {
	var out []string
	for _, f := range bytes.Fields([]byte(s)) {
		out = append(out, string(f))
	}
	return out
}
