package main

// "neonbox-ns mcp": a Model Context Protocol server on stdin/stdout whose
// tools run commands in jails over one workspace and manage what they
// leave behind (held runs, commits, undo). neonbox-ns execs this binary
// for it; every jail it starts is its child, as with exec.
//
// stdout carries the protocol and nothing else: runs capture their
// output into the receipt, and logs go to stderr.

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/neonbox/neonbox-ns/internal/units"
	"github.com/neonbox/neonbox-ns/nsjail"
	"github.com/neonbox/neonbox-ns/overlay"
	"github.com/neonbox/neonbox-ns/policies"
)

const mcpUsage = `Usage: neonbox-ns mcp --workspace DIR [--policy NAME|FILE] [--state-dir DIR]

Serves the Model Context Protocol on stdin/stdout. Its tools (exec, diff,
commit, discard, undo, status) run commands in jails over DIR and manage
their changes. Logs go to stderr.

Flags:
`

// mcpConfig is what one server serves.
type mcpConfig struct {
	// Workspace is absolute with symlinks resolved, StateDir absolute
	// (or "" for the default).
	Workspace, StateDir string
	Policy              *policies.Policy
	// Logger receives the server's and the runs' logs; never stdout.
	Logger *slog.Logger
}

// mcpService holds the state the tools share.
type mcpService struct {
	cfg  mcpConfig
	pool *nsjail.Pool
}

func mcpMain(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("mcp", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(stderr, mcpUsage)
		fs.PrintDefaults()
	}
	workspace := fs.String("workspace", "", "the directory the runs see through overlayfs (required)")
	policyName := fs.String("policy", "default", "policy: a built-in name (neonbox-ns policy list) or a policy file")
	stateDir := fs.String("state-dir", "", "where per-run directories live (default: /var/lib/neonbox as root, $XDG_STATE_HOME/neonbox otherwise)")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return nsjail.ExitUsage
	}
	usageErr := func(format string, a ...any) int {
		fmt.Fprintf(stderr, "neonbox-ns mcp: "+format+"\n", a...)
		return nsjail.ExitUsage
	}
	if fs.NArg() > 0 {
		return usageErr("unexpected argument %q", fs.Arg(0))
	}
	if *workspace == "" {
		return usageErr("--workspace is required")
	}
	cfg := mcpConfig{Logger: slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))}
	var err error
	if cfg.Workspace, err = resolveWorkspace(*workspace); err != nil {
		return usageErr("--workspace: %v", err)
	}
	if *stateDir != "" {
		if cfg.StateDir, err = filepath.Abs(*stateDir); err != nil {
			return usageErr("--state-dir: %v", err)
		}
	}
	if cfg.Policy, err = policies.Load(*policyName); err != nil {
		return usageErr("--policy: %v", err)
	}

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
	defer stop()
	server, svc, err := newMCPServer(ctx, cfg)
	if err != nil {
		if errors.Is(err, nsjail.ErrInvalid) {
			fmt.Fprintf(stderr, "neonbox-ns mcp: %s\n", strings.TrimPrefix(err.Error(), nsjail.ErrInvalid.Error()+": "))
			return nsjail.ExitUsage
		}
		fmt.Fprintf(stderr, "neonbox-ns mcp: %v\n", err)
		return 1
	}
	cfg.Logger.Info("neonbox-ns mcp: serving", "workspace", cfg.Workspace, "policy", cfg.Policy.Name,
		"capabilities", cfg.Policy.Capabilities)
	err = server.Run(ctx, &mcp.IOTransport{Reader: io.NopCloser(stdin), Writer: nopWriteCloser{stdout}})
	if cerr := svc.Close(); cerr != nil {
		fmt.Fprintf(stderr, "neonbox-ns mcp: close the pool: %v\n", cerr)
	}
	if err != nil && ctx.Err() == nil && !errors.Is(err, io.EOF) && !errors.Is(err, mcp.ErrConnectionClosed) {
		fmt.Fprintf(stderr, "neonbox-ns mcp: %v\n", err)
		return 1
	}
	return 0
}

type nopWriteCloser struct{ io.Writer }

func (nopWriteCloser) Close() error { return nil }

// resolveWorkspace makes dir absolute with symlinks resolved, as the runs
// record it, so that held runs can be matched to this server's workspace.
func resolveWorkspace(dir string) (string, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return "", err
	}
	real, err := filepath.EvalSymlinks(abs)
	if err != nil {
		return "", fmt.Errorf("%s does not exist", dir)
	}
	st, err := os.Stat(real)
	if err != nil {
		return "", err
	}
	if !st.IsDir() {
		return "", fmt.Errorf("%s is not a directory", dir)
	}
	return real, nil
}

