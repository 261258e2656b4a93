package integration

// Containment tests: exhaustion under limits, hostile names and output,
// the /proc masks and rlimits. See attack_test.go.

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/neonbox/neonbox-ns/internal/testutil"
)

// assertSaneReceipt checks that neonbox-ns printed exactly one valid JSON
// document in valid UTF-8.
func assertSaneReceipt(t *testing.T, r attackRun) {
	t.Helper()
	assert.True(t, utf8.ValidString(r.stdout), "the receipt is not valid UTF-8")
	assert.True(t, json.Valid([]byte(r.stdout)), "the receipt is not valid JSON")
	dec := json.NewDecoder(strings.NewReader(r.stdout))
	var v any
	require.NoError(t, dec.Decode(&v))
	assert.False(t, dec.More(), "more than one JSON document on stdout")
}

// A fork bomb under --pids 64 is held to 64 processes, ended by the
// timeout, rolled back, and leaves nothing behind.
func TestAttackForkBomb(t *testing.T) {
	e := newEnv(t)
	start := time.Now()
	r := e.attack(t, attackOpts{flags: []string{"--pids", "64", "--timeout", "3s"}}, "sh", "-c",
		`echo "pidns=$(readlink /proc/self/ns/pid)"; echo junk > junk; f() { f | f & }; f; sleep 30`)
	assert.Less(t, time.Since(start), 15*time.Second)
	assert.Equal(t, "TIMEOUT", r.status())
	assert.Equal(t, 124, r.code)
	assert.Equal(t, true, r.rec["rollback_performed"])
	if peak, ok := r.rec["pids_peak"].(float64); ok {
		assert.LessOrEqual(t, peak, 64.0)
	}
	assertAbsent(t, filepath.Join(e.ws, "junk"))
	if ns := r.kv()["pidns"]; ns != "" {
		assert.Empty(t, hostProcsIn(ns), "bomb processes survive on the host")
	}
	assertSaneReceipt(t, r)
}

// A memory balloon under --memory 64M, on the heap or in the jail's
// tmpfs /tmp and /dev/shm (charged to the run's cgroup), ends
// MEMORY_EXCEEDED and its changes are rolled back.
func TestAttackMemoryBalloon(t *testing.T) {
	for name, balloon := range map[string]string{
		"heap": `
b = []
while True:
    b.append(bytearray(1 << 20))
`,
		"tmpfs": `
for d in ["/tmp", "/dev/shm"]:
    with open(d + "/balloon", "wb") as f:
        for i in range(512):
            f.write(b"\xaa" * (1 << 20))
`,
	} {
		t.Run(name, func(t *testing.T) {
			e := newEnv(t)
			require.NoError(t, os.WriteFile(filepath.Join(e.ws, "keep"), []byte("keep\n"), 0o644))
			before := testutil.Snapshot(t, e.ws)
			r := e.attackPy(t, attackOpts{flags: []string{"--memory", "64M"}}, `
open("junk", "w").write("junk")
os.remove("keep")
`+balloon)
			assert.Equal(t, "MEMORY_EXCEEDED", r.status(), r.stdout)
			assert.Equal(t, true, r.rec["rollback_performed"])
			assert.Equal(t, false, r.rec["committed"])
			if peak, ok := r.rec["peak_memory_mb"].(float64); ok {
				assert.LessOrEqual(t, peak, 64.5)
			}
			assert.Equal(t, before, testutil.Snapshot(t, e.ws))
		})
	}
}

// Tens of megabytes on both streams under --json --output-limit 1K: the
// receipt stays small.
func TestAttackOutputFlood(t *testing.T) {
	e := newEnv(t)
	r := e.attack(t, attackOpts{flags: []string{"--output-limit", "1K"}}, "sh", "-c",
		"head -c 30000000 /dev/urandom; head -c 30000000 /dev/zero >&2")
	assert.Equal(t, "SUCCESS", r.status())
	assert.Less(t, len(r.stdout), 16<<10, "the receipt is not bounded")
	assert.LessOrEqual(t, len(r.out()), 1024*3, "stdout kept: %d bytes", len(r.out())) // invalid UTF-8 grows when escaped
	assert.Len(t, r.errOut(), 1024)
	assert.Equal(t, true, r.rec["stdout_truncated"])
	assert.Equal(t, true, r.rec["stderr_truncated"])
	assertSaneReceipt(t, r)
}

