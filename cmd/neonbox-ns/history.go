package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"

	"github.com/neonbox/neonbox-ns/internal/units"
	"github.com/neonbox/neonbox-ns/nsjail"
	"github.com/neonbox/neonbox-ns/overlay"
)

// workspaceFlags parses the flags shared by commands that work on one
// workspace's state.
func workspaceFlags(name string, args []string, stderr io.Writer) (nsjail.WorkspaceOptions, []string, error) {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	var w nsjail.WorkspaceOptions
	fs.StringVar(&w.Workspace, "workspace", "", "the workspace (default: the current directory)")
	fs.StringVar(&w.StateDir, "state-dir", "", "the state dir the runs used")
	lockTimeout := fs.String("lock-timeout", nsjail.DefaultLockTimeout.String(), "wait this long while a run holds the workspace")
	if err := fs.Parse(args); err != nil {
		return w, nil, err
	}
	d, err := units.ParseDuration(*lockTimeout)
	if err != nil {
		return w, nil, fmt.Errorf("--lock-timeout: %w", err)
	}
	w.LockTimeout = d
	if d == 0 {
		w.LockTimeout = -1
	}
	return w, fs.Args(), nil
}

// historyMain runs "neonbox-ns undo" and "neonbox-ns recover".
func historyMain(cmd string, args []string, stdout, stderr io.Writer) int {
	w, rest, err := workspaceFlags(cmd, args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err == nil && len(rest) > 0 {
		err = fmt.Errorf("unexpected argument %q", rest[0])
	}
	if err != nil {
		fmt.Fprintf(stderr, "neonbox-ns %s: %v\n", cmd, err)
		return nsjail.ExitUsage
	}
	ctx := context.Background()
	switch cmd {
	case "recover":
		notes, err := nsjail.Recover(ctx, w)
		if err != nil {
			return fail(stderr, cmd, err)
		}
		for _, n := range notes {
			fmt.Fprintf(stderr, "neonbox-ns: %s\n", n)
		}
		if len(notes) == 0 {
			fmt.Fprintln(stdout, "nothing to recover")
		}
		return 0
	default:
		res, err := nsjail.Undo(ctx, w)
		var ce *overlay.ConflictError
		if errors.As(err, &ce) {
			fmt.Fprintf(stderr, "neonbox-ns undo: refused, these paths changed since the commit: %s\n", strings.Join(ce.Paths, ", "))
			return 1
		}
		if err != nil {
			return fail(stderr, cmd, err)
		}
		for _, n := range res.Notes {
			fmt.Fprintf(stderr, "neonbox-ns: %s\n", n)
		}
		fmt.Fprintf(stdout, "undid run %s (committed %s)\n", res.RunID, res.Committed)
		return 0
	}
}

func fail(stderr io.Writer, cmd string, err error) int {
	if errors.Is(err, nsjail.ErrInvalid) {
		fmt.Fprintf(stderr, "neonbox-ns %s: %s\n", cmd, strings.TrimPrefix(err.Error(), nsjail.ErrInvalid.Error()+": "))
		return nsjail.ExitUsage
	}
	fmt.Fprintf(stderr, "neonbox-ns %s: %v\n", cmd, err)
	return 1
}
