package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"

	"github.com/neonbox/neonbox-ns/internal/interrupt"
	"github.com/neonbox/neonbox-ns/internal/units"
	"github.com/neonbox/neonbox-ns/nsjail"
	"github.com/neonbox/neonbox-ns/policies"
)

const execUsage = `Usage: neonbox-ns exec [flags] -- CMD [ARG...]

Runs CMD in new user, mount, pid, net, uts, ipc and cgroup namespaces, with the
workspace seen through overlayfs. CMD's changes are committed to the
workspace if it succeeds and thrown away otherwise.

Flags:
`

// stringList is a repeatable string flag.
type stringList []string

func (l *stringList) String() string     { return strings.Join(*l, ",") }
func (l *stringList) Set(v string) error { *l = append(*l, v); return nil }

type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }

func execMain(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	o, asJSON, receiptPath, logLevel, err := parseExec(args, stdout)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintf(stderr, "neonbox-ns exec: %v\n", err)
		return nsjail.ExitUsage
	}
	o.Stdin, o.Stdout, o.Stderr = stdin, stdout, stderr
	o.CaptureOutput = asJSON
	o.Logger = slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: logLevel}))

	// SIGINT, SIGTERM and SIGHUP cancel the run, which is then cleaned
	// up and has its receipt (CANCELED). Package interrupt's handler
	// costs a run no thread of its own (os/signal's costs two). A signal
	// before it is installed, in neonbox-ns's first milliseconds, ends
	// neonbox-ns (the jail dies with it, and the teardown helper or the
	// next run removes what it left).
	ctx, stop, err := interrupt.Catch(context.Background(), syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
	if err != nil {
		fmt.Fprintf(stderr, "neonbox-ns exec: signal handlers: %v\n", err)
		return nsjail.ExitSandbox
	}
	defer stop()
	r, err := nsjail.Run(ctx, o)
	if err != nil {
		fmt.Fprintf(stderr, "neonbox-ns exec: %s\n", strings.TrimPrefix(err.Error(), nsjail.ErrInvalid.Error()+": "))
		return nsjail.ExitUsage
	}
	if receiptPath != "" {
		if err := writeReceipt(receiptPath, r); err != nil {
			fmt.Fprintf(stderr, "neonbox-ns exec: write receipt: %v\n", err)
		}
	}
	if asJSON {
		_ = r.WriteJSON(stdout)
		for _, warn := range r.Warnings {
			fmt.Fprintf(stderr, "neonbox-ns: %s\n", printable(warn))
		}
	} else {
		reportProblems(stderr, r)
	}
	return r.ExitStatus()
}

// reportProblems prints one line for failures that are neonbox-ns's to
// explain; CMD's own failures speak through CMD's output and exit status.
func reportProblems(w io.Writer, r *nsjail.Receipt) {
	switch {
	case r.Status == nsjail.StatusSandboxError && r.Error != nil:
		fmt.Fprintf(w, "neonbox-ns: sandbox error: %s\n", printable(r.Error.Error()))
		if r.Error.Remedy != "" {
			fmt.Fprintf(w, "neonbox-ns: remedy: %s (neonbox-ns doctor checks the rest)\n", r.Error.Remedy)
		}
	case r.Status == nsjail.StatusSecurityViolation && r.Error != nil:
		fmt.Fprintf(w, "neonbox-ns: security violation: %s\n", printable(r.Error.Error()))
	case r.Status == nsjail.StatusExecutionError && r.Error != nil:
		fmt.Fprintf(w, "neonbox-ns: %s: %s\n", printable(r.Command[0]), printable(r.Error.Message))
	case r.Status == nsjail.StatusTimeout:
		fmt.Fprintf(w, "neonbox-ns: timed out after %dms; changes rolled back\n", r.Limits.TimeoutMS)
	}
	for _, warn := range r.Warnings {
		fmt.Fprintf(w, "neonbox-ns: %s\n", printable(warn))
	}
}

// printable escapes control characters (and invalid UTF-8) in a line
// neonbox-ns writes to stderr: parts of it, such as file names, come from
// the run.
func printable(s string) string {
	q := strconv.QuoteToGraphic(s)
	return q[1 : len(q)-1]
}

func writeReceipt(path string, r *nsjail.Receipt) error {
	tmp := path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return err
	}
	if err := r.WriteJSON(f); err != nil {
		return errors.Join(err, f.Close(), os.Remove(tmp))
	}
	if err := f.Close(); err != nil {
		return errors.Join(err, os.Remove(tmp))
	}
	return os.Rename(tmp, path)
}

