package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/neonbox/neonbox-ns/internal/units"
	"github.com/neonbox/neonbox-ns/nsjail"
	"github.com/neonbox/neonbox-ns/overlay"
)

// heldMain runs "neonbox-ns runs|diff|commit|discard".
func heldMain(cmd string, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet(cmd, flag.ContinueOnError)
	fs.SetOutput(stderr)
	stateDir := fs.String("state-dir", "", "the state dir the runs used")
	asJSON := fs.Bool("json", false, "print JSON")
	patch := fs.Bool("patch", false, "diff: print a unified diff of text files")
	lockTimeout := fs.String("lock-timeout", nsjail.DefaultLockTimeout.String(), "commit: wait this long while a run holds the workspace")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return nsjail.ExitUsage
	}
	wantID := cmd != "runs"
	if (wantID && fs.NArg() != 1) || (!wantID && fs.NArg() != 0) {
		if wantID {
			fmt.Fprintf(stderr, "neonbox-ns %s: want one run id (neonbox-ns runs lists them)\n", cmd)
		} else {
			fmt.Fprintf(stderr, "neonbox-ns %s: unexpected argument %q\n", cmd, fs.Arg(0))
		}
		return nsjail.ExitUsage
	}
	id := fs.Arg(0)
	printJSON := func(v any) {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		_ = enc.Encode(v)
	}
	switch cmd {
	case "runs":
		runs, err := nsjail.ListHeld(*stateDir)
		if err != nil {
			return fail(stderr, cmd, err)
		}
		if *asJSON {
			if runs == nil {
				runs = []*nsjail.HeldRun{}
			}
			printJSON(runs)
			return 0
		}
		for _, h := range runs {
			fmt.Fprintf(stdout, "%s  %-8s  %-15s  %8s  %s  %s\n", h.ID, time.Since(h.Created).Round(time.Second), h.Status,
				humanSize(h.SizeBytes), h.Workspace, strings.Join(h.Command, " "))
		}
		return 0
	case "diff":
		h, err := nsjail.LoadHeld(*stateDir, id)
		if err != nil {
			return fail(stderr, cmd, err)
		}
		if *patch {
			if err := h.Patch(stdout); err != nil {
				return fail(stderr, cmd, err)
			}
			return 0
		}
		plan, err := h.Diff()
		if err != nil {
			return fail(stderr, cmd, err)
		}
		if *asJSON {
			printJSON(plan.Changes)
			return 0
		}
		for _, l := range []struct {
			mark string
			cs   []overlay.Change
		}{{"A", plan.Changes.Added}, {"M", plan.Changes.Modified}, {"D", plan.Changes.Deleted}} {
			for _, c := range l.cs {
				size := ""
				if c.Size != nil {
					size = " (" + humanSize(*c.Size) + ")"
				}
				fmt.Fprintf(stdout, "%s %s%s%s\n", l.mark, c.Path, map[bool]string{true: "/", false: ""}[c.Type == "dir"], size)
			}
		}
		return 0
	case "commit":
		lt, err := units.ParseDuration(*lockTimeout)
		if err != nil {
			fmt.Fprintf(stderr, "neonbox-ns commit: --lock-timeout: %v\n", err)
			return nsjail.ExitUsage
		}
		res, err := nsjail.CommitHeld(context.Background(), *stateDir, id, lt)
		if res != nil {
			for _, w := range res.Warnings {
				fmt.Fprintf(stderr, "neonbox-ns: %s\n", w)
			}
		}
		var ce *overlay.ConflictError
		switch {
		case errors.As(err, &ce):
			if *asJSON {
				printJSON(res)
			}
			fmt.Fprintf(stderr, "neonbox-ns commit: conflict, nothing applied: the workspace changed these paths since run %s ended: %s\n", id, strings.Join(ce.Paths, ", "))
			return 1
		case err != nil:
			return fail(stderr, cmd, err)
		}
		if *asJSON {
			printJSON(res)
			return 0
		}
		c := res.Changes
		fmt.Fprintf(stdout, "committed run %s: %d added, %d modified, %d deleted\n", id, len(c.Added), len(c.Modified), len(c.Deleted))
		return 0
	default: // discard
		if err := nsjail.DiscardHeld(*stateDir, id); err != nil {
			return fail(stderr, cmd, err)
		}
		fmt.Fprintf(stdout, "discarded run %s\n", id)
		return 0
	}
}

func humanSize(n int64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.1fG", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1fM", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1fK", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%dB", n)
}
