package nsjail

import (
	le "encoding/binary"
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// step is one decoded op of an encoded program: its stage, operation's
// name and path (its first three strings, as the init reports them) and
// arguments.
type step struct {
	stage, op, path string
	a, b            uint64
}

// decodeProgram reads an encoded program (jailinit.h): "NBI1", u32 count,
// then per op u16 code, u16 flags, u32 nstr, u64 a, u64 b and nstr
// strings of u32 length, bytes and a NUL.
func decodeProgram(t *testing.T, msg []byte) []step {
	t.Helper()
	require.Equal(t, "NBI1", string(msg[:4]))
	n := le.LittleEndian.Uint32(msg[4:8])
	q := msg[8:]
	var steps []step
	for range n {
		nstr := le.LittleEndian.Uint32(q[4:8])
		s := step{a: le.LittleEndian.Uint64(q[8:16]), b: le.LittleEndian.Uint64(q[16:24])}
		q = q[24:]
		for i := range nstr {
			l := le.LittleEndian.Uint32(q[:4])
			switch i {
			case 0:
				s.stage = string(q[4 : 4+l])
			case 1:
				s.op = string(q[4 : 4+l])
			case 2:
				s.path = string(q[4 : 4+l])
			}
			q = q[4+l+1:]
		}
		steps = append(steps, s)
	}
	require.Empty(t, q, "trailing bytes")
	return steps
}

func ops(steps []step) []string {
	var out []string
	for _, s := range steps {
		out = append(out, s.op)
	}
	return out
}

// count counts op in ops.
func count(ops []string, op string) int {
	n := 0
	for _, o := range ops {
		if o == op {
			n++
		}
	}
	return n
}

// subsequence reports whether want appears in have in order.
func subsequence(have, want []string) bool {
	i := 0
	for _, h := range have {
		if i < len(want) && h == want[i] {
			i++
		}
	}
	return i == len(want)
}

func testConfig() *childConfig {
	return &childConfig{
		Argv: []string{"true"}, RunDir: "/state/runs/0123456789abcdef", RootMount: "/state/mnt",
		Workspace: "/ws", WorkspaceFD: true, UID: 1000, GID: 1000, SetGroups: true,
		Seccomp: [][]byte{make([]byte, 8), make([]byte, 16)},
	}
}

// Whatever way the program is split, every jail ends the same way: the
// ids and every capability dropped, no_new_privs and neonbox-ns's own
// seccomp filter before the init waits for the last part (its cgroup, or
// for a Pool's deferred init its command), then the cgroup joined and
// the policy's filter loaded just before execve.
func TestProgramPartsEndInTheSameDrop(t *testing.T) {
	drop := []string{"setgroups", "setresgid", "setresuid", "capset", "prctl PR_SET_NO_NEW_PRIVS", "seccomp"}
	finish := []string{"write tasks", "seccomp", "sync", "execve"}

	cfg := testConfig()
	base, err := baseProgram(cfg)
	require.NoError(t, err)
	b := ops(decodeProgram(t, base))
	assert.Contains(t, b, "setns", "the network namespace is joined in the base")
	assert.Equal(t, "recvmsg", b[len(b)-1])

	rest, err := restProgram(cfg, -1)
	require.NoError(t, err)
	r := ops(decodeProgram(t, rest))
	assert.Equal(t, "recvmsg", r[len(r)-1], "the rest waits for the final part")
	assert.NotContains(t, r, "dup3", "no streams to take")
	withStdio, err := restProgram(cfg, 1)
	require.NoError(t, err)
	ws := decodeProgram(t, withStdio)
	require.Equal(t, "dup3", ws[1].op, "an adopted init takes CMD's streams first")
	assert.Equal(t, uint64(1), ws[1].a, "from the slot after the workspace's")
	assert.True(t, subsequence(r, append([]string{"prctl PR_CAPBSET_DROP", "argv", "env", "chdir", "exec"}, append(drop, "recvmsg")...)), "%v", r)
	assert.Equal(t, 1, count(r, "seccomp"), "only neonbox-ns's own filter before the wait")
	for _, op := range []string{"execve", "write tasks"} {
		assert.NotContains(t, r, op)
	}

	cfg.CgroupTasks = 5
	final, err := finalProgram(cfg)
	require.NoError(t, err)
	fs := decodeProgram(t, final)
	f := ops(fs)
	assert.True(t, subsequence(f, finish), "%v", f)
	assert.Equal(t, 1, count(f, "seccomp"), "the policy's filter")
	assert.Equal(t, "execve", f[len(f)-1])
	for _, s := range fs {
		if s.op == "write tasks" {
			assert.Equal(t, []uint64{0, 5}, []uint64{s.a, s.b}, "the final part's tasks files are from slot 0")
		}
	}
	cfg.Seccomp = nil
	_, err = finalProgram(cfg)
	assert.Error(t, err, "no jail without a filter")
	_, err = restProgram(cfg, -1)
	assert.Error(t, err, "no jail without a filter")

	// A Pool's deferred init: rest and final in one message, the
	// tasks files after the workspace's descriptor; every privilege
	// goes and neonbox-ns's own filter comes before it waits for its
	// command, the policy's filter (the second) only after it.
	cfg = testConfig()
	cfg.Deferred, cfg.CgroupTasks = true, 5
	deferred, err := restProgram(cfg, -1)
	require.NoError(t, err)
	ds := decodeProgram(t, deferred)
	d := ops(ds)
	assert.True(t, subsequence(d, append(append([]string{"prctl PR_CAPBSET_DROP"}, drop...), append([]string{"call", "chdir", "exec"}, finish...)...)), "%v", d)
	call := slices.Index(d, "call")
	for _, op := range []string{"setresuid", "capset", "prctl PR_SET_NO_NEW_PRIVS", "seccomp"} {
		assert.Less(t, slices.Index(d, op), call, "%s before the call", op)
	}
	var filters []uint64
	for i, s := range ds {
		if s.op == "seccomp" {
			filters = append(filters, uint64(i))
		}
	}
	require.Len(t, filters, 2)
	assert.Greater(t, filters[1], uint64(call), "the policy's filter after the call")
	// The tasks files come after the workspace's descriptor; all but
	// the first (memory's) are written before the call.
	var joins [][]uint64
	for i, s := range ds {
		if s.op == "write tasks" {
			joins = append(joins, []uint64{s.a, s.b, uint64(i)})
		}
	}
	require.Len(t, joins, 2)
	assert.Equal(t, []uint64{2, 4}, joins[0][:2])
	assert.Less(t, joins[0][2], uint64(call))
	assert.Equal(t, []uint64{1, 1}, joins[1][:2], "memory's after the call")
	assert.Greater(t, joins[1][2], uint64(call))

	// With the host's network, no namespace to join.
	cfg = testConfig()
	cfg.Network = true
	base, err = baseProgram(cfg)
	require.NoError(t, err)
	assert.NotContains(t, ops(decodeProgram(t, base)), "setns")
}

// The base of the program depends only on the host, the state dir and
// the network (no jail with network takes a prestarted init), so that
// `neonbox-ns exec` can queue an earlier run's before it knows its own
// run: not on the command, its streams or terminal, the run dir, the
// filters, the policy's binds or the workspace's owner (HOME's), which
// the rest takes.
func TestBaseIsTheSameForEveryRun(t *testing.T) {
	want, err := baseProgram(testConfig())
	require.NoError(t, err)
	cfg := testConfig()
	cfg.Argv, cfg.Env, cfg.Cwd = []string{"sh", "-c", "exit 3"}, []string{"A=1"}, "/ws/sub"
	cfg.RunDir = "/state/runs/fedcba9876543210"
	cfg.Seccomp = [][]byte{make([]byte, 24)}
	cfg.DevPts = true
	cfg.Binds = []bind{{Path: "/opt/tools", ReadOnly: true}, {Path: "/srv/cache"}}
	cfg.ReadOnlyWorkspace = true
	cfg.UID, cfg.GID = 1001, 1002 // another workspace owner
	got, err := baseProgram(cfg)
	require.NoError(t, err)
	assert.Equal(t, want, got)

	rest, err := restProgram(cfg, -1)
	require.NoError(t, err)
	var binds, devpts int
	for _, s := range decodeProgram(t, rest) {
		switch {
		case s.stage == "binds":
			binds++
		case s.op == "mount devpts":
			devpts++
		}
	}
	assert.Positive(t, binds, "the policy's binds are in the rest")
	assert.Equal(t, 1, devpts, "devpts is mounted by the rest")
}
