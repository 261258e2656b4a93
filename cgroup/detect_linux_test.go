package cgroup

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"testing/iotest"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

func TestProcCgroups(t *testing.T) {
	for _, tc := range []struct {
		name    string
		in      string
		v1      map[string]string
		unified string
	}{
		{
			name: "hybrid",
			in: `9:name=systemd:/
8:pids:/
4:memory:/process_api/f4ed673333645037228f06a69eb44d0a
2:cpuacct:/
1:cpu:/
0::/
`,
			v1: map[string]string{
				"name=systemd": "/", "pids": "/", "cpuacct": "/", "cpu": "/",
				"memory": "/process_api/f4ed673333645037228f06a69eb44d0a",
			},
			unified: "/",
		},
		{
			name:    "unified",
			in:      "0::/user.slice/user-1000.slice/session-2.scope\n",
			v1:      map[string]string{},
			unified: "/user.slice/user-1000.slice/session-2.scope",
		},
		{
			name: "legacy with co-mounted cpu,cpuacct",
			in: `4:cpu,cpuacct:/system.slice/x.service
3:memory:/system.slice/x.service
`,
			v1: map[string]string{
				"cpu": "/system.slice/x.service", "cpuacct": "/system.slice/x.service",
				"memory": "/system.slice/x.service",
			},
			unified: "",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v1, unified, err := procCgroups(strings.NewReader(tc.in))
			require.NoError(t, err)
			assert.Equal(t, tc.v1, v1)
			assert.Equal(t, tc.unified, unified)
		})
	}
	_, _, err := procCgroups(strings.NewReader("garbage\n"))
	assert.Error(t, err)
}

func TestVersionChoice(t *testing.T) {
	v1 := map[string]v1Hier{"memory": {}, "cpu": {}, "pids": {}}
	for _, tc := range []struct {
		name string
		h    host
		want Version
	}{
		{"v2 complete", host{v2: &v2Host{}, v2Full: true, v1: v1, v1Full: true}, V2},
		{"hybrid", host{v2Why: "no", v1: v1, v1Full: true}, V1},
		{"v2 partial beats v1 partial", host{v2: &v2Host{}, v2Why: "no pids", v1: map[string]v1Hier{"memory": {}}}, V2},
		{"v1 partial", host{v2Why: "no", v1: map[string]v1Hier{"memory": {}}, v1Why: "no pids"}, V1},
		{"nothing", host{v2Why: "no", v1: map[string]v1Hier{}, v1Why: "none"}, None},
	} {
		got, why := tc.h.version()
		assert.Equal(t, tc.want, got, tc.name)
		if got != V2 || !tc.h.v2Full {
			assert.NotEmpty(t, why, tc.name)
		}
	}
}

func TestDetectExplainsItself(t *testing.T) {
	v, why := Detect()
	t.Logf("Detect: %s (%s)", v, why)
	assert.Contains(t, []Version{V1, V2, None}, v)
	if v != V2 {
		assert.NotEmpty(t, why)
	}
}

// findV1 takes a v1 hierarchy where it is mounted, whatever the
// directory above the mount holds (no cpu -> cpu,cpuacct symlink here),
// and only if our cgroup in it is a directory.
func TestFindV1TakesTheHierarchyWhereItIsMounted(t *testing.T) {
	root := t.TempDir()
	mp := filepath.Join(root, "cpu,cpuacct")
	require.NoError(t, os.MkdirAll(filepath.Join(mp, "own"), 0o755))
	mounts := []mountInfo{{root: "/", mountpoint: mp, fstype: "cgroup", superOpts: []string{"rw", "cpu", "cpuacct"}}}

	h, err := findV1("cpu", mounts, map[string]string{"cpu": "/own", "cpuacct": "/own"})
	require.NoError(t, err)
	assert.Equal(t, filepath.Join(mp, "own"), h.own.dir)
	assert.Equal(t, "/own", h.own.path)

	_, err = findV1("cpu", mounts, map[string]string{"cpu": "/gone", "cpuacct": "/gone"})
	require.ErrorContains(t, err, "is not a directory")
	_, err = findV1("pids", mounts, map[string]string{"pids": "/own"})
	require.ErrorContains(t, err, "no v1 pids hierarchy is mounted")
}

// A process that exits between the open of /proc/<pid>/cgroup and its
// read makes the read fail with ESRCH: procCgroups keeps that error, so
// that Cgroup.owns takes the process for gone, not for a failure.
func TestProcCgroupsKeepsESRCH(t *testing.T) {
	_, _, err := procCgroups(iotest.ErrReader(&os.PathError{Op: "read", Path: "/proc/1/cgroup", Err: unix.ESRCH}))
	require.ErrorIs(t, err, unix.ESRCH)
}