// newMCPServer prepares a pool of jails for cfg and returns the server
// with its tools. The caller closes svc when the server is done.
func newMCPServer(ctx context.Context, cfg mcpConfig) (*mcp.Server, *mcpService, error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	pool, err := nsjail.NewPool(ctx, nsjail.Options{
		Workspace: cfg.Workspace, StateDir: cfg.StateDir, Policy: cfg.Policy, Logger: cfg.Logger,
	}, 0)
	if errors.Is(err, nsjail.ErrInvalid) {
		return nil, nil, err
	}
	if err != nil {
		return nil, nil, fmt.Errorf("prepare jails: %w", err)
	}
	svc := &mcpService{cfg: cfg, pool: pool}
	server := mcp.NewServer(&mcp.Implementation{Name: "neonbox-ns", Title: "neonbox-ns sandbox", Version: buildVersion()},
		&mcp.ServerOptions{
			Logger:       slog.New(levelHandler{cfg.Logger.Handler(), slog.LevelWarn}),
			Instructions: svc.instructions(),
		})
	svc.addTools(server)
	return server, svc, nil
}

// Close ends the pool's prepared jails and waits for their teardown.
func (s *mcpService) Close() error { return s.pool.Close() }

// levelHandler passes on records at min and above: the SDK logs every
// session at info level.
type levelHandler struct {
	slog.Handler
	min slog.Level
}

func (h levelHandler) Enabled(ctx context.Context, l slog.Level) bool {
	return l >= h.min && h.Handler.Enabled(ctx, l)
}

func (h levelHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	return levelHandler{h.Handler.WithAttrs(attrs), h.min}
}

func (h levelHandler) WithGroup(name string) slog.Handler {
	return levelHandler{h.Handler.WithGroup(name), h.min}
}

func buildVersion() string {
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" {
		return bi.Main.Version
	}
	return "devel"
}

func capsString(p *policies.Policy) string {
	if len(p.Capabilities) == 0 {
		return "none"
	}
	var names []string
	for _, c := range p.Capabilities {
		names = append(names, string(c))
	}
	return strings.Join(names, ", ")
}

func (s *mcpService) instructions() string {
	return fmt.Sprintf("Run commands in throwaway Linux jails over the workspace %s (policy %q: %s). "+
		"A successful run's file changes are committed to the workspace, a failed one's are rolled back; "+
		"with hold=true they are kept for review with diff, then commit or discard. undo reverts the last commit.",
		s.cfg.Workspace, s.cfg.Policy.Name, capsString(s.cfg.Policy))
}

// toolError is the message the CLI prints for err, as a tool error.
func toolError(cmd string, err error) error {
	msg := strings.TrimPrefix(err.Error(), nsjail.ErrInvalid.Error()+": ")
	return fmt.Errorf("neonbox-ns %s: %s", cmd, msg)
}

// Tool inputs and outputs. Field names follow the receipt's snake_case.

type execInput struct {
	Command []string `json:"command,omitempty" jsonschema:"the command and its arguments (argv), run without a shell; give this or shell"`
	Shell   string   `json:"shell,omitempty" jsonschema:"a shell command line, run with sh -c; give this or command"`
	Timeout string   `json:"timeout,omitempty" jsonschema:"kill the run after this long, as a Go duration like 500ms, 30s or 2m (default: the policy's timeout, if any)"`
	Hold    bool     `json:"hold,omitempty" jsonschema:"keep the changes for review (diff, then commit or discard) instead of committing them when the command succeeds"`
	Allow   []string `json:"allow,omitempty" jsonschema:"capabilities this run needs, among those the server's policy grants: fs-write, subprocess, network"`
	Deny    []string `json:"deny,omitempty" jsonschema:"capabilities to take away for this run: fs-write, subprocess, network"`
}

type runIDInput struct {
	RunID string `json:"run_id" jsonschema:"the id of a held run (the id in the receipt of exec with hold=true)"`
}

type diffInput struct {
	RunID string `json:"run_id" jsonschema:"the id of a held run (the id in the receipt of exec with hold=true)"`
	Patch bool   `json:"patch,omitempty" jsonschema:"return a unified diff of the text files instead of the list of changes"`
}

