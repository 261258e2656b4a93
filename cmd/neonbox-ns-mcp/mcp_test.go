package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/neonbox/neonbox-ns/internal/testutil"
	"github.com/neonbox/neonbox-ns/nsjail"
	"github.com/neonbox/neonbox-ns/policies"
)

// mcpEnv is a workspace and a state dir for one test.
type mcpEnv struct {
	ws, state string
}

func newMCPEnv(t *testing.T) mcpEnv {
	t.Helper()
	testutil.RequireRoot(t)
	testutil.RequireUserNS(t)
	base := testutil.WorldTraversableTempDir(t)
	e := mcpEnv{ws: filepath.Join(base, "ws"), state: filepath.Join(base, "state")}
	require.NoError(t, os.Mkdir(e.ws, 0o755))
	ws, err := resolveWorkspace(e.ws)
	require.NoError(t, err)
	e.ws = ws
	return e
}

// requireClean checks that no run directory and no mount is left below
// the state dir.
func (e mcpEnv) requireClean(t *testing.T) {
	t.Helper()
	entries, err := os.ReadDir(filepath.Join(e.state, "runs"))
	if !os.IsNotExist(err) {
		require.NoError(t, err)
		require.Empty(t, entries, "run directories left behind")
	}
	mi, err := os.ReadFile("/proc/self/mountinfo")
	require.NoError(t, err)
	require.NotContains(t, string(mi), e.state, "mounts left behind")
}

var mcpToolNames = []string{"commit", "diff", "discard", "exec", "status", "undo"}

func listToolNames(ctx context.Context, t *testing.T, cs *mcp.ClientSession) []string {
	t.Helper()
	var names []string
	for tool, err := range cs.Tools(ctx, nil) {
		require.NoError(t, err)
		names = append(names, tool.Name)
		require.NotNil(t, tool.InputSchema, tool.Name)
	}
	slices.Sort(names)
	return names
}

// callTool calls a tool that must succeed and decodes its structured
// result into out.
func callTool(ctx context.Context, t *testing.T, cs *mcp.ClientSession, name string, args, out any) {
	t.Helper()
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: name, Arguments: args})
	require.NoError(t, err, name)
	require.False(t, res.IsError, "%s: tool error: %s", name, resultText(res))
	b, err := json.Marshal(res.StructuredContent)
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(b, out), "%s: %s", name, b)
}

// callToolError calls a tool that must fail and returns its message.
func callToolError(ctx context.Context, t *testing.T, cs *mcp.ClientSession, name string, args any) string {
	t.Helper()
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: name, Arguments: args})
	require.NoError(t, err, "%s: a tool error, not a protocol error", name)
	require.True(t, res.IsError, "%s: want a tool error, got %s", name, resultText(res))
	return resultText(res)
}

func resultText(res *mcp.CallToolResult) string {
	var parts []string
	for _, c := range res.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			parts = append(parts, tc.Text)
		}
	}
	return strings.Join(parts, "\n")
}

func fileContent(t *testing.T, p string) string {
	t.Helper()
	b, err := os.ReadFile(p)
	require.NoError(t, err)
	return string(b)
}

