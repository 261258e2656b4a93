package nsjail

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/neonbox/neonbox-ns/cgroup"
	"github.com/neonbox/neonbox-ns/internal/jailinit"
	"github.com/neonbox/neonbox-ns/policies"
)

// CommitMode says when a run's changes reach the workspace.
type CommitMode string

// Commit modes. CommitOnSuccess, the default, commits a run that ends
// in StatusSuccess and rolls back any other. CommitAlways commits
// whatever CMD's exit status, unless the run ended in SANDBOX_ERROR or
// SECURITY_VIOLATION. CommitNever always rolls back; the receipt still
// lists the changes.
const (
	CommitOnSuccess CommitMode = "on-success"
	CommitAlways    CommitMode = "always"
	CommitNever     CommitMode = "never"
)

// ParseCommitMode parses the --commit flag.
func ParseCommitMode(s string) (CommitMode, error) {
	switch m := CommitMode(s); m {
	case CommitOnSuccess, CommitAlways, CommitNever:
		return m, nil
	}
	return "", fmt.Errorf("--commit %q: want on-success, always or never", s)
}

// ErrInvalid marks errors in a run's options: nothing was touched.
var ErrInvalid = errors.New("invalid options")

func invalidf(format string, a ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrInvalid}, a...)...)
}

// Options describe one run.
type Options struct {
	// Command is CMD and its arguments.
	Command []string
	// Workspace is the directory the run sees through overlayfs.
	Workspace string
	// StateDir holds the per-run directories; see DefaultStateDir.
	StateDir string
	// Commit says when changes are applied to the workspace.
	Commit CommitMode
	// Timeout ends the run when it expires; 0 means none.
	Timeout time.Duration
	// LockTimeout is how long to wait while another run holds the
	// workspace; 0 means DefaultLockTimeout, negative means not at all.
	LockTimeout time.Duration
	// Env selects the jail's environment from HostEnv, the host's
	// environment (nil means os.Environ()).
	Env     EnvSpec
	HostEnv []string
	// Cwd is the caller's working directory: inside the workspace, CMD
	// starts at the same path; elsewhere it starts at the workspace root.
	Cwd string
	// Stdin, Stdout and Stderr are CMD's; nil means /dev/null. As with
	// os/exec, an *os.File is passed to CMD as it is; anything else is
	// copied through a pipe by a goroutine: what the jail wrote is copied
	// for at most a second after it has ended (the rest is lost), and
	// stdin's copying is not waited for.
	Stdin          io.Reader
	Stdout, Stderr io.Writer
	// CaptureOutput records stdout and stderr in the receipt, at most
	// OutputLimit bytes each (0 means DefaultOutputLimit), instead of
	// passing them to Stdout/Stderr.
	CaptureOutput bool
	OutputLimit   int64
	// Logger receives debug logs of the run's steps; nil discards them.
	Logger *slog.Logger
	// Policy says what the run may do; nil means the built-in "default".
	// Options given here (Timeout, Env) take precedence over it.
	Policy *policies.Policy
	// Protect adds workspace paths (patterns) the run must not change
	// to the policy's protected paths.
	Protect []string
	// Limits override the policy's: each non-zero field replaces the
	// policy's value.
	Limits cgroup.Limits
	// AllowUnlimited runs even when limits were asked for and this host
	// cannot enforce them; the receipt says so.
	AllowUnlimited bool
	// KeepHistory is how many committed runs stay undoable; 0 means
	// DefaultKeepHistory.
	KeepHistory int
	// Hold keeps the run's changes instead of committing or discarding
	// them, for CommitHeld or DiscardHeld later.
	Hold bool
	// DiskBytes, when set, caps what the run may write: its changes go
	// to a tmpfs of that size, and filling it ends the run
	// DISK_EXCEEDED and rolled back (root only; Linux 6.6 or newer, for
	// user xattrs on tmpfs). Such a commit copies and is not undoable.
	DiskBytes int64
}

