package main

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"

	"github.com/neonbox/neonbox-ns/nsjail"
)

// mcpBinary is the MCP server's own binary (cmd/neonbox-ns-mcp). It is
// not linked in here: the MCP SDK's package initialisation would cost
// every neonbox-ns start, once per run, about half a millisecond.
const mcpBinary = "neonbox-ns-mcp"

// mcpMain execs the MCP server with args, in place of this process, so
// that it has stdin and stdout to itself. It returns only on failure.
func mcpMain(args []string, stderr io.Writer) int {
	path, err := findMCP()
	if err != nil {
		fmt.Fprintf(stderr, "neonbox-ns mcp: %v\n", err)
		return nsjail.ExitUsage
	}
	err = syscall.Exec(path, append([]string{mcpBinary}, args...), os.Environ())
	fmt.Fprintf(stderr, "neonbox-ns mcp: exec %s: %v\n", path, err)
	return 1
}

// findMCP looks for the server next to this executable, then on PATH.
func findMCP() (string, error) {
	if self, err := os.Executable(); err == nil {
		p := filepath.Join(filepath.Dir(self), mcpBinary)
		if st, err := os.Stat(p); err == nil && st.Mode().IsRegular() {
			return p, nil
		} else if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return "", err
		}
	}
	p, err := exec.LookPath(mcpBinary)
	if err != nil {
		return "", fmt.Errorf("the MCP server, %s, is neither next to neonbox-ns nor on PATH (make build builds both into bin/)", mcpBinary)
	}
	return p, nil
}