// The tools over the SDK's in-memory transport, against a server in this
// process: a committed run, a held run diffed, committed and undone,
// failures as receipts, bad ids and arguments as tool errors.
func TestMCPInProcess(t *testing.T) {
	e := newMCPEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	pol, err := policies.Load("default")
	require.NoError(t, err)
	server, svc, err := newMCPServer(ctx, mcpConfig{Workspace: e.ws, StateDir: e.state, Policy: pol})
	require.NoError(t, err)
	serverT, clientT := mcp.NewInMemoryTransports()
	ss, err := server.Connect(ctx, serverT, nil)
	require.NoError(t, err)
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "v0"}, nil).Connect(ctx, clientT, nil)
	require.NoError(t, err)
	defer func() {
		require.NoError(t, cs.Close())
		_ = ss.Wait()
		require.NoError(t, svc.Close())
		e.requireClean(t)
	}()
	require.Equal(t, "neonbox-ns", cs.InitializeResult().ServerInfo.Name)
	require.Equal(t, mcpToolNames, listToolNames(ctx, t, cs))

	// A run through the pool, committed.
	var r nsjail.Receipt
	callTool(ctx, t, cs, "exec", map[string]any{"shell": "echo hi > f.txt; echo out"}, &r)
	require.Equal(t, nsjail.StatusSuccess, r.Status, "%+v", r.Error)
	require.NotNil(t, r.Stdout)
	assert.Equal(t, "out\n", *r.Stdout)
	assert.True(t, r.Committed)
	assert.False(t, r.Held)
	assert.Equal(t, "hi\n", fileContent(t, filepath.Join(e.ws, "f.txt")))

	// argv, not a shell.
	callTool(ctx, t, cs, "exec", map[string]any{"command": []string{"cat", "f.txt"}}, &r)
	require.Equal(t, nsjail.StatusSuccess, r.Status)
	assert.Equal(t, "hi\n", *r.Stdout)

	// A failing command is a receipt, and its changes are rolled back.
	callTool(ctx, t, cs, "exec", map[string]any{"shell": "echo bad > f.txt; echo oops >&2; exit 3"}, &r)
	assert.Equal(t, nsjail.StatusExecutionError, r.Status)
	assert.Equal(t, 3, r.ExitCode)
	assert.Equal(t, "oops\n", *r.Stderr)
	assert.False(t, r.Committed)
	assert.True(t, r.RollbackPerformed)
	assert.Equal(t, "hi\n", fileContent(t, filepath.Join(e.ws, "f.txt")))

	// A command that cannot be run is a receipt too.
	callTool(ctx, t, cs, "exec", map[string]any{"command": []string{"/no/such/command"}}, &r)
	assert.Equal(t, nsjail.StatusExecutionError, r.Status)
	assert.Equal(t, 127, r.ExitCode)
	require.NotNil(t, r.Error)

	// Other capabilities than the pool's: a run of its own, read-only.
	callTool(ctx, t, cs, "exec", map[string]any{"shell": "echo x > g.txt", "deny": []string{"fs-write"}}, &r)
	assert.Equal(t, nsjail.StatusExecutionError, r.Status)
	assert.Equal(t, []string{"subprocess"}, r.Policy.Capabilities)
	assert.NoFileExists(t, filepath.Join(e.ws, "g.txt"))

	// A timeout.
	callTool(ctx, t, cs, "exec", map[string]any{"command": []string{"sleep", "10"}, "timeout": "200ms"}, &r)
	assert.Equal(t, nsjail.StatusTimeout, r.Status)

	// Held, diffed, committed, undone.
	callTool(ctx, t, cs, "exec", map[string]any{"shell": "echo there >> f.txt; echo new > n.txt", "hold": true}, &r)
	require.Equal(t, nsjail.StatusSuccess, r.Status, "%+v", r.Error)
	require.True(t, r.Held)
	require.False(t, r.Committed)
	id := r.ID
	assert.Equal(t, "hi\n", fileContent(t, filepath.Join(e.ws, "f.txt")), "held, not committed")

	var st statusOutput
	callTool(ctx, t, cs, "status", map[string]any{}, &st)
	require.Len(t, st.Held, 1)
	assert.Equal(t, id, st.Held[0].ID)

	var d diffOutput
	callTool(ctx, t, cs, "diff", map[string]any{"run_id": id}, &d)
	require.NotNil(t, d.Changes)
	require.Len(t, d.Changes.Added, 1)
	assert.Equal(t, "n.txt", d.Changes.Added[0].Path)
	require.NotNil(t, d.Changes.Added[0].Size)
	assert.EqualValues(t, 4, *d.Changes.Added[0].Size)
	require.Len(t, d.Changes.Modified, 1)
	assert.Equal(t, "f.txt", d.Changes.Modified[0].Path)
	callTool(ctx, t, cs, "diff", map[string]any{"run_id": id, "patch": true}, &d)
	assert.Contains(t, d.Patch, "+there\n")
	assert.Contains(t, d.Patch, "+++ b/n.txt")

	var c nsjail.CommitResult
	callTool(ctx, t, cs, "commit", map[string]any{"run_id": id}, &c)
	assert.Equal(t, id, c.ID)
	assert.Len(t, c.Changes.Added, 1)
	assert.Equal(t, "hi\nthere\n", fileContent(t, filepath.Join(e.ws, "f.txt")))
	assert.Equal(t, "new\n", fileContent(t, filepath.Join(e.ws, "n.txt")))

	var u nsjail.UndoResult
	callTool(ctx, t, cs, "undo", map[string]any{}, &u)
	assert.Equal(t, id, u.RunID)
	assert.Equal(t, "hi\n", fileContent(t, filepath.Join(e.ws, "f.txt")))
	assert.NoFileExists(t, filepath.Join(e.ws, "n.txt"))

	// A held run that conflicts with the workspace, then discarded.
	callTool(ctx, t, cs, "exec", map[string]any{"shell": "echo mine > f.txt", "hold": true}, &r)
	require.True(t, r.Held)
	require.NoError(t, os.WriteFile(filepath.Join(e.ws, "f.txt"), []byte("theirs\n"), 0o644))
	msg := callToolError(ctx, t, cs, "commit", map[string]any{"run_id": r.ID})
	assert.Contains(t, msg, "conflict, nothing applied")
	assert.Contains(t, msg, "f.txt")
	var dis discardOutput
	callTool(ctx, t, cs, "discard", map[string]any{"run_id": r.ID}, &dis)
	assert.True(t, dis.Discarded)
	assert.Equal(t, "theirs\n", fileContent(t, filepath.Join(e.ws, "f.txt")))

	// A commit whose file changed since cannot be undone.
	callTool(ctx, t, cs, "exec", map[string]any{"shell": "echo u > u.txt", "hold": true}, &r)
	require.True(t, r.Held)
	callTool(ctx, t, cs, "commit", map[string]any{"run_id": r.ID}, &c)
	require.NoError(t, os.WriteFile(filepath.Join(e.ws, "u.txt"), []byte("edited\n"), 0o644))
	msg = callToolError(ctx, t, cs, "undo", map[string]any{})
	assert.Contains(t, msg, "neonbox-ns undo: refused, these paths changed since the commit: u.txt")
	assert.Equal(t, "edited\n", fileContent(t, filepath.Join(e.ws, "u.txt")))

	callTool(ctx, t, cs, "status", map[string]any{}, &st)
	assert.Empty(t, st.Held)
	assert.Equal(t, e.ws, st.Workspace)
	assert.Equal(t, "default", st.Policy.Name)
	assert.Equal(t, []string{"fs-write", "subprocess"}, st.Policy.Capabilities)
	assert.True(t, st.Healthy, "%+v", st.Doctor)
	assert.NotEmpty(t, st.Doctor)

	// Tool errors, with the CLI's messages.
	msg = callToolError(ctx, t, cs, "diff", map[string]any{"run_id": "0123456789abcdef"})
	assert.Contains(t, msg, "no such held run")
	msg = callToolError(ctx, t, cs, "commit", map[string]any{"run_id": "../../etc"})
	assert.Contains(t, msg, "is not a run id")
	msg = callToolError(ctx, t, cs, "exec", map[string]any{"shell": "true", "allow": []string{"root"}})
	assert.Contains(t, msg, `allow "root": want fs-write, subprocess or network`)
	msg = callToolError(ctx, t, cs, "exec", map[string]any{"shell": "true", "command": []string{"true"}})
	assert.Contains(t, msg, "not both")
	msg = callToolError(ctx, t, cs, "exec", map[string]any{})
	assert.Contains(t, msg, "no command")
	msg = callToolError(ctx, t, cs, "exec", map[string]any{"shell": "true", "timeout": "soon"})
	assert.Contains(t, msg, "timeout")
	callToolError(ctx, t, cs, "diff", map[string]any{})
}