type diffOutput struct {
	RunID string `json:"run_id" jsonschema:"the held run"`
	// Changes is set without patch.
	Changes *overlay.Changes `json:"changes,omitempty" jsonschema:"added, modified and deleted paths relative to the workspace, with type, size and sha256 of files (without patch)"`
	// Patch is set with patch.
	Patch          string `json:"patch,omitempty" jsonschema:"the unified diff; binary files are named as such (with patch)"`
	PatchTruncated bool   `json:"patch_truncated,omitempty" jsonschema:"the diff was longer than 1 MiB and was cut"`
}

type discardOutput struct {
	RunID     string `json:"run_id" jsonschema:"the held run"`
	Discarded bool   `json:"discarded" jsonschema:"its changes were thrown away"`
}

type emptyInput struct{}

// heldSummary is one line of neonbox-ns runs.
type heldSummary struct {
	ID        string        `json:"id" jsonschema:"the run id, for diff, commit and discard"`
	Created   time.Time     `json:"created" jsonschema:"when the run ended"`
	Status    nsjail.Status `json:"status" jsonschema:"the run's status"`
	ExitCode  int           `json:"exit_code" jsonschema:"the command's exit status"`
	SizeBytes int64         `json:"size_bytes" jsonschema:"size of the held changes"`
	Command   []string      `json:"command" jsonschema:"what ran"`
}

type statusOutput struct {
	Workspace string           `json:"workspace" jsonschema:"the workspace the runs see"`
	StateDir  string           `json:"state_dir" jsonschema:"where run directories, held runs and the commit history live"`
	Policy    nsjail.PolicyRef `json:"policy" jsonschema:"the server's policy: name, hash and capabilities"`
	Held      []heldSummary    `json:"held" jsonschema:"held runs of this workspace, oldest first"`
	PoolError string           `json:"pool_error,omitempty" jsonschema:"the last error preparing or tearing down a pooled jail"`
	Healthy   bool             `json:"healthy" jsonschema:"every check the default policy needs passed"`
	Doctor    []nsjail.Check   `json:"doctor" jsonschema:"the checks of neonbox-ns doctor, including a real jailed run"`
}

func (s *mcpService) addTools(server *mcp.Server) {
	yes, no := true, false
	mcp.AddTool(server, &mcp.Tool{
		Name: "exec",
		Description: fmt.Sprintf("Run a command in a throwaway Linux jail over the workspace %s (policy %q: %s). "+
			"If it exits 0 its file changes are committed to the workspace, otherwise they are rolled back; with hold=true they are kept "+
			"for review (diff, commit, discard). Returns the run's receipt: status (SUCCESS, EXECUTION_ERROR, TIMEOUT, ...), exit_code, "+
			"stdout and stderr (at most 1 MiB each), changes, committed/held. A failing command is a receipt, not a tool error.",
			s.cfg.Workspace, s.cfg.Policy.Name, capsString(s.cfg.Policy)),
		Annotations: &mcp.ToolAnnotations{Title: "Run a command in a jail", DestructiveHint: &yes, OpenWorldHint: &no},
	}, s.exec)
	mcp.AddTool(server, &mcp.Tool{
		Name:        "diff",
		Description: "What a held run would change in the workspace: the list of added, modified and deleted paths with sizes, or with patch=true a unified diff.",
		Annotations: &mcp.ToolAnnotations{Title: "Show a held run's changes", ReadOnlyHint: true, OpenWorldHint: &no},
	}, s.diff)
	mcp.AddTool(server, &mcp.Tool{
		Name: "commit",
		Description: "Apply a held run's changes to the workspace, as an undoable transaction. Refused, applying nothing, " +
			"if the workspace changed any of the same paths since the run ended (the error lists them).",
		Annotations: &mcp.ToolAnnotations{Title: "Commit a held run", DestructiveHint: &yes, OpenWorldHint: &no},
	}, s.commit)
	mcp.AddTool(server, &mcp.Tool{
		Name:        "discard",
		Description: "Throw a held run's changes away.",
		Annotations: &mcp.ToolAnnotations{Title: "Discard a held run", DestructiveHint: &yes, IdempotentHint: true, OpenWorldHint: &no},
	}, s.discard)
	mcp.AddTool(server, &mcp.Tool{
		Name: "undo",
		Description: "Revert the last committed run on the workspace (repeat to go further back). Refused if a path " +
			"that commit wrote has changed since (the error lists them). Returns the undone run's id.",
		Annotations: &mcp.ToolAnnotations{Title: "Undo the last commit", DestructiveHint: &yes, OpenWorldHint: &no},
	}, s.undo)
	mcp.AddTool(server, &mcp.Tool{
		Name:        "status",
		Description: "The workspace, the policy and its capabilities, the held runs of this workspace, and a health check of the sandbox (neonbox-ns doctor).",
		Annotations: &mcp.ToolAnnotations{Title: "Sandbox status", ReadOnlyHint: true, OpenWorldHint: &no},
	}, s.status)
}

