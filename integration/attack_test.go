package integration

// Containment tests: real attacks run inside the jail against the built
// binary, each checked from the host. The attack_*_test.go files group
// them: host secrets here, the filesystem in attack_fs_test.go, the
// process tree in attack_proc_test.go, exhaustion and the /proc masks in
// attack_limits_test.go. A failure here most likely means a hole in the
// sandbox: read its message before touching the test.

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// jailIDBase is the first host id of the jail's block when neonbox-ns runs
// as root (see README, "Who the jail is").
const jailIDBase = 0x70000000

// attackOpts are what an attack needs beyond e.exec: host variables for
// the neonbox-ns process, a real file as its stdin, inherited fds.
type attackOpts struct {
	flags      []string   // exec flags, after the defaults
	env        []string   // extra KEY=VALUE for the neonbox-ns process
	stdin      *os.File   // stdin of neonbox-ns; empty input if nil
	extraFiles []*os.File // inherited by neonbox-ns as fds 3, 4, ...
	// ctty, if set, becomes the controlling terminal of neonbox-ns (in
	// a new session), as in an interactive shell; it is fd 3 there, and
	// extraFiles follow it.
	ctty *os.File
}

// attackRun is one jailed attack: what neonbox-ns printed and its receipt.
type attackRun struct {
	result
	rec map[string]any
}

// out is CMD's stdout as the receipt captured it.
func (r attackRun) out() string { s, _ := r.rec["stdout"].(string); return s }

// errOut is CMD's stderr as the receipt captured it.
func (r attackRun) errOut() string { s, _ := r.rec["stderr"].(string); return s }

func (r attackRun) status() string { s, _ := r.rec["status"].(string); return s }

// kv parses the "name=value" lines the attack scripts print.
func (r attackRun) kv() map[string]string {
	m := map[string]string{}
	sc := bufio.NewScanner(strings.NewReader(r.out()))
	for sc.Scan() {
		if k, v, ok := strings.Cut(sc.Text(), "="); ok {
			m[k] = v
		}
	}
	return m
}

// attack runs argv in e's jail with --json (so the receipt holds CMD's
// output) and a 30 s safety timeout that o.flags may override.
func (e env) attack(t *testing.T, o attackOpts, argv ...string) attackRun {
	t.Helper()
	args := []string{"exec", "--workspace", e.ws, "--state-dir", e.state, "--json", "--timeout", "30s"}
	args = append(append(append(args, o.flags...), "--"), argv...)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, binary, args...)
	cmd.Dir = e.ws
	cmd.Env = append([]string{"PATH=/usr/bin:/bin", "LANG=C.UTF-8", "HOME=/root"}, o.env...)
	if o.stdin != nil {
		cmd.Stdin = o.stdin
	} else {
		cmd.Stdin = strings.NewReader("")
	}
	cmd.ExtraFiles = o.extraFiles
	if o.ctty != nil {
		cmd.ExtraFiles = append([]*os.File{o.ctty}, o.extraFiles...)
		cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 3}
	}
	r := attackRun{result: runCmd(t, cmd)}
	r.rec = decodeReceipt(t, r.stdout)
	// What the attack saw, for -v and for failures.
	t.Logf("jail: status %s, exit %d\nstdout: %s\nstderr: %s", r.status(), r.code, printable(r.out(), 3000), printable(r.errOut(), 2000))
	return r
}

// attackPy runs a Python attack script (after pyPrelude) in e's jail.
func (e env) attackPy(t *testing.T, o attackOpts, script string) attackRun {
	t.Helper()
	return e.attack(t, o, "/usr/bin/python3", "-c", pyPrelude+script)
}

// printable shortens s to at most n bytes for a log, quoted if it holds
// anything a terminal could interpret.
func printable(s string, n int) string {
	if len(s) > n {
		s = s[:n] + "..."
	}
	if !utf8.ValidString(s) || strings.ContainsFunc(s, func(r rune) bool { return r < ' ' && r != '\n' && r != '\t' }) {
		return strconv.Quote(s)
	}
	return s
}

