package cgroup

import (
	"math"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Unprivileged tests of the parsers, on fixtures taken from real hosts.

func TestParseMountinfo(t *testing.T) {
	in := `31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
32 31 0:29 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu
41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
29 23 0:26 /docker/abc /sys/fs/cgroup rw,nosuid shared:9 master:3 - cgroup2 cgroup2 rw,nsdelegate,memory_recursiveprot
50 23 8:1 /a\040b /mnt/with\040space rw - ext4 /dev/sda1 rw
`
	got, err := parseMountinfo(strings.NewReader(in))
	require.NoError(t, err)
	require.Len(t, got, 5)
	assert.Equal(t, mountInfo{root: "/", mountpoint: "/sys/fs/cgroup/cpu", fstype: "cgroup", superOpts: []string{"rw", "cpu"}}, got[1])
	assert.Equal(t, "cgroup2", got[2].fstype)
	assert.Equal(t, mountInfo{root: "/docker/abc", mountpoint: "/sys/fs/cgroup", fstype: "cgroup2", superOpts: []string{"rw", "nsdelegate", "memory_recursiveprot"}}, got[3])
	assert.Equal(t, "/a b", got[4].root)
	assert.Equal(t, "/mnt/with space", got[4].mountpoint)

	for _, bad := range []string{
		"31 23 0:28 / /sys/fs/cgroup rw,relatime tmpfs tmpfs rw\n", // no separator
		"31 23 0:28 / /x rw - tmpfs\n",                             // too short after it
	} {
		_, err := parseMountinfo(strings.NewReader(bad))
		assert.Error(t, err, bad)
	}
}

func TestCgroupDir(t *testing.T) {
	for _, tc := range []struct {
		mountpoint, root, path, want string
	}{
		{"/sys/fs/cgroup/memory", "/", "/process_api/x", "/sys/fs/cgroup/memory/process_api/x"},
		{"/sys/fs/cgroup/pids", "/", "/", "/sys/fs/cgroup/pids"},
		{"/sys/fs/cgroup", "/docker/abc", "/docker/abc/sub", "/sys/fs/cgroup/sub"},
		{"/sys/fs/cgroup", "/docker/abc", "/docker/abc", "/sys/fs/cgroup"},
		{"/sys/fs/cgroup", "/docker/abc", "/docker/abcd", ""}, // outside, despite the common prefix
		{"/sys/fs/cgroup", "/docker/abc", "/", ""},
		{"/sys/fs/cgroup", "/", "relative", ""},
	} {
		got, err := cgroupDir(tc.mountpoint, tc.root, tc.path)
		if tc.want == "" {
			assert.Error(t, err, "%+v", tc)
			continue
		}
		require.NoError(t, err, "%+v", tc)
		assert.Equal(t, tc.want, got, "%+v", tc)
	}
}

func TestParseKeyed(t *testing.T) {
	for _, tc := range []struct {
		name string
		in   string
		want map[string]int64
	}{
		{
			name: "v2 cpu.stat",
			in: `usage_usec 1234567
user_usec 1000000
system_usec 234567
nice_usec 0
nr_periods 50
nr_throttled 42
throttled_usec 8000000
nr_bursts 0
burst_usec 0
`,
			want: map[string]int64{
				"usage_usec": 1234567, "user_usec": 1000000, "system_usec": 234567, "nice_usec": 0,
				"nr_periods": 50, "nr_throttled": 42, "throttled_usec": 8000000, "nr_bursts": 0, "burst_usec": 0,
			},
		},
		{
			name: "v1 cpu.stat",
			in:   "nr_periods 10\nnr_throttled 9\nthrottled_time 712345678\nnr_bursts 0\nburst_time 0\n",
			want: map[string]int64{"nr_periods": 10, "nr_throttled": 9, "throttled_time": 712345678, "nr_bursts": 0, "burst_time": 0},
		},
		{
			name: "v2 memory.events",
			in:   "low 0\nhigh 0\nmax 17\noom 1\noom_kill 1\noom_group_kill 0\n",
			want: map[string]int64{"low": 0, "high": 0, "max": 17, "oom": 1, "oom_kill": 1, "oom_group_kill": 0},
		},
		{
			name: "v1 memory.oom_control",
			in:   "oom_kill_disable 0\nunder_oom 0\noom_kill 3\n",
			want: map[string]int64{"oom_kill_disable": 0, "under_oom": 0, "oom_kill": 3},
		},
		{
			name: "empty",
			in:   "",
			want: map[string]int64{},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseKeyed(tc.in)
			require.NoError(t, err)
			assert.Equal(t, tc.want, got)
		})
	}
	for _, bad := range []string{"usage_usec\n", "a b c\n", "nr_throttled -1\n", "x 1.5\n"} {
		_, err := parseKeyed(bad)
		assert.Error(t, err, bad)
	}
}