func (s *mcpService) exec(ctx context.Context, _ *mcp.CallToolRequest, in execInput) (*mcp.CallToolResult, *nsjail.Receipt, error) {
	var argv []string
	switch {
	case len(in.Command) > 0 && in.Shell != "":
		return nil, nil, errors.New("neonbox-ns exec: give command or shell, not both")
	case in.Shell != "":
		argv = []string{"sh", "-c", in.Shell}
	case len(in.Command) > 0 && in.Command[0] != "":
		argv = in.Command
	default:
		return nil, nil, errors.New("neonbox-ns exec: no command: give command (argv) or shell")
	}
	o := nsjail.Options{
		Command: argv, Workspace: s.cfg.Workspace, StateDir: s.cfg.StateDir, Cwd: s.cfg.Workspace,
		CaptureOutput: true, OutputLimit: nsjail.DefaultOutputLimit, Logger: s.cfg.Logger, Hold: in.Hold,
	}
	pol, changed, err := s.callPolicy(in.Allow, in.Deny)
	if err != nil {
		return nil, nil, fmt.Errorf("neonbox-ns exec: %w", err)
	}
	o.Policy = pol
	if in.Timeout != "" {
		if o.Timeout, err = units.ParseDuration(in.Timeout); err != nil {
			return nil, nil, fmt.Errorf("neonbox-ns exec: timeout: %w", err)
		}
	} else if pol.Timeout != "" {
		// Pool.Exec takes the timeout from the call only.
		if o.Timeout, err = time.ParseDuration(pol.Timeout); err != nil {
			return nil, nil, fmt.Errorf("neonbox-ns exec: policy timeout: %w", err)
		}
	}
	var r *nsjail.Receipt
	if in.Hold || changed {
		// The pool neither holds nor changes its policy per call.
		r, err = nsjail.Run(ctx, o)
	} else {
		r, err = s.pool.Exec(ctx, o)
	}
	if err != nil {
		return nil, nil, toolError("exec", err)
	}
	for _, w := range r.Warnings {
		s.cfg.Logger.Warn("neonbox-ns: "+strings.Trim(strconv.QuoteToGraphic(w), `"`), "run", r.ID)
	}
	return nil, r, nil
}

// callPolicy is the server's policy with a call's allow and deny applied,
// and whether that differs from the server's.
func (s *mcpService) callPolicy(allow, deny []string) (*policies.Policy, bool, error) {
	if len(allow) == 0 && len(deny) == 0 {
		return s.cfg.Policy, false, nil
	}
	p := s.cfg.Policy.Clone()
	for _, spec := range []struct {
		list  []string
		apply func(policies.Capability)
		name  string
	}{{allow, p.Allow, "allow"}, {deny, p.Deny, "deny"}} {
		for _, item := range spec.list {
			c := policies.Capability(strings.TrimSpace(item))
			if !slices.Contains(policies.Capabilities, c) {
				return nil, false, fmt.Errorf("%s %q: want fs-write, subprocess or network", spec.name, item)
			}
			// The operator chose the policy: an agent may narrow it,
			// not widen it.
			if spec.name == "allow" && !s.cfg.Policy.Has(c) {
				return nil, false, fmt.Errorf("allow %q: the server's policy %s does not grant it (start the server with a policy that does)", item, s.cfg.Policy.Name)
			}
			spec.apply(c)
		}
	}
	return p, !slices.Equal(p.Capabilities, s.cfg.Policy.Capabilities), nil
}

// loadHeld loads a held run of this server's workspace: the state dir may
// hold runs of other workspaces, which this server does not touch.
func (s *mcpService) loadHeld(cmd, id string) (*nsjail.HeldRun, error) {
	h, err := nsjail.LoadHeld(s.cfg.StateDir, id)
	if err != nil {
		return nil, toolError(cmd, err)
	}
	if h.Workspace != s.cfg.Workspace {
		return nil, fmt.Errorf("neonbox-ns %s: run %s belongs to the workspace %s, not %s", cmd, id, h.Workspace, s.cfg.Workspace)
	}
	return h, nil
}