// 20,000 tiny files are committed and reported without breaking the run.
func TestAttackManyFiles(t *testing.T) {
	e := newEnv(t)
	const n = 20000
	r := e.attackPy(t, attackOpts{}, fmt.Sprintf(`
os.mkdir("many")
for i in range(%d):
    with open("many/f%%05d" %% i, "w") as f:
        f.write("x")
`, n))
	require.Equal(t, "SUCCESS", r.status(), r.stderr)
	assert.Equal(t, true, r.rec["committed"])
	entries, err := os.ReadDir(filepath.Join(e.ws, "many"))
	require.NoError(t, err)
	assert.Len(t, entries, n)
	added := r.rec["changes"].(map[string]any)["added"].([]any)
	assert.Len(t, added, n+1)
	assertSaneReceipt(t, r)
	assert.Empty(t, runsLeft(t, e.state), "the run dir is cleaned up")
}

// A tree deeper than PATH_MAX cannot be committed; the run must fail
// closed: the workspace untouched, nothing left in the state dir.
func TestAttackDeepTree(t *testing.T) {
	e := newEnv(t)
	require.NoError(t, os.WriteFile(filepath.Join(e.ws, "keep"), []byte("keep\n"), 0o644))
	before := testutil.Snapshot(t, e.ws)
	r := e.attackPy(t, attackOpts{}, `
os.mkdir("top")
os.chdir("top")
for i in range(1500):
    os.mkdir("dddd")
    os.chdir("dddd")
open("leaf", "w").write("leaf")
`)
	assertSaneReceipt(t, r)
	if r.rec["committed"] == true {
		_, err := os.Stat(filepath.Join(e.ws, "top", strings.Repeat("dddd/", 10)))
		assert.NoError(t, err)
	} else {
		assert.Equal(t, before, testutil.Snapshot(t, e.ws), "a failed commit changed the workspace")
		t.Logf("not committed: %s %v", r.status(), r.rec["error"])
	}
	assert.Empty(t, runsLeft(t, e.state), "the run dir is cleaned up")
}

// 255-byte, non-UTF-8 and control-character names, and binary output:
// the receipt stays one valid JSON document in UTF-8 and the files are
// committed byte for byte.
func TestAttackHostileNames(t *testing.T) {
	e := newEnv(t)
	names := [][]byte{
		bytes.Repeat([]byte("n"), 255),
		[]byte("bad-\xff\xfe-utf8"),
		[]byte("overlong-\xc0\xaf"),
		[]byte("new\nline"),
		[]byte("esc-\x1b[31m-red"),
		[]byte(`quote"back\slash`),
		[]byte("\u202etxt.exe"),
	}
	var lit []string
	for _, n := range names {
		lit = append(lit, pyBytes(n))
	}
	r := e.attackPy(t, attackOpts{}, `
names = [`+strings.Join(lit, ", ")+`]
for n in names:
    with open(n, "wb") as f:
        f.write(n)
attempt("name_256", lambda: open(b"m" * 256, "wb"))
sys.stdout.buffer.write(b"\xff\xfe\x00\x1b[2J\xc3\x28 not utf8\n")
sys.stderr.buffer.write(b"\xed\xa0\x80 surrogate\n")
`)
	require.Equal(t, "SUCCESS", r.status(), r.stdout)
	assertSaneReceipt(t, r)
	assertDenied(t, r, "name_256")
	assert.Equal(t, true, r.rec["committed"])
	for _, n := range names {
		b, err := os.ReadFile(filepath.Join(e.ws, string(n)))
		if assert.NoError(t, err, "%q committed", n) {
			assert.Equal(t, n, b)
		}
	}
	added := r.rec["changes"].(map[string]any)["added"].([]any)
	assert.Len(t, added, len(names))
}

// With --json, CMD's output belongs in the receipt: nothing the jail
// chooses may reach neonbox-ns's own stderr, where it would reach the
// caller's terminal (escape sequences) or log (forged lines).
func TestAttackJSONStderrInjection(t *testing.T) {
	e := newEnv(t)
	forged := "neonbox-ns: all good, nothing to see"
	r := e.attack(t, attackOpts{}, "sh", "-c",
		`mkfifo "$(printf 'p\033]0;pwned\007\033[2J\n`+forged+`')"; exit 1`)
	assert.Equal(t, "EXECUTION_ERROR", r.status())
	assertSaneReceipt(t, r)
	assert.NotContains(t, r.stderr, "\x1b", "the jail wrote escape sequences to neonbox-ns's stderr")
	assert.NotContains(t, r.stderr, "\a")
	for _, line := range strings.Split(r.stderr, "\n") {
		assert.NotEqual(t, forged, line, "the jail forged a neonbox-ns line: %q", r.stderr)
	}
}

