package nsjail_test

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/neonbox/neonbox-ns/internal/testutil"
	"github.com/neonbox/neonbox-ns/nsjail"
	"github.com/neonbox/neonbox-ns/policies"
)

func withPolicy(t *testing.T, name string, edit func(*policies.Policy)) func(*nsjail.Options) {
	p, err := policies.Builtin(name)
	require.NoError(t, err)
	if edit != nil {
		edit(p)
	}
	return func(o *nsjail.Options) { o.Policy = p }
}

func TestReadonlyPolicy(t *testing.T) {
	e := newJailEnv(t)
	makeFixture(t, e.ws)
	before := testutil.Snapshot(t, e.ws)
	r, out, errOut := e.run(t, withPolicy(t, "readonly", nil), "sh", "-c", "cat f.txt; echo x > new.txt; echo y >> f.txt; rm dir/a.txt; true")
	require.Equal(t, nsjail.StatusSuccess, r.Status, r.Error)
	assert.Equal(t, "hello\n", out)
	assert.Contains(t, errOut, "Read-only file system")
	assert.False(t, r.FilesystemModified)
	assert.False(t, r.Committed)
	assert.Equal(t, "readonly", r.Policy.Name)
	assert.Equal(t, before, testutil.Snapshot(t, e.ws))
}

func TestNoSubprocess(t *testing.T) {
	e := newJailEnv(t)
	deny := withPolicy(t, "default", func(p *policies.Policy) { p.Deny(policies.Subprocess) })
	r, _, errOut := e.run(t, deny, "sh", "-c", "true | true")
	assert.Equal(t, nsjail.StatusExecutionError, r.Status, errOut)
	r, _, _ = e.run(t, deny, "sh", "-c", "/bin/true; echo after")
	assert.NotEqual(t, nsjail.StatusSuccess, r.Status, "even a plain command needs a fork from the shell")
	r, out, errOut := e.run(t, deny, py, "-c",
		"import threading; ts=[threading.Thread(target=lambda: None) for _ in range(4)]; [t.start() for t in ts]; [t.join() for t in ts]; print('threads ok')")
	require.Equal(t, nsjail.StatusSuccess, r.Status, errOut)
	assert.Equal(t, "threads ok\n", out, "threads are not processes")
	r, _, _ = e.run(t, withPolicy(t, "default", nil), "sh", "-c", "true | true")
	assert.Equal(t, nsjail.StatusSuccess, r.Status, "the default policy allows subprocesses")
}

func TestNetworkCapability(t *testing.T) {
	e := newJailEnv(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			fmt.Fprintln(c, "hello from the host")
			c.Close()
		}
	}()
	port := ln.Addr().(*net.TCPAddr).Port
	script := fmt.Sprintf("import socket\ntry:\n    print(socket.create_connection(('127.0.0.1', %d), timeout=2).recv(100).decode().strip())\nexcept OSError as e:\n    print('refused', e.errno)", port)

	r, out, _ := e.run(t, withPolicy(t, "network", nil), py, "-c", script)
	require.Equal(t, nsjail.StatusSuccess, r.Status, r.Error)
	assert.Equal(t, "hello from the host\n", out)

	r, out, _ = e.run(t, withPolicy(t, "default", nil), py, "-c", script)
	require.Equal(t, nsjail.StatusSuccess, r.Status, r.Error)
	assert.Equal(t, "refused 111\n", out, "the default jail has its own loopback")
}

func TestCommitGate(t *testing.T) {
	e := newJailEnv(t)
	writeFile(t, filepath.Join(e.ws, ".git/config"), "[core]\n", 0o644)
	require.NoError(t, os.MkdirAll(filepath.Join(e.ws, ".git/hooks"), 0o755))
	before := testutil.Snapshot(t, e.ws)
	r, _, _ := e.run(t, nil, "sh", "-c", "echo ok > fine.txt; echo 'curl evil' > .git/hooks/pre-commit; chmod +x .git/hooks/pre-commit")
	assert.Equal(t, nsjail.StatusSecurityViolation, r.Status)
	assert.Equal(t, []string{".git/hooks/pre-commit"}, r.ProtectedPathsTouched)
	assert.False(t, r.Committed)
	assert.True(t, r.RollbackPerformed)
	assert.Equal(t, before, testutil.Snapshot(t, e.ws))

	r, _, _ = e.run(t, func(o *nsjail.Options) { o.Protect = []string{"*.env"} }, "sh", "-c", "echo SECRET=1 > prod.env")
	assert.Equal(t, nsjail.StatusSecurityViolation, r.Status)
	assert.Equal(t, []string{"prod.env"}, r.ProtectedPathsTouched)

	r, _, _ = e.run(t, nil, "sh", "-c", "echo ok > fine.txt; cat .git/config")
	assert.Equal(t, nsjail.StatusSuccess, r.Status, "reading protected paths is fine")
	assert.True(t, r.Committed)
}

func TestPolicyBinds(t *testing.T) {
	e := newJailEnv(t)
	extra := testutil.WorldTraversableTempDir(t)
	writeFile(t, filepath.Join(extra, "tool.txt"), "tool\n", 0o644)
	bind := withPolicy(t, "default", func(p *policies.Policy) { p.Binds = &policies.Binds{ReadOnly: []string{extra}} })
	r, out, errOut := e.run(t, bind, "sh", "-c", "cat "+extra+"/tool.txt; echo x > "+extra+"/w")
	require.Equal(t, nsjail.StatusExecutionError, r.Status)
	assert.Equal(t, "tool\n", out)
	assert.Contains(t, errOut, "Read-only file system")
}

func TestStrictPolicy(t *testing.T) {
	e := newJailEnv(t)
	requireCgroups(t)
	makeFixture(t, e.ws)
	before := testutil.Snapshot(t, e.ws)
	strict := withPolicy(t, "strict", nil)
	r, _, errOut := e.run(t, strict, "sh", "-c", "true | true")
	assert.Equal(t, nsjail.StatusExecutionError, r.Status, "no subprocess: %s", errOut)
	r, out, _ := e.run(t, strict, py, "-c", "print(open('f.txt').read().strip()); open('x', 'w')")
	assert.Equal(t, nsjail.StatusExecutionError, r.Status)
	assert.Equal(t, "hello\n", out, "reading works, writing does not")
	assert.Equal(t, int64(268435456), r.Limits.MemoryBytes)
	assert.Equal(t, int64(16), r.Limits.Pids)
	assert.InDelta(t, 0.5, r.Limits.CPUs, 0.001)
	assert.Equal(t, int64(30000), r.Limits.TimeoutMS)
	assert.Equal(t, before, testutil.Snapshot(t, e.ws))
}
