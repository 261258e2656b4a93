package nsjail_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/neonbox/neonbox-ns/nsjail"
)

func TestJailSeesOnlyItsOwnProcesses(t *testing.T) {
	e := newJailEnv(t)
	r, out, _ := e.run(t, nil, "python3", "-c",
		"import os; print(sorted(int(p) for p in os.listdir('/proc') if p.isdigit()), os.getpid())")
	require.Equal(t, nsjail.StatusSuccess, r.Status, r.Error)
	assert.Equal(t, "[1] 1\n", out, "the jail's command is pid 1 and alone")
}

func TestJailHasOnlyLoopback(t *testing.T) {
	e := newJailEnv(t)
	r, out, _ := e.run(t, nil, "python3", "-c",
		"import socket; print(socket.if_nameindex()); s=socket.socket(); s.bind(('127.0.0.1',0)); s.listen(); c=socket.create_connection(s.getsockname()); print('lo ok')")
	require.Equal(t, nsjail.StatusSuccess, r.Status, r.Error)
	assert.Equal(t, "[(1, 'lo')]\nlo ok\n", out)
}

func TestJailHostnameAndIdentity(t *testing.T) {
	e := newJailEnv(t)
	r, out, _ := e.run(t, nil, "sh", "-c", "hostname; id -u; cat /proc/self/uid_map; grep -E '^(CapInh|CapPrm|CapEff|CapBnd|CapAmb|NoNewPrivs)' /proc/self/status")
	require.Equal(t, nsjail.StatusSuccess, r.Status, r.Error)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	require.Len(t, lines, 9, out)
	assert.Equal(t, "neonbox", lines[0])
	assert.Equal(t, "0", lines[1])
	assert.Equal(t, []string{"0", "1879048192", "65536"}, strings.Fields(lines[2]), "jail root is an unprivileged host id")
	for _, l := range lines[3:8] {
		assert.Regexp(t, `^Cap\w+:\s+0+$`, l, "no capabilities in any set")
	}
	assert.Regexp(t, `^NoNewPrivs:\s+1$`, lines[8])
}

func TestJailCannotMount(t *testing.T) {
	e := newJailEnv(t)
	r, _, errOut := e.run(t, nil, "mount", "-t", "tmpfs", "none", "/tmp")
	assert.Equal(t, nsjail.StatusExecutionError, r.Status)
	assert.NotZero(t, r.ExitCode, errOut)
	r, _, _ = e.run(t, nil, "unshare", "-Urm", "true")
	assert.Equal(t, nsjail.StatusExecutionError, r.Status, "no new user namespace to regain capabilities in")
}

func TestJailWritesOnlyWorkspaceAndTmp(t *testing.T) {
	e := newJailEnv(t)
	script := `for d in / /etc /usr /usr/local /home /root /var /run /dev /proc /lib; do
  if (echo x > "$d/neonbox-probe") 2>/dev/null; then echo "wrote $d"; fi
done
echo ok > /tmp/probe && echo tmp-ok
echo ok > /dev/shm/probe && echo shm-ok
echo ok > probe && echo ws-ok`
	r, out, _ := e.run(t, nil, "sh", "-c", script)
	require.Equal(t, nsjail.StatusSuccess, r.Status, r.Error)
	assert.Equal(t, "tmp-ok\nshm-ok\nws-ok\n", out)
	_, err := os.Stat("/neonbox-probe")
	assert.True(t, os.IsNotExist(err))
}

func TestJailCannotReadRootOnlyHostFiles(t *testing.T) {
	e := newJailEnv(t)
	secret := filepath.Join("/usr/local/share", "neonbox-test-secret-"+filepath.Base(e.ws)+"-"+strings.ReplaceAll(t.Name(), "/", "_"))
	writeFile(t, secret, "top secret\n", 0o600)
	t.Cleanup(func() { os.Remove(secret) })
	r, out, errOut := e.run(t, nil, "sh", "-c", "cat "+secret+"; cat /etc/shadow; echo done")
	require.Equal(t, nsjail.StatusSuccess, r.Status, r.Error)
	assert.Equal(t, "done\n", out)
	assert.Contains(t, errOut, "Permission denied")
	assert.NotContains(t, out+errOut, "top secret")
}

