package main

import (
	"bytes"
	"os"
	"strings"
	"testing"

	"github.com/neonbox/neonbox-ns/nsjail"
	"github.com/neonbox/neonbox-ns/reexec"
)

func TestMain(m *testing.M) {
	// The jail's init is this test binary re-executed (its C part);
	// nsjail's other helpers go through reexec.
	if reexec.Init() {
		return
	}
	os.Exit(m.Run())
}

// Without the MCP server's binary next to neonbox-ns or on PATH, "mcp"
// says what is missing and how to get it.
func TestMCPNeedsItsBinary(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	var stdout, stderr bytes.Buffer
	code := run([]string{"mcp", "--workspace", t.TempDir()}, strings.NewReader(""), &stdout, &stderr)
	if code != nsjail.ExitUsage || !strings.Contains(stderr.String(), "neonbox-ns-mcp, is neither next to neonbox-ns nor on PATH") || stdout.Len() > 0 {
		t.Fatalf("exit %d, stdout %q, stderr %q", code, stdout.String(), stderr.String())
	}
}