// recorder keeps everything read through it.
type recorder struct {
	r  io.ReadCloser
	mu sync.Mutex
	b  bytes.Buffer
}

func (r *recorder) Read(p []byte) (int, error) {
	n, err := r.r.Read(p)
	r.mu.Lock()
	r.b.Write(p[:n])
	r.mu.Unlock()
	return n, err
}

func (r *recorder) Close() error { return r.r.Close() }

// The built binary over real pipes: every line it writes on stdout is
// JSON-RPC, its runs reach the workspace, and it exits 0 when its stdin
// closes, leaving nothing behind.
func TestMCPStdio(t *testing.T) {
	e := newMCPEnv(t)
	// Both binaries, side by side as make build leaves them: the test
	// goes through "neonbox-ns mcp".
	dir := t.TempDir()
	bin := filepath.Join(dir, "neonbox-ns")
	out, err := exec.Command("go", "build", "-o", bin, "../neonbox-ns").CombinedOutput()
	require.NoError(t, err, "go build: %s", out)
	out, err = exec.Command("go", "build", "-o", filepath.Join(dir, "neonbox-ns-mcp"), ".").CombinedOutput()
	require.NoError(t, err, "go build: %s", out)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	cmd := exec.CommandContext(ctx, bin, "mcp", "--workspace", e.ws, "--state-dir", e.state)
	cmd.Env = []string{"PATH=/usr/bin:/bin", "LANG=C.UTF-8", "HOME=/root"}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	stdin, err := cmd.StdinPipe()
	require.NoError(t, err)
	stdoutPipe, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	stdout := &recorder{r: stdoutPipe}
	defer func() {
		if t.Failed() {
			t.Logf("server stderr:\n%s", stderr.String())
		}
	}()

	cs, err := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "v0"}, nil).
		Connect(ctx, &mcp.IOTransport{Reader: stdout, Writer: stdin}, nil)
	require.NoError(t, err)
	require.Equal(t, mcpToolNames, listToolNames(ctx, t, cs))

	var r nsjail.Receipt
	callTool(ctx, t, cs, "exec", map[string]any{"shell": "echo hi > f.txt; echo out"}, &r)
	require.Equal(t, nsjail.StatusSuccess, r.Status, "%+v", r.Error)
	assert.Equal(t, "out\n", *r.Stdout)
	assert.True(t, r.Committed)

	callTool(ctx, t, cs, "exec", map[string]any{"command": []string{"sh", "-c", "echo held > h.txt"}, "hold": true}, &r)
	require.True(t, r.Held)
	assert.NoFileExists(t, filepath.Join(e.ws, "h.txt"))
	var d diffOutput
	callTool(ctx, t, cs, "diff", map[string]any{"run_id": r.ID}, &d)
	require.NotNil(t, d.Changes)
	require.Len(t, d.Changes.Added, 1)
	assert.Equal(t, "h.txt", d.Changes.Added[0].Path)
	var c nsjail.CommitResult
	callTool(ctx, t, cs, "commit", map[string]any{"run_id": r.ID}, &c)
	assert.Equal(t, r.ID, c.ID)

	// Closing stdin ends the server.
	require.NoError(t, cs.Close())
	require.NoError(t, cmd.Wait(), "stderr: %s", stderr.String())
	assert.Equal(t, "hi\n", fileContent(t, filepath.Join(e.ws, "f.txt")))
	assert.Equal(t, "held\n", fileContent(t, filepath.Join(e.ws, "h.txt")))
	e.requireClean(t)

	stdout.mu.Lock()
	defer stdout.mu.Unlock()
	sc := bufio.NewScanner(bytes.NewReader(stdout.b.Bytes()))
	sc.Buffer(nil, 16<<20)
	lines := 0
	for sc.Scan() {
		var msg struct {
			JSONRPC string `json:"jsonrpc"`
		}
		require.NoError(t, json.Unmarshal(sc.Bytes(), &msg), "stdout line %q", sc.Text())
		require.Equal(t, "2.0", msg.JSONRPC, "stdout line %q", sc.Text())
		lines++
	}
	require.NoError(t, sc.Err())
	assert.GreaterOrEqual(t, lines, 5, "initialize, tools/list and four calls")
	assert.Contains(t, stderr.String(), "serving", "logs go to stderr")
}

// Usage errors: one line on stderr, exit 2, nothing on stdout.
func TestMCPUsage(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "file")
	require.NoError(t, os.WriteFile(file, nil, 0o644))
	for _, tc := range []struct {
		args []string
		want string
	}{
		{nil, "--workspace is required"},
		{[]string{"--workspace", dir, "extra"}, `unexpected argument "extra"`},
		{[]string{"--workspace", filepath.Join(dir, "missing")}, "does not exist"},
		{[]string{"--workspace", file}, "is not a directory"},
		{[]string{"--workspace", dir, "--policy", "no-such-policy"}, "--policy"},
		{[]string{"--workspace", dir, "--state-dir", filepath.Join(dir, "state")}, "is inside the workspace"},
	} {
		var stdout, stderr bytes.Buffer
		code := mcpMain(tc.args, strings.NewReader(""), &stdout, &stderr)
		assert.Equal(t, nsjail.ExitUsage, code, "%v", tc.args)
		assert.Contains(t, stderr.String(), tc.want, "%v", tc.args)
		assert.Empty(t, stdout.String(), "%v", tc.args)
	}
}