func TestJailEnvironmentIsScrubbed(t *testing.T) {
	e := newJailEnv(t)
	r, out, _ := e.run(t, func(o *nsjail.Options) {
		o.HostEnv = []string{"PATH=/usr/bin:/bin", "GITHUB_TOKEN=ghp_secret", "EDITOR=vi", "CI=true"}
		o.Env = nsjail.EnvSpec{Set: []string{"GREETING=hi"}, Keep: []string{"CI"}}
	}, "env")
	require.Equal(t, nsjail.StatusSuccess, r.Status, r.Error)
	assert.NotContains(t, out, "ghp_secret")
	assert.NotContains(t, out, "EDITOR")
	assert.Contains(t, out, "GREETING=hi\n")
	assert.Contains(t, out, "CI=true\n")
	assert.Contains(t, out, "HOME=/tmp/home\n")
	assert.Equal(t, []string{"EDITOR", "GITHUB_TOKEN"}, r.ScrubbedEnv)
}

func TestJailStartsInMatchingSubdirectory(t *testing.T) {
	e := newJailEnv(t)
	sub := filepath.Join(e.ws, "a", "b")
	require.NoError(t, os.MkdirAll(sub, 0o755))
	r, out, _ := e.run(t, func(o *nsjail.Options) { o.Cwd = sub }, "pwd")
	require.Equal(t, nsjail.StatusSuccess, r.Status, r.Error)
	assert.Equal(t, sub+"\n", out)
	r, out, _ = e.run(t, func(o *nsjail.Options) { o.Cwd = "/" }, "pwd")
	require.Equal(t, nsjail.StatusSuccess, r.Status, r.Error)
	assert.Equal(t, e.ws+"\n", out)
}

func TestCommandNotFound(t *testing.T) {
	e := newJailEnv(t)
	r, _, _ := e.run(t, nil, "no-such-command-neonbox")
	assert.Equal(t, nsjail.StatusExecutionError, r.Status)
	assert.Equal(t, 127, r.ExitCode)
	require.NotNil(t, r.Error)
	assert.Equal(t, "exec", r.Error.Stage)
}

func TestExitStatusAndSignal(t *testing.T) {
	e := newJailEnv(t)
	r, _, _ := e.run(t, nil, "sh", "-c", "exit 7")
	assert.Equal(t, nsjail.StatusExecutionError, r.Status)
	assert.Equal(t, 7, r.ExitCode)
	assert.Nil(t, r.Signal)

	// A real fault: pid 1 of a namespace ignores signals sent from inside
	// it that it has no handler for, but not a fault.
	r, _, _ = e.run(t, nil, "python3", "-c", "import ctypes; ctypes.string_at(0)")
	assert.Equal(t, nsjail.StatusExecutionError, r.Status)
	require.NotNil(t, r.Signal)
	assert.Equal(t, "SIGSEGV", *r.Signal)
	assert.Equal(t, 128+11, r.ExitCode)
}

func TestProcIsMaskedAndLimited(t *testing.T) {
	e := newJailEnv(t)
	script := `echo kcore=$(cat /proc/kcore | wc -c) keys=$(cat /proc/keys | wc -c) acpi=$(ls /proc/acpi 2>/dev/null | wc -l)
(echo 1 > /proc/sys/kernel/ns_last_pid) 2>/dev/null && echo sys-writable
(echo h > /proc/sysrq-trigger) 2>/dev/null && echo sysrq-writable
echo core=$(ulimit -c) nofile=$(ulimit -Hn)`
	r, out, errOut := e.run(t, nil, "sh", "-c", script)
	require.Equal(t, nsjail.StatusSuccess, r.Status, "%v %s", r.Error, errOut)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	require.Len(t, lines, 2, out)
	assert.Equal(t, "kcore=0 keys=0 acpi=0", lines[0])
	var nofile int
	_, err := fmt.Sscanf(lines[1], "core=0 nofile=%d", &nofile)
	require.NoError(t, err, lines[1])
	assert.LessOrEqual(t, nofile, 65536)

	// The masks are mounts over procfs: check them directly, since the
	// jail's ids could not read most of these files anyway.
	r, out, _ = e.run(t, nil, "cat", "/proc/self/mountinfo")
	require.Equal(t, nsjail.StatusSuccess, r.Status, r.Error)
	mounts := map[string]string{}
	for _, l := range strings.Split(out, "\n") {
		if f := strings.Fields(l); len(f) > 5 {
			mounts[f[4]] = f[5]
		}
	}
	for _, p := range []string{"/proc/kcore", "/proc/keys", "/proc/timer_list", "/proc/sys", "/proc/sysrq-trigger", "/proc/irq", "/proc/bus"} {
		if _, err := os.Lstat(p); err != nil {
			continue // this kernel has no such file
		}
		opts, ok := mounts[p]
		if assert.True(t, ok, "%s is not covered", p) {
			assert.Contains(t, strings.Split(opts, ","), "ro", p)
		}
	}
}