func TestParseValue(t *testing.T) {
	for in, want := range map[string]int64{
		"67108864\n":             64 << 20,
		"0":                      0,
		"max\n":                  math.MaxInt64,
		"9223372036854771712\n":  9223372036854771712, // v1 "no limit"
		"18446744073709551615\n": math.MaxInt64,
	} {
		got, err := parseValue(in)
		require.NoError(t, err, in)
		assert.Equal(t, want, got, in)
	}
	for _, bad := range []string{"", "-1", "12k", "max max"} {
		_, err := parseValue(bad)
		assert.Error(t, err, bad)
	}
}

func TestParseControllersAndPids(t *testing.T) {
	assert.Equal(t, map[string]bool{"cpuset": true, "cpu": true, "memory": true, "pids": true},
		parseControllers("cpuset cpu memory pids\n"))
	assert.Empty(t, parseControllers("\n"))

	pids, err := parsePids("12\n345\n")
	require.NoError(t, err)
	assert.Equal(t, []int{12, 345}, pids)
	pids, err = parsePids("")
	require.NoError(t, err)
	assert.Empty(t, pids)
	_, err = parsePids("12\nx\n")
	assert.Error(t, err)
	_, err = parsePids("0\n")
	assert.Error(t, err)
}

func TestInCgroup(t *testing.T) {
	assert.True(t, inCgroup("/a/neonbox/run", "/a/neonbox/run"))
	assert.True(t, inCgroup("/a/neonbox/run/inner", "/a/neonbox/run"))
	assert.False(t, inCgroup("/a/neonbox/run2", "/a/neonbox/run"))
	assert.False(t, inCgroup("/a/neonbox", "/a/neonbox/run"))
	assert.True(t, inCgroup("/x", "/"))
}

func TestLimitsValidate(t *testing.T) {
	for _, tc := range []struct {
		l     Limits
		quota int64
		bad   bool
	}{
		{l: Limits{}, quota: 0},
		{l: Limits{CPUs: 0.5}, quota: 50000},
		{l: Limits{CPUs: 2}, quota: 200000},
		{l: Limits{CPUs: 0.2}, quota: 20000},
		{l: Limits{CPUs: 0.01}, quota: 1000},
		{l: Limits{CPUs: 0.001}, bad: true},
		{l: Limits{CPUs: -1}, bad: true},
		{l: Limits{CPUs: math.NaN()}, bad: true},
		{l: Limits{CPUs: math.Inf(1)}, bad: true},
		{l: Limits{MemoryBytes: -1}, bad: true},
		{l: Limits{Pids: -5}, bad: true},
		{l: Limits{MemoryBytes: 1 << 30, Pids: 64}, quota: 0},
	} {
		quota, err := tc.l.validate()
		if tc.bad {
			assert.Error(t, err, "%+v", tc.l)
			continue
		}
		require.NoError(t, err, "%+v", tc.l)
		assert.Equal(t, tc.quota, quota, "%+v", tc.l)
	}
}

func TestValidName(t *testing.T) {
	for _, ok := range []string{"run-1", "a", "Run_2.x", strings.Repeat("x", 200)} {
		assert.NoError(t, validName(ok), ok)
	}
	for _, bad := range []string{"", ".", "..", ".hidden", "a/b", "../x", "a b", "x\n", strings.Repeat("x", 201)} {
		assert.Error(t, validName(bad), bad)
	}
}