// pyPrelude gives attack scripts raw system calls and a uniform report:
// each attempt prints "name=OK" or "name=ERRNO" (e.g. "keyctl=EPERM").
const pyPrelude = `
import ctypes, errno, os, sys
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
def en(n):
    return errno.errorcode.get(n, str(n))
def sc(nr, *args):
    conv = [a if isinstance(a, (bytes, ctypes.c_void_p)) or a is None else ctypes.c_long(a) for a in args]
    ctypes.set_errno(0)
    r = libc.syscall(ctypes.c_long(nr), *conv)
    return "OK" if r != -1 else en(ctypes.get_errno())
def report(name, value):
    print("%s=%s" % (name, value), flush=True)
def attempt(name, fn):
    try:
        fn()
        report(name, "OK")
    except OSError as e:
        report(name, en(e.errno))
`

// attackToken returns a random hex string for markers and secrets.
func attackToken(t *testing.T) string {
	t.Helper()
	b := make([]byte, 8)
	_, err := rand.Read(b)
	require.NoError(t, err)
	return hex.EncodeToString(b)
}

// outsideDir creates an empty directory next to e's workspace: what a
// jailed process must never reach.
func (e env) outsideDir(t *testing.T) string {
	t.Helper()
	d := filepath.Join(filepath.Dir(e.ws), "outside")
	require.NoError(t, os.Mkdir(d, 0o777))
	require.NoError(t, os.Chmod(d, 0o777)) // beat the umask: only the sandbox may stop a write
	return d
}

// assertEmptyDir checks that dir (on the host) holds nothing.
func assertEmptyDir(t *testing.T, dir string) {
	t.Helper()
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	assert.Empty(t, names, "%s must stay empty", dir)
}

// assertAbsent checks that nothing exists at path on the host.
func assertAbsent(t *testing.T, path string) {
	t.Helper()
	_, err := os.Lstat(path)
	assert.True(t, errors.Is(err, os.ErrNotExist), "%s must not exist on the host (lstat: %v)", path, err)
}

// sha256File hashes a host file.
func sha256File(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// denied reports whether an attempt's result is a refusal (any errno).
func denied(v string) bool { return v != "" && v != "OK" }

// assertDenied checks that every named attempt was reported and failed.
func assertDenied(t *testing.T, r attackRun, names ...string) {
	t.Helper()
	kv := r.kv()
	for _, n := range names {
		v, ok := kv[n]
		if !assert.True(t, ok, "attempt %q was not reported; stdout=%q stderr=%q", n, r.out(), r.errOut()) {
			continue
		}
		assert.True(t, denied(v), "attack %q succeeded inside the jail", n)
	}
}

// hostProcsIn lists host pids whose pid namespace is ns ("pid:[N]").
func hostProcsIn(ns string) []int {
	var pids []int
	dirs, _ := os.ReadDir("/proc")
	for _, d := range dirs {
		pid, err := strconv.Atoi(d.Name())
		if err != nil {
			continue
		}
		if l, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/pid", pid)); err == nil && l == ns {
			pids = append(pids, pid)
		}
	}
	return pids
}

