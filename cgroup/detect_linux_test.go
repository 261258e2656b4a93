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

// findV1 takes a v1 mount only if <root>/<ctrl>, where containerd's
// cgroup1 package looks, leads to it: directly or through a symlink
// such as cpu -> cpu,cpuacct. (It pins the verdicts, however they are
// reached.)
func TestFindV1ChecksWhereTheControllerLeads(t *testing.T) {
	layout := func(t *testing.T, link bool) []mountInfo {
		root := t.TempDir()
		mp := filepath.Join(root, "cpu,cpuacct")
		require.NoError(t, os.MkdirAll(filepath.Join(mp, "own"), 0o755))
		if link {
			require.NoError(t, os.Symlink("cpu,cpuacct", filepath.Join(root, "cpu")))
		} else {
			require.NoError(t, os.Mkdir(filepath.Join(root, "cpu"), 0o755))
		}
		return []mountInfo{{root: "/", mountpoint: mp, fstype: "cgroup", superOpts: []string{"rw", "cpu", "cpuacct"}}}
	}
	paths := map[string]string{"cpu": "/own", "cpuacct": "/own"}

	mounts := layout(t, true)
	h, err := findV1("cpu", mounts, paths)
	require.NoError(t, err)
	assert.Equal(t, filepath.Join(mounts[0].mountpoint, "own"), h.own.dir)

	_, err = findV1("cpu", layout(t, false), paths)
	require.ErrorContains(t, err, "does not lead there")
}

// A process that exits between the open of /proc/<pid>/cgroup and its
// read makes the read fail with ESRCH: procCgroups keeps that error, so
// that Cgroup.owns takes the process for gone, not for a failure.
func TestProcCgroupsKeepsESRCH(t *testing.T) {
	_, _, err := procCgroups(iotest.ErrReader(&os.PathError{Op: "read", Path: "/proc/1/cgroup", Err: unix.ESRCH}))
	require.ErrorIs(t, err, unix.ESRCH)
}
