package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"

	"github.com/neonbox/neonbox-ns/nsjail"
)

// doctorMain runs "neonbox-ns doctor": a line per check with a remedy,
// exit 0 only when everything the default policy needs works.
func doctorMain(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("doctor", flag.ContinueOnError)
	fs.SetOutput(stderr)
	stateDir := fs.String("state-dir", "", "the state dir to try a run with")
	asJSON := fs.Bool("json", false, "print the checks as JSON")
	if err := fs.Parse(args); err != nil {
		return nsjail.ExitUsage
	}
	checks := nsjail.Doctor(context.Background(), *stateDir)
	healthy := nsjail.Healthy(checks)
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		_ = enc.Encode(map[string]any{"healthy": healthy, "checks": checks})
	} else {
		for _, c := range checks {
			mark := "ok  "
			if !c.OK {
				mark = "FAIL"
				if !c.Required {
					mark = "warn"
				}
			}
			fmt.Fprintf(stdout, "%s %-16s %s\n", mark, c.Name, c.Detail)
			if !c.OK && c.Remedy != "" {
				fmt.Fprintf(stdout, "     %-16s remedy: %s\n", "", c.Remedy)
			}
		}
	}
	if !healthy {
		return 1
	}
	return 0
}
