package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/neonbox/neonbox-ns/nsjail"
	"github.com/neonbox/neonbox-ns/policies"
)

// policyMain runs "neonbox-ns policy list|show|validate".
func policyMain(args []string, stdout, stderr io.Writer) int {
	usage := func() int {
		fmt.Fprintln(stderr, "usage: neonbox-ns policy list | show NAME|FILE | validate FILE")
		return nsjail.ExitUsage
	}
	if len(args) == 0 {
		return usage()
	}
	switch args[0] {
	case "list":
		if len(args) != 1 {
			return usage()
		}
		for _, n := range policies.BuiltinNames() {
			p, err := policies.Builtin(n)
			if err != nil {
				fmt.Fprintf(stderr, "neonbox-ns policy: %v\n", err)
				return 1
			}
			fmt.Fprintf(stdout, "%-10s %s\n", n, p.Description)
		}
		return 0
	case "show":
		if len(args) != 2 {
			return usage()
		}
		p, err := policies.Load(args[1])
		if err != nil {
			fmt.Fprintf(stderr, "neonbox-ns policy show: %v\n", err)
			return 1
		}
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		_ = enc.Encode(p)
		return 0
	case "validate":
		if len(args) != 2 {
			return usage()
		}
		b, err := os.ReadFile(args[1])
		if err != nil {
			fmt.Fprintf(stderr, "neonbox-ns policy validate: %v\n", err)
			return 1
		}
		p, err := policies.Parse(b)
		var ie *policies.InvalidError
		if errors.As(err, &ie) {
			for _, pr := range ie.Problems {
				fmt.Fprintf(stdout, "%s: %s\n", args[1], pr)
			}
			return 1
		}
		if err != nil {
			fmt.Fprintf(stderr, "neonbox-ns policy validate: %v\n", err)
			return 1
		}
		fmt.Fprintf(stdout, "%s: ok (policy %q, %s)\n", args[1], p.Name, p.Hash())
		return 0
	}
	return usage()
}
