// Command neonbox-ns runs commands in throwaway Linux jails whose changes to
// a workspace are committed on success and rolled back otherwise.
//
//	neonbox-ns exec [flags] -- CMD [ARG...]
package main

import (
	"fmt"
	"io"
	"os"

	"github.com/neonbox/neonbox-ns/nsjail"
	"github.com/neonbox/neonbox-ns/reexec"
)

const usage = `neonbox-ns runs a command in a throwaway jail.

Usage:
  neonbox-ns exec [flags] -- CMD [ARG...]   run CMD isolated (see exec --help)
  neonbox-ns runs [--json]                   list runs held with exec --hold
  neonbox-ns diff [--patch] ID               what a held run changes (--patch: a unified diff)
  neonbox-ns commit ID                       apply a held run to its workspace
  neonbox-ns discard ID                      throw a held run away
  neonbox-ns undo [--workspace DIR]          revert the last committed run (repeat to go further back)
  neonbox-ns recover [--workspace DIR]       finish an interrupted commit (any exec does this too)
  neonbox-ns doctor [--json]                 check what this machine offers, with remedies
  neonbox-ns mcp --workspace DIR [flags]     serve the sandbox to an agent over MCP on stdio (see mcp --help)
  neonbox-ns bench [-n N] [-j N] [--json]    compare neonbox-ns with plain exec, unshare and bwrap
  neonbox-ns policy list                     list the built-in policies
  neonbox-ns policy show NAME|FILE           print a policy
  neonbox-ns policy validate FILE            check a policy file, reporting every problem
  neonbox-ns help                            show this text
`

func main() {
	if reexec.Init() {
		return
	}
	// The jail's init of exec is already running (prestart.go): its
	// ids are mapped while the command line is read.
	nsjail.AdoptPrestarted()
	os.Exit(run(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}

func run(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return nsjail.ExitUsage
	}
	switch args[0] {
	case "exec":
		return execMain(args[1:], stdin, stdout, stderr)
	case "policy":
		return policyMain(args[1:], stdout, stderr)
	case "undo", "recover":
		return historyMain(args[0], args[1:], stdout, stderr)
	case "runs", "diff", "commit", "discard":
		return heldMain(args[0], args[1:], stdout, stderr)
	case "bench":
		return benchMain(args[1:], stdout, stderr)
	case "doctor":
		return doctorMain(args[1:], stdout, stderr)
	case "mcp":
		return mcpMain(args[1:], stderr)
	case "help", "-h", "-help", "--help":
		fmt.Fprint(stdout, usage)
		return 0
	}
	fmt.Fprintf(stderr, "neonbox-ns: unknown command %q (try neonbox-ns help)\n", args[0])
	return nsjail.ExitUsage
}
