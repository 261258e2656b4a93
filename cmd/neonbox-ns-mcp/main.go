// Command neonbox-ns-mcp is the Model Context Protocol server of
// neonbox-ns: "neonbox-ns mcp" execs it, from the directory neonbox-ns is
// in (make build puts both in bin/). It is a binary of its own so that
// the MCP SDK's packages, and their initialisation at every start, stay
// out of neonbox-ns, which starts once per run.
package main

import (
	"os"

	"github.com/neonbox/neonbox-ns/reexec"
)

func main() {
	if reexec.Init() {
		return
	}
	os.Exit(mcpMain(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}
