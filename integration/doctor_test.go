package integration

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/neonbox/neonbox-ns/internal/testutil"
)

func TestDoctor(t *testing.T) {
	testutil.RequireRoot(t)
	testutil.RequireUserNS(t)
	base := testutil.WorldTraversableTempDir(t)
	r := neonbox(t, base, "", "doctor", "--state-dir", filepath.Join(base, "state"))
	require.Equal(t, 0, r.code, r.stdout+r.stderr)
	for _, name := range []string{"kernel", "user namespaces", "overlayfs", "idmapped mounts", "cgroups", "seccomp", "pidfd", "a real run"} {
		assert.Regexp(t, `(?m)^ok   `+name+` `, r.stdout)
	}

	// A state dir the jail's ids cannot reach: the real run fails, with
	// the reason and a remedy, and doctor exits 1.
	hidden := filepath.Join(base, "hidden")
	require.NoError(t, os.Mkdir(hidden, 0o700))
	r = neonbox(t, base, "", "doctor", "--state-dir", filepath.Join(hidden, "state"))
	assert.Equal(t, 1, r.code)
	assert.Regexp(t, `(?m)^FAIL a real run .*needs o\+x`, r.stdout)
	assert.Contains(t, r.stdout, "remedy:")
}