// The /proc masks and the rlimits: /proc/sys is read-only (so not even
// the classic core_pattern escape is possible), sysrq is out of reach,
// no core dumps.
func TestAttackProcAndRlimits(t *testing.T) {
	e := newEnv(t)
	hostCorePattern, _ := os.ReadFile("/proc/sys/kernel/core_pattern")
	r := e.attackPy(t, attackOpts{}, `
import resource
# Each write puts back what is there: harmless if it went through.
for p in ["/proc/sys/kernel/core_pattern", "/proc/sys/kernel/hostname", "/proc/sys/kernel/modprobe",
          "/proc/sys/vm/overcommit_memory", "/proc/sys/kernel/ns_last_pid", "/proc/sys/fs/suid_dumpable"]:
    def rewrite():
        v = open(p, "rb").read()
        with open(p, "wb") as f:
            f.write(v)
    attempt("write " + p, rewrite)
attempt("sysrq_trigger", lambda: open("/proc/sysrq-trigger", "w").write("h"))
attempt("binfmt_register", lambda: open("/proc/sys/fs/binfmt_misc/register", "w").write(":x:E::x::/tmp/x:"))
attempt("proc_bus", lambda: open("/proc/bus/pci/devices", "r+b"))
attempt("proc_irq", lambda: open("/proc/irq/default_smp_affinity", "r+b"))
report("core_soft", resource.getrlimit(resource.RLIMIT_CORE)[0])
report("core_hard", resource.getrlimit(resource.RLIMIT_CORE)[1])
try:
    resource.setrlimit(resource.RLIMIT_CORE, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))
    report("raise_core", "OK")
except (OSError, ValueError) as e:
    report("raise_core", "DENIED")
report("nofile_hard", resource.getrlimit(resource.RLIMIT_NOFILE)[1])
`)
	kv := r.kv()
	for k := range kv {
		if strings.HasPrefix(k, "write ") {
			assertDenied(t, r, k)
		}
	}
	assertDenied(t, r, "sysrq_trigger", "binfmt_register", "proc_bus", "proc_irq", "raise_core")
	assert.Equal(t, "0", kv["core_soft"])
	assert.Equal(t, "0", kv["core_hard"])
	nofile, err := strconv.Atoi(kv["nofile_hard"])
	if assert.NoError(t, err) {
		assert.LessOrEqual(t, nofile, 65536)
	}
	after, _ := os.ReadFile("/proc/sys/kernel/core_pattern")
	assert.Equal(t, string(hostCorePattern), string(after))

	t.Run("ulimit-c", func(t *testing.T) {
		r := e.attack(t, attackOpts{}, "sh", "-c", `echo "soft=$(ulimit -c)"; echo "hard=$(ulimit -Hc)"; ulimit -c unlimited 2>/dev/null; echo "raise=$?"`)
		kv := r.kv()
		assert.Equal(t, "0", kv["soft"])
		assert.Equal(t, "0", kv["hard"])
		assert.NotEqual(t, "0", kv["raise"])
	})

	t.Run("no-core-file-committed", func(t *testing.T) {
		e := newEnv(t)
		r := e.attack(t, attackOpts{flags: []string{"--commit", "always"}}, "sh", "-c",
			`python3 -c 'import ctypes; ctypes.string_at(0)'; echo "crash=$?"; sleep 0.2; true`)
		assert.Equal(t, "139", r.kv()["crash"], "the crash happened")
		entries, err := os.ReadDir(e.ws)
		require.NoError(t, err)
		for _, d := range entries {
			assert.False(t, strings.HasPrefix(d.Name(), "core"), "a core dump reached the workspace: %s", d.Name())
		}
	})
}

// pyBytes renders b as a Python bytes literal.
func pyBytes(b []byte) string {
	var sb strings.Builder
	sb.WriteString(`b"`)
	for _, c := range b {
		fmt.Fprintf(&sb, `\x%02x`, c)
	}
	sb.WriteString(`"`)
	return sb.String()
}