func parseExec(args []string, out io.Writer) (o nsjail.Options, asJSON bool, receipt string, level slog.Level, err error) {
	fs := flag.NewFlagSet("exec", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	var env, keepEnv, allowSecret, allow, deny, protect stringList
	policyName := fs.String("policy", "default", "policy: a built-in name (neonbox-ns policy list) or a policy file")
	fs.Var(&allow, "allow", "grant a capability: fs-write, subprocess, network (repeatable, comma-separated)")
	fs.Var(&deny, "deny", "take a capability away (repeatable, comma-separated)")
	fs.Var(&protect, "protect", "a workspace path pattern the run must not change, like .env or secrets/** (repeatable)")
	workspace := fs.String("workspace", "", "directory the run sees through overlayfs (default: the current directory)")
	stateDir := fs.String("state-dir", "", "where per-run directories live (default: /var/lib/neonbox as root, $XDG_STATE_HOME/neonbox otherwise)")
	commit := fs.String("commit", "on-success", "when to apply changes: on-success, always or never")
	timeout := fs.String("timeout", "", "kill the run after this long (500ms, 3s, 2m)")
	lockTimeout := fs.String("lock-timeout", nsjail.DefaultLockTimeout.String(), "wait this long while another run holds the workspace (0: do not wait)")
	fs.Var(&env, "env", "set KEY=VALUE in the jail (repeatable)")
	fs.Var(&keepEnv, "keep-env", "pass the host variable NAME through (repeatable)")
	fs.Var(&allowSecret, "allow-secret", "let --keep-env pass NAME although it looks like a secret (repeatable)")
	fs.StringVar(&receipt, "receipt", "", "write the JSON receipt to FILE")
	fs.BoolVar(&asJSON, "json", false, "capture CMD's output and print only the receipt on stdout")
	outputLimit := fs.String("output-limit", "1M", "with --json, keep at most this much of each of stdout and stderr")
	logLevel := fs.String("log-level", "error", "neonbox-ns's own logging on stderr: debug, info, warn or error")
	memory := fs.String("memory", "", "memory limit: bytes or a size with K, M, G (binary)")
	cpus := fs.Float64("cpus", 0, "CPU limit in cores, e.g. 0.5")
	pids := fs.Int64("pids", 0, "limit on processes and threads")
	disk := fs.String("disk", "", "cap what the run may write (its changes go to a tmpfs of this size; root, Linux 6.6+)")
	fs.BoolVar(&o.AllowUnlimited, "allow-unlimited", false, "run even if the limits cannot be enforced here (the receipt says so)")
	fs.IntVar(&o.KeepHistory, "keep-history", nsjail.DefaultKeepHistory, "how many committed runs stay undoable (neonbox-ns undo)")
	fs.BoolVar(&o.Hold, "hold", false, "keep the changes for review instead of committing or discarding them (neonbox-ns diff/commit/discard ID)")

	sep := slices.Index(args, "--")
	flagArgs := args
	if sep >= 0 {
		flagArgs = args[:sep]
	}
	if err = fs.Parse(flagArgs); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprint(out, execUsage)
			fs.SetOutput(out)
			fs.PrintDefaults()
		}
		return
	}
	if fs.NArg() > 0 {
		err = usageError{fmt.Sprintf("unexpected argument %q: put the command after --", fs.Arg(0))}
		return
	}
	if sep < 0 {
		err = usageError{"missing -- before the command (neonbox-ns exec [flags] -- CMD [ARG...])"}
		return
	}
	o.Command = args[sep+1:]
	if len(o.Command) == 0 {
		err = usageError{"no command after --"}
		return
	}
	if o.Commit, err = nsjail.ParseCommitMode(*commit); err != nil {
		return
	}
	if *timeout != "" {
		if o.Timeout, err = units.ParseDuration(*timeout); err != nil {
			err = fmt.Errorf("--timeout: %w", err)
			return
		}
	}
	if o.LockTimeout, err = units.ParseDuration(*lockTimeout); err != nil {
		err = fmt.Errorf("--lock-timeout: %w", err)
		return
	}
	if o.LockTimeout == 0 {
		o.LockTimeout = -1 // Options: negative means do not wait
	}
	if o.OutputLimit, err = units.ParseSize(*outputLimit); err != nil {
		err = fmt.Errorf("--output-limit: %w", err)
		return
	}
	if err = level.UnmarshalText([]byte(*logLevel)); err != nil {
		err = fmt.Errorf("--log-level %q: want debug, info, warn or error", *logLevel)
		return
	}
	if receipt != "" {
		if receipt, err = filepath.Abs(receipt); err != nil {
			return
		}
	}
	if o.Policy, err = policies.Load(*policyName); err != nil {
		err = fmt.Errorf("--policy: %w", err)
		return
	}
	for _, spec := range []struct {
		list  stringList
		apply func(policies.Capability)
		flag  string
	}{{allow, o.Policy.Allow, "--allow"}, {deny, o.Policy.Deny, "--deny"}} {
		for _, item := range spec.list {
			for _, c := range strings.Split(item, ",") {
				cp := policies.Capability(strings.TrimSpace(c))
				if !slices.Contains(policies.Capabilities, cp) {
					err = fmt.Errorf("%s %q: want fs-write, subprocess or network", spec.flag, c)
					return
				}
				spec.apply(cp)
			}
		}
	}
	o.Protect = protect
	if *memory != "" {
		if o.Limits.MemoryBytes, err = units.ParseSize(*memory); err != nil || o.Limits.MemoryBytes == 0 {
			err = fmt.Errorf("--memory %q: want a positive size like 512M", *memory)
			return
		}
	}
	if *cpus < 0 || *pids < 0 {
		err = errors.New("--cpus and --pids must not be negative")
		return
	}
	o.Limits.CPUs, o.Limits.Pids = *cpus, *pids
	if *disk != "" {
		if o.DiskBytes, err = units.ParseSize(*disk); err != nil || o.DiskBytes == 0 {
			err = fmt.Errorf("--disk %q: want a positive size like 1G", *disk)
			return
		}
	}
	o.Workspace, o.StateDir = *workspace, *stateDir
	o.Env = nsjail.EnvSpec{Set: env, Keep: keepEnv, AllowSecret: allowSecret}
	return
}