func (s *mcpService) diff(_ context.Context, _ *mcp.CallToolRequest, in diffInput) (*mcp.CallToolResult, *diffOutput, error) {
	h, err := s.loadHeld("diff", in.RunID)
	if err != nil {
		return nil, nil, err
	}
	out := &diffOutput{RunID: h.ID}
	if in.Patch {
		b := &cappedBuffer{limit: nsjail.DefaultOutputLimit}
		if err := h.Patch(b); err != nil {
			return nil, nil, toolError("diff", err)
		}
		out.Patch, out.PatchTruncated = strings.ToValidUTF8(b.buf.String(), "\uFFFD"), b.truncated
		return nil, out, nil
	}
	plan, err := h.Diff()
	if err != nil {
		return nil, nil, toolError("diff", err)
	}
	out.Changes = &plan.Changes
	return nil, out, nil
}

func (s *mcpService) commit(ctx context.Context, _ *mcp.CallToolRequest, in runIDInput) (*mcp.CallToolResult, *nsjail.CommitResult, error) {
	if _, err := s.loadHeld("commit", in.RunID); err != nil {
		return nil, nil, err
	}
	res, err := nsjail.CommitHeld(ctx, s.cfg.StateDir, in.RunID, 0)
	var ce *overlay.ConflictError
	switch {
	case errors.As(err, &ce):
		return nil, nil, fmt.Errorf("neonbox-ns commit: conflict, nothing applied: the workspace changed these paths since run %s ended: %s",
			in.RunID, strings.Join(ce.Paths, ", "))
	case err != nil:
		return nil, nil, toolError("commit", err)
	}
	return nil, res, nil
}

func (s *mcpService) discard(_ context.Context, _ *mcp.CallToolRequest, in runIDInput) (*mcp.CallToolResult, *discardOutput, error) {
	if _, err := s.loadHeld("discard", in.RunID); err != nil {
		return nil, nil, err
	}
	if err := nsjail.DiscardHeld(s.cfg.StateDir, in.RunID); err != nil {
		return nil, nil, toolError("discard", err)
	}
	return nil, &discardOutput{RunID: in.RunID, Discarded: true}, nil
}

func (s *mcpService) undo(ctx context.Context, _ *mcp.CallToolRequest, _ emptyInput) (*mcp.CallToolResult, *nsjail.UndoResult, error) {
	res, err := nsjail.Undo(ctx, nsjail.WorkspaceOptions{Workspace: s.cfg.Workspace, StateDir: s.cfg.StateDir})
	var ce *overlay.ConflictError
	switch {
	case errors.As(err, &ce):
		return nil, nil, fmt.Errorf("neonbox-ns undo: refused, these paths changed since the commit: %s", strings.Join(ce.Paths, ", "))
	case err != nil:
		return nil, nil, toolError("undo", err)
	}
	return nil, res, nil
}

func (s *mcpService) status(ctx context.Context, _ *mcp.CallToolRequest, _ emptyInput) (*mcp.CallToolResult, *statusOutput, error) {
	stateDir := s.cfg.StateDir
	if stateDir == "" {
		stateDir = nsjail.DefaultStateDir()
	}
	p := s.cfg.Policy
	out := &statusOutput{
		Workspace: s.cfg.Workspace, StateDir: stateDir, Held: []heldSummary{},
		Policy: nsjail.PolicyRef{Name: p.Name, Hash: p.Hash(), Capabilities: []string{}},
	}
	for _, c := range p.Capabilities {
		out.Policy.Capabilities = append(out.Policy.Capabilities, string(c))
	}
	runs, err := nsjail.ListHeld(stateDir)
	if err != nil {
		return nil, nil, toolError("status", err)
	}
	for _, h := range runs {
		if h.Workspace == s.cfg.Workspace {
			out.Held = append(out.Held, heldSummary{
				ID: h.ID, Created: h.Created, Status: h.Status, ExitCode: h.ExitCode, SizeBytes: h.SizeBytes, Command: h.Command,
			})
		}
	}
	if err := s.pool.Err(); err != nil {
		out.PoolError = err.Error()
	}
	out.Doctor = nsjail.Doctor(ctx, stateDir)
	out.Healthy = nsjail.Healthy(out.Doctor)
	return nil, out, nil
}

// cappedBuffer keeps the first limit bytes written to it and drops the
// rest, never failing a write (a writer that failed would cut off the
// diff subprocess mid-file).
type cappedBuffer struct {
	buf       strings.Builder
	limit     int
	truncated bool
}

func (b *cappedBuffer) Write(p []byte) (int, error) {
	room := b.limit - b.buf.Len()
	if len(p) > room {
		b.truncated = true
		if room > 0 {
			b.buf.Write(p[:room])
		}
		return len(p), nil
	}
	b.buf.Write(p)
	return len(p), nil
}