// hostProcs lists host processes (not this one) for which match, given
// the command line and the real uid, holds.
func hostProcs(match func(cmdline []byte, uid int) bool) []string {
	var out []string
	dirs, _ := os.ReadDir("/proc")
	for _, d := range dirs {
		pid, err := strconv.Atoi(d.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		cmdline, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		status, _ := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
		uid := -1
		for _, line := range strings.Split(string(status), "\n") {
			if f := strings.Fields(line); len(f) > 1 && f[0] == "Uid:" {
				uid, _ = strconv.Atoi(f[1])
			}
		}
		if match(cmdline, uid) {
			ns, _ := os.Readlink(fmt.Sprintf("/proc/%d/ns/pid", pid))
			out = append(out, fmt.Sprintf("pid %d uid %d %s: %s", pid, uid, ns, printable(string(bytes.ReplaceAll(cmdline, []byte{0}, []byte{' '})), 120)))
		}
	}
	return out
}

// hostProcsWithMarker lists host processes whose command line holds marker.
func hostProcsWithMarker(marker string) []string {
	return hostProcs(func(cmdline []byte, _ int) bool { return bytes.Contains(cmdline, []byte(marker)) })
}

// hostJailUIDProcs lists host processes running with a jail uid.
func hostJailUIDProcs() []string {
	return hostProcs(func(_ []byte, uid int) bool { return uid >= jailIDBase })
}

// Reading host secrets: everything the jail could read that belongs to
// the host or the caller.
func TestAttackReadHostSecrets(t *testing.T) {
	t.Run("etc-shadow-masked", func(t *testing.T) {
		if st, err := os.Stat("/etc/shadow"); err != nil || st.Size() == 0 {
			t.Skip("no non-empty /etc/shadow on this host")
		}
		e := newEnv(t)
		r := e.attack(t, attackOpts{}, "sh", "-c", `for f in /etc/shadow /etc/gshadow /etc/shadow- /etc/ssh/ssh_host_*_key; do [ -e "$f" ] && cat "$f"; done; true`)
		require.Equal(t, "SUCCESS", r.status(), r.stdout)
		assert.Empty(t, r.out(), "the jail read a shadow file or host key")
	})

	t.Run("root-0600-file-in-bound-dir", func(t *testing.T) {
		dir := "/usr/local/share"
		if st, err := os.Stat(dir); err != nil || !st.IsDir() {
			t.Skip(dir + " is missing")
		}
		e := newEnv(t)
		secret := "neonbox-secret-" + attackToken(t)
		path := filepath.Join(dir, "neonbox-attack-"+attackToken(t))
		require.NoError(t, os.WriteFile(path, []byte(secret+"\n"), 0o600))
		t.Cleanup(func() { os.Remove(path) })
		r := e.attackPy(t, attackOpts{}, fmt.Sprintf(`
p = %q
def read():
    sys.stdout.write(open(p).read())
attempt("read", read)
attempt("chmod", lambda: os.chmod(p, 0o644))
attempt("chown", lambda: os.chown(p, 0, 0))
attempt("open_path_then_proc", lambda: open("/proc/self/fd/%%d" %% os.open(p, os.O_PATH)).read())
`, path))
		assertDenied(t, r, "read", "chmod", "chown", "open_path_then_proc")
		assert.NotContains(t, r.out(), secret)
		assert.NotContains(t, r.stdout, secret, "the secret must not reach the receipt either")
		st, err := os.Stat(path)
		require.NoError(t, err)
		assert.Equal(t, os.FileMode(0o600), st.Mode().Perm(), "the host file's mode is untouched")
	})

	t.Run("host-environment", func(t *testing.T) {
		e := newEnv(t)
		secret, plain := "s3cr3t-"+attackToken(t), "plain-"+attackToken(t)
		o := attackOpts{env: []string{"NEONBOX_ATTACK_SECRET=" + secret, "HARMLESS_LOOKING=" + plain}}
		r := e.attackPy(t, o, `
import glob
print("env:", dict(os.environ))
for p in glob.glob("/proc/[0-9]*/environ") + glob.glob("/proc/[0-9]*/cmdline") + glob.glob("/proc/[0-9]*/task/*/environ"):
    try:
        print(p, open(p, "rb").read())
    except OSError as e:
        print(p, en(e.errno))
for p in glob.glob("/proc/[0-9]*/exe"):
    try:
        report(p, os.readlink(p))
    except OSError as e:
        report(p, en(e.errno))
`)
		require.Equal(t, "SUCCESS", r.status(), r.stdout)
		assert.Contains(t, r.out(), "/proc/1/environ", "the scan ran")
		for _, v := range []string{secret, plain} {
			assert.NotContains(t, r.out(), v, "a host variable reached the jail")
			assert.NotContains(t, r.stdout, v, "a host variable's value reached the receipt")
		}
		// The jail's pid 1 is CMD: neonbox-ns and its init are not
		// in its pid namespace.
		for name, exe := range r.kv() {
			assert.NotContains(t, exe, "neonbox", "%s: neonbox-ns or its init is visible from the jail", name)
		}
		assert.Contains(t, r.rec["scrubbed_env"], "NEONBOX_ATTACK_SECRET")
		assert.Contains(t, r.rec["scrubbed_env"], "HARMLESS_LOOKING")
	})

	t.Run("kernel-memory-and-masked-proc", func(t *testing.T) {
		e := newEnv(t)
		r := e.attackPy(t, attackOpts{}, `
for p in ["/proc/kcore", "/proc/keys", "/proc/timer_list", "/proc/sched_debug", "/proc/interrupts", "/proc/latency_stats", "/proc/timer_stats"]:
    try:
        with open(p, "rb") as f:
            report(p, "OK" if f.read(64) else "EMPTY")
    except OSError as e:
        report(p, en(e.errno))
for d in ["/proc/acpi", "/proc/scsi", "/proc/asound"]:
    try:
        report(d, "OK" if os.listdir(d) else "EMPTY")
    except OSError as e:
        report(d, en(e.errno))
`)
		kv := r.kv()
		require.NotEmpty(t, kv, r.stdout)
		for name, v := range kv {
			assert.NotEqual(t, "OK", v, "%s is readable in the jail", name)
		}
	})

	t.Run("sys-absent", func(t *testing.T) {
		e := newEnv(t)
		r := e.attackPy(t, attackOpts{}, fmt.Sprintf(`
attempt("stat_sys", lambda: os.stat("/sys"))
attempt("list_firmware", lambda: os.listdir("/sys/firmware"))
attempt("read_dmi", lambda: open("/sys/class/dmi/id/product_uuid").read())
os.makedirs("/tmp/sys", exist_ok=True)
report("mount_sysfs", sc(%d, b"sysfs", b"/tmp/sys", b"sysfs", 0, None))
attempt("list_mounted", lambda: os.listdir("/tmp/sys/firmware"))
`, unix.SYS_MOUNT))
		assertDenied(t, r, "stat_sys", "list_firmware", "read_dmi", "mount_sysfs", "list_mounted")
	})

	t.Run("kernel-keyrings", func(t *testing.T) {
		e := newEnv(t)
		const (
			keyctlGetKeyringID = 0
			keyctlJoin         = 1
			keyctlRead         = 11
			keySpecSession     = -3
			keySpecUser        = -4
		)
		r := e.attackPy(t, attackOpts{}, fmt.Sprintf(`
report("keyctl_session", sc(%[1]d, %[4]d, %[6]d, 0))
report("keyctl_user", sc(%[1]d, %[4]d, %[7]d, 0))
report("keyctl_join", sc(%[1]d, %[5]d, b"neonbox-attack"))
report("keyctl_read", sc(%[1]d, %[8]d, %[7]d, None, 0))
report("add_key", sc(%[2]d, b"user", b"neonbox", b"payload", 7, %[6]d))
report("request_key", sc(%[3]d, b"user", b"neonbox", None, 0))
attempt("proc_keys", lambda: report("proc_keys_content", repr(open("/proc/keys").read())))
`, unix.SYS_KEYCTL, unix.SYS_ADD_KEY, unix.SYS_REQUEST_KEY, keyctlGetKeyringID, keyctlJoin, keySpecSession, keySpecUser, keyctlRead))
		assertDenied(t, r, "keyctl_session", "keyctl_user", "keyctl_join", "keyctl_read", "add_key", "request_key")
		if v, ok := r.kv()["proc_keys_content"]; ok {
			assert.Equal(t, "''", v, "/proc/keys lists keys")
		}
	})

	t.Run("host-only-directories-invisible", func(t *testing.T) {
		e := newEnv(t)
		marker := filepath.Join(filepath.Dir(e.ws), "host-only-"+attackToken(t))
		require.NoError(t, os.WriteFile(marker, []byte("x"), 0o644))
		r := e.attackPy(t, attackOpts{}, fmt.Sprintf(`
for d in ["/root", "/home", "/var", "/run", "/mnt", "/opt", "/srv", "/boot", "/media", "/work"]:
    try:
        report(d, "LISTED" if os.listdir(d) else "EMPTY")
    except OSError as e:
        report(d, en(e.errno))
attempt("sibling_of_workspace", lambda: os.stat(%q))
`, marker))
		for name, v := range r.kv() {
			assert.NotEqual(t, "LISTED", v, "%s shows host content in the jail", name)
		}
		assertDenied(t, r, "sibling_of_workspace")
	})
}