// effectiveLimits merges the policy's limits with o.Limits.
func (o *Options) effectiveLimits() cgroup.Limits {
	l := policyLimits(o.Policy)
	if o.Limits.MemoryBytes > 0 {
		l.MemoryBytes = o.Limits.MemoryBytes
	}
	if o.Limits.CPUs > 0 {
		l.CPUs = o.Limits.CPUs
	}
	if o.Limits.Pids > 0 {
		l.Pids = o.Limits.Pids
	}
	return l
}

// policyLimits converts a policy's OCI-shaped limits.
func policyLimits(p *policies.Policy) cgroup.Limits {
	var l cgroup.Limits
	r := p.Limits
	if r == nil {
		return l
	}
	if r.Memory != nil && r.Memory.Limit != nil {
		l.MemoryBytes = *r.Memory.Limit
	}
	if r.CPU != nil && r.CPU.Quota != nil {
		period := uint64(100000)
		if r.CPU.Period != nil {
			period = *r.CPU.Period
		}
		l.CPUs = float64(*r.CPU.Quota) / float64(period)
	}
	if r.Pids != nil && r.Pids.Limit != nil {
		l.Pids = *r.Pids.Limit
	}
	return l
}

// DefaultOutputLimit bounds each captured stream.
const DefaultOutputLimit = 1 << 20

// DefaultStateDir is /var/lib/neonbox for root and
// $XDG_STATE_HOME/neonbox (or ~/.local/state/neonbox) for other users.
func DefaultStateDir() string {
	if os.Geteuid() == 0 {
		return jailinit.RootStateDir
	}
	if d := os.Getenv("XDG_STATE_HOME"); filepath.IsAbs(d) {
		return filepath.Join(d, "neonbox")
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return filepath.Join(os.TempDir(), fmt.Sprintf("neonbox-%d", os.Geteuid()))
	}
	return filepath.Join(home, ".local", "state", "neonbox")
}

