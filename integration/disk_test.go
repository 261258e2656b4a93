package integration

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/neonbox/neonbox-ns/internal/testutil"
)

func requireKernel66(t *testing.T) {
	var u unix.Utsname
	require.NoError(t, unix.Uname(&u))
	var ma, mi int
	_, _ = fmt.Sscanf(unix.ByteSliceToString(u.Release[:]), "%d.%d", &ma, &mi)
	if ma < 6 || ma == 6 && mi < 6 {
		testutil.Skip(t, "--disk needs Linux 6.6 (user xattrs on tmpfs)")
	}
}

// --disk: filling the limit fails the run (DISK_EXCEEDED) and rolls it
// back; the host's disk never sees the writes; a run within the limit is
// committed; nothing stays mounted.
func TestDiskLimit(t *testing.T) {
	e := newEnv(t)
	requireKernel66(t)
	require.NoError(t, os.WriteFile(filepath.Join(e.ws, "keep"), []byte("keep\n"), 0o644))
	r := e.exec(t, "", []string{"--disk", "1M", "--json"}, "sh", "-c", "echo x > small; head -c 5000000 /dev/zero > big; exit 0")
	assert.Equal(t, 122, r.code, r.stderr)
	rec := decodeReceipt(t, r.stdout)
	assert.Equal(t, "DISK_EXCEEDED", rec["status"])
	assert.Equal(t, true, rec["rollback_performed"])
	assert.Equal(t, float64(1<<20), rec["limits"].(map[string]any)["disk_bytes"])
	for _, name := range []string{"small", "big"} {
		_, err := os.Stat(filepath.Join(e.ws, name))
		assert.True(t, os.IsNotExist(err), name)
	}

	// Many empty files exhaust the inodes before the bytes.
	r = e.exec(t, "", []string{"--disk", "1M", "--json"}, "/usr/bin/python3", "-c",
		"import os\nfor i in range(100000): open('f%d' % i, 'w').close()")
	assert.Equal(t, "DISK_EXCEEDED", decodeReceipt(t, r.stdout)["status"], r.stderr)
	entries, _ := os.ReadDir(e.ws)
	assert.Len(t, entries, 1, "rolled back")

	r = e.exec(t, "", []string{"--disk", "1M"}, "sh", "-c", "echo fits > small; rm keep")
	require.Equal(t, 0, r.code, r.stderr)
	assert.Contains(t, r.stderr, "not transactional", "the copy is said")
	b, err := os.ReadFile(filepath.Join(e.ws, "small"))
	require.NoError(t, err)
	assert.Equal(t, "fits\n", string(b))
	_, err = os.Stat(filepath.Join(e.ws, "keep"))
	assert.True(t, os.IsNotExist(err))

	mi, err := os.ReadFile("/proc/self/mountinfo")
	require.NoError(t, err)
	assert.NotContains(t, string(mi), e.state, "no run's tmpfs stays mounted")
	runs, _ := os.ReadDir(filepath.Join(e.state, "runs"))
	assert.Empty(t, runs)
}

// A --disk run's dir keeps its owner file under the tmpfs too: a
// neonbox-ns that does not see the tmpfs (another mount namespace), or
// this run's cleanup once it has unmounted it, must not take the run dir
// for abandoned.
func TestDiskRunDirIsOwnedUnderItsTmpfs(t *testing.T) {
	e := newEnv(t)
	requireKernel66(t)
	cmd := exec.Command(binary, "exec", "--workspace", e.ws, "--state-dir", e.state, "--disk", "16M", "--", "sleep", "3")
	cmd.Env = []string{"PATH=/usr/bin:/bin"}
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	runs := filepath.Join(e.state, "runs")
	var dir string
	require.Eventually(t, func() bool {
		entries, _ := os.ReadDir(runs)
		for _, d := range entries {
			p := filepath.Join(runs, d.Name())
			if _, err := os.Stat(filepath.Join(p, "upper")); err == nil {
				dir = p // filled: its tmpfs is mounted
				return true
			}
		}
		return false
	}, 10*time.Second, 5*time.Millisecond)
	// In a mount namespace of its own, under the tmpfs.
	out, err := exec.Command("unshare", "-m", "--propagation", "private", "sh", "-c", "umount "+dir+" && cat "+dir+"/owner").CombinedOutput()
	require.NoError(t, err, "%s", out)
	assert.Regexp(t, `^[0-9]+ [0-9]+`, string(out), "the owner under the tmpfs")
	require.NoError(t, cmd.Wait())
}