// normalize checks o and fills in defaults; workspace and state dir come
// back absolute with symlinks resolved.
func (o *Options) normalize() error {
	if len(o.Command) == 0 || o.Command[0] == "" {
		return invalidf("no command to run")
	}
	if o.Commit == "" {
		o.Commit = CommitOnSuccess
	}
	if o.Policy == nil {
		p, err := policies.Builtin("default")
		if err != nil {
			return err
		}
		o.Policy = p
	}
	if problems := o.Policy.Validate(); len(problems) > 0 {
		return invalidf("%v", &policies.InvalidError{Problems: problems})
	}
	if o.Timeout == 0 && o.Policy.Timeout != "" {
		o.Timeout, _ = time.ParseDuration(o.Policy.Timeout)
	}
	if o.Limits.MemoryBytes < 0 || o.Limits.Pids < 0 || o.Limits.CPUs < 0 || o.DiskBytes < 0 {
		return invalidf("negative limit")
	}
	if o.DiskBytes > 0 {
		if os.Geteuid() != 0 {
			return invalidf("--disk needs root (the run's changes go to a tmpfs neonbox-ns mounts)")
		}
		if ma, mi, rel := kernelVersion(); ma < 6 || ma == 6 && mi < 6 {
			return invalidf("--disk needs Linux 6.6 or newer (user xattrs on tmpfs, for overlayfs); this is %s", rel)
		}
	}
	for _, g := range o.Protect {
		if !policies.ValidGlob(g) {
			return invalidf("--protect %q: want a pattern relative to the workspace, like .env or secrets/**", g)
		}
	}
	if _, err := ParseCommitMode(string(o.Commit)); err != nil {
		return invalidf("%v", err)
	}
	if o.Timeout < 0 {
		return invalidf("negative timeout %v", o.Timeout)
	}
	if o.LockTimeout == 0 {
		o.LockTimeout = DefaultLockTimeout
	} else if o.LockTimeout < 0 {
		o.LockTimeout = 0
	}
	if o.KeepHistory <= 0 {
		o.KeepHistory = DefaultKeepHistory
	}
	if o.OutputLimit <= 0 {
		o.OutputLimit = DefaultOutputLimit
	}
	if o.HostEnv == nil {
		o.HostEnv = os.Environ()
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	var err error
	if o.Cwd == "" {
		if o.Cwd, err = os.Getwd(); err != nil {
			return invalidf("working directory: %v", err)
		}
	}
	if o.Workspace == "" {
		o.Workspace = o.Cwd
	}
	if o.Workspace, err = resolveDir(o.Workspace, "workspace"); err != nil {
		return err
	}
	if o.Workspace == "/" {
		return invalidf("workspace: / cannot be a workspace")
	}
	for _, special := range []string{"/proc", "/dev", "/sys"} {
		if within(o.Workspace, special) {
			return invalidf("workspace %s: inside %s", o.Workspace, special)
		}
	}
	if o.StateDir == "" {
		o.StateDir = DefaultStateDir()
	}
	if !filepath.IsAbs(o.StateDir) {
		if o.StateDir, err = filepath.Abs(o.StateDir); err != nil {
			return invalidf("state dir: %v", err)
		}
	}
	if within(filepath.Clean(o.StateDir), o.Workspace) {
		return invalidf("state dir %s is inside the workspace %s", o.StateDir, o.Workspace)
	}
	if err := os.MkdirAll(o.StateDir, 0o711); err != nil {
		return invalidf("state dir: %v", err)
	}
	if o.StateDir, err = resolveDir(o.StateDir, "state dir"); err != nil {
		return err
	}
	if within(o.StateDir, o.Workspace) {
		return invalidf("state dir %s is inside the workspace %s", o.StateDir, o.Workspace)
	}
	if within(o.Workspace, o.StateDir) {
		return invalidf("workspace %s is inside the state dir %s", o.Workspace, o.StateDir)
	}
	if err := checkTraversable(o.StateDir); err != nil {
		return err
	}
	if strings.ContainsAny(o.StateDir, ",:\\\n") {
		return invalidf("state dir %q: must not contain , : \\ or a newline (overlayfs options)", o.StateDir)
	}
	if c, err := filepath.EvalSymlinks(o.Cwd); err == nil {
		o.Cwd = c
	}
	if !within(o.Cwd, o.Workspace) {
		o.Cwd = o.Workspace
	}
	return nil
}

func resolveDir(p, what string) (string, error) {
	abs, err := filepath.Abs(p)
	if err != nil {
		return "", invalidf("%s %s: %v", what, p, err)
	}
	real, err := filepath.EvalSymlinks(abs)
	if err != nil {
		return "", invalidf("%s %s does not exist", what, p)
	}
	st, err := os.Stat(real)
	if err != nil {
		return "", invalidf("%s %s: %v", what, p, err)
	}
	if !st.IsDir() {
		return "", invalidf("%s %s is not a directory", what, p)
	}
	return real, nil
}

// within reports whether p is dir or below it (both clean and absolute).
func within(p, dir string) bool {
	return p == dir || strings.HasPrefix(p, strings.TrimSuffix(dir, "/")+"/")
}

// checkTraversable makes sure that, as root, the jail's unprivileged ids
// can reach the state dir: its init mounts on run directories there.
func checkTraversable(dir string) error {
	if os.Geteuid() != 0 {
		return nil
	}
	for p := dir; ; p = filepath.Dir(p) {
		st, err := os.Stat(p)
		if err != nil {
			return invalidf("state dir: %v", err)
		}
		if st.Mode().Perm()&0o001 == 0 {
			return invalidf("state dir %s: the jail's ids cannot reach it, %s has mode %#o (needs o+x)", dir, p, st.Mode().Perm())
		}
		if p == "/" {
			return nil
		}
	}
}
