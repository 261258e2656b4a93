package nsjail

import (
	"encoding/json"
	"io"
	"sync"

	"github.com/neonbox/neonbox-ns/overlay"
)

// Status is the outcome of a run.
type Status string

// Run outcomes.
const (
	// StatusSuccess: CMD exited 0.
	StatusSuccess Status = "SUCCESS"
	// StatusExecutionError: CMD exited non-zero, died of a signal, or
	// could not be executed.
	StatusExecutionError Status = "EXECUTION_ERROR"
	// StatusTimeout: the run outlived its timeout and was killed.
	StatusTimeout Status = "TIMEOUT"
	// StatusCanceled: the caller canceled the run (context, or a signal
	// to neonbox-ns) and it was killed, or it never started: canceled
	// while it waited for its workspace's lock (Error.Stage "lock").
	StatusCanceled Status = "CANCELED"
	// StatusMemoryExceeded: the run hit its memory limit.
	StatusMemoryExceeded Status = "MEMORY_EXCEEDED"
	// StatusSecurityViolation: the run did something the sandbox refuses
	// to carry out or let pass.
	StatusSecurityViolation Status = "SECURITY_VIOLATION"
	// StatusDiskExceeded: the run filled its --disk limit; its changes
	// are rolled back.
	StatusDiskExceeded Status = "DISK_EXCEEDED"
	// StatusSandboxError: an isolation step failed; CMD did not run or
	// its result could not be committed.
	StatusSandboxError Status = "SANDBOX_ERROR"
)

// Exit statuses of neonbox-ns exec that are not CMD's own:
// ExitTimeout for StatusTimeout, ExitSandbox for StatusSandboxError,
// ExitViolation for StatusSecurityViolation without a signal (a refused
// commit), ExitCanceled for StatusCanceled, ExitMemory for
// StatusMemoryExceeded, and ExitUsage for invalid options or arguments
// (nothing was touched). See Receipt.ExitStatus.
const (
	ExitTimeout   = 124
	ExitSandbox   = 125
	ExitViolation = 123
	ExitCanceled  = 130
	ExitMemory    = 137
	ExitDisk      = 122
	ExitUsage     = 2
)

// Limits echoes the limits applied to a run (as the kernel took them).
type Limits struct {
	// MemoryBytes is the memory limit, CPUs the CPU limit as a fraction
	// of cores, Pids the most tasks the run may have at once, TimeoutMS
	// the run's timeout; 0 means none.
	MemoryBytes int64   `json:"memory_bytes,omitempty"`
	DiskBytes   int64   `json:"disk_bytes,omitempty"`
	CPUs        float64 `json:"cpus,omitempty"`
	Pids        int64   `json:"pids,omitempty"`
	TimeoutMS   int64   `json:"timeout_ms,omitempty"`
	// Unenforced is set when limits were asked for but the run went
	// ahead without them (--allow-unlimited).
	Unenforced bool `json:"unenforced,omitempty"`
}

// Phases splits total_ms into neonbox-ns's own steps, so that a
// regression points at its phase.
type Phases struct {
	// PrepareMS: checks, workspace lock, recovery, run dir, seccomp
	// filter, cgroup, until the init has its program.
	PrepareMS float64 `json:"prepare_ms"`
	// SpawnMS: clone into the namespaces and the init's setup, up to
	// CMD's execve. Where the jail can start before its cgroup exists
	// (v1, or no cgroups), the clone happens early in PrepareMS and
	// the two overlap.
	SpawnMS float64 `json:"spawn_ms"`
	// RunMS: CMD, from execve to the end of its pid namespace.
	RunMS float64 `json:"run_ms"`
	// FinishMS: reading the cgroup, planning, commit or rollback.
	FinishMS float64 `json:"finish_ms"`
	// TeardownMS: removing the cgroup and the run dir; with
	// TeardownHandedOver, handing them to the teardown helper.
	TeardownMS float64 `json:"teardown_ms"`
	// TeardownHandedOver: the helper that `neonbox-ns exec` forks
	// removes the run's cgroup and run dir after neonbox-ns has exited
	// (what it cannot remove, a later run's sweep does).
	TeardownHandedOver bool `json:"teardown_handed_over,omitempty"`
	// ParentPeakRSSKiB is the peak resident memory of the neonbox-ns
	// process itself (VmHWM) when the run ended.
	ParentPeakRSSKiB int64 `json:"parent_peak_rss_kib,omitempty"`
	// Spawn breaks SpawnMS down: milliseconds from the clone to the end
	// of each step of the jail's init ("started" is its first
	// instruction, "exec" when CMD's execve was seen to succeed).
	Spawn map[string]float64 `json:"spawn,omitempty"`
}

// PolicyRef names the policy a run had and the hash of its effective
// content (after --allow, --deny and other flags).
type PolicyRef struct {
	// Name is the policy's name, Hash "sha256:" and the hex digest of
	// its JSON, Capabilities what it grants (fs-write, subprocess,
	// network).
	Name         string   `json:"name"`
	Hash         string   `json:"hash"`
	Capabilities []string `json:"capabilities"`
}

// Receipt describes one run. Field names are a stable contract: fields may
// be added, never renamed.
type Receipt struct {
	// ID names the run; a held run is committed or discarded by it.
	// Status is its outcome. ExitCode is CMD's exit status (128+n if
	// signal n killed it; 126 or 127 if it could not be executed or was
	// not found) or, when the run did not end on its own (TIMEOUT,
	// CANCELED, MEMORY_EXCEEDED, a refused commit, SANDBOX_ERROR), the
	// Exit constant of its status. Signal names the signal that killed
	// CMD ("SIGSEGV"), or is nil. Command and Workspace are what ran and
	// where (the workspace absolute, with symlinks resolved).
	ID        string   `json:"id"`
	Status    Status   `json:"status"`
	ExitCode  int      `json:"exit_code"`
	Signal    *string  `json:"signal"`
	Command   []string `json:"command"`
	Workspace string   `json:"workspace"`

	// Times are in milliseconds. ExecutionTimeMS runs from CMD's execve
	// to its exit. CPUTimeMS is the run's user and system CPU time (from
	// its cgroup; without one, of CMD and the children it waited for).
	// SetupMS runs from the call to CMD's execve; CommitMS and
	// RollbackMS were spent applying or throwing away the changes
	// (RollbackMS is 0 when the teardown helper throws them away, after
	// neonbox-ns has exited: see Phases.TeardownHandedOver);
	// TotalMS is the whole call, and Phases splits it by step.
	// PeakMemoryMB is the peak memory of the run's cgroup in MiB (0
	// without a cgroup), PidsPeak the most tasks it held at once,
	// OOMKills the OOM kills in it (any makes the run MEMORY_EXCEEDED).
	ExecutionTimeMS float64 `json:"execution_time_ms"`
	CPUTimeMS       float64 `json:"cpu_time_ms"`
	SetupMS         float64 `json:"setup_ms"`
	CommitMS        float64 `json:"commit_ms"`
	RollbackMS      float64 `json:"rollback_ms"`
	TotalMS         float64 `json:"total_ms"`
	Phases          Phases  `json:"phases"`
	PeakMemoryMB    float64 `json:"peak_memory_mb"`
	PidsPeak        int64   `json:"pids_peak,omitempty"`
	OOMKills        int64   `json:"oom_kill,omitempty"`
	// CPUThrottled counts the CPU quota periods in which the run was
	// held back (cpu.stat nr_throttled).
	CPUThrottled int64 `json:"cpu_throttled_periods,omitempty"`

	// FilesystemModified says the run changed its view of the
	// workspace. Committed says the changes were applied to the
	// workspace (also when there was nothing to apply);
	// RollbackPerformed that they were thrown away. Changes lists what
	// the run added, modified and deleted, relative to the workspace,
	// whatever became of it.
	FilesystemModified bool `json:"filesystem_modified"`
	Committed          bool `json:"committed"`
	// Held says the changes were kept for neonbox-ns commit/discard ID.
	Held              bool            `json:"held,omitempty"`
	RollbackPerformed bool            `json:"rollback_performed"`
	Changes           overlay.Changes `json:"changes"`

	// Policy is the policy in effect. ScrubbedEnv names (never with
	// values) the host variables left out of the jail's environment.
	// Limits are the limits applied; Cgroup is "v2", "v1" or "none".
	// Error says which step failed, for SANDBOX_ERROR, a refused commit
	// or a command that could not be executed, and is nil otherwise.
	// Warnings are problems that did not change the outcome.
	Policy      PolicyRef  `json:"policy"`
	ScrubbedEnv []string   `json:"scrubbed_env"`
	Limits      Limits     `json:"limits"`
	Cgroup      string     `json:"cgroup"`
	Error       *StepError `json:"error"`
	Warnings    []string   `json:"warnings,omitempty"`

	// ProtectedPathsTouched lists changed paths the policy protects.
	ProtectedPathsTouched []string `json:"protected_paths_touched,omitempty"`

	// Stdout and Stderr are CMD's output, with Options.CaptureOutput
	// only; StdoutTruncated and StderrTruncated say that output beyond
	// Options.OutputLimit was dropped.
	Stdout          *string `json:"stdout,omitempty"`
	Stderr          *string `json:"stderr,omitempty"`
	StdoutTruncated *bool   `json:"stdout_truncated,omitempty"`
	StderrTruncated *bool   `json:"stderr_truncated,omitempty"`
}

// ExitStatus is the status neonbox-ns exec exits with for r.
func (r *Receipt) ExitStatus() int {
	switch r.Status {
	case StatusTimeout:
		return ExitTimeout
	case StatusSandboxError:
		return ExitSandbox
	case StatusMemoryExceeded:
		return ExitMemory
	case StatusDiskExceeded:
		return ExitDisk
	case StatusCanceled:
		return ExitCanceled
	case StatusSecurityViolation:
		if r.Signal != nil {
			return r.ExitCode
		}
		return ExitViolation
	}
	return r.ExitCode
}

// warmReceiptJSON has encoding/json build its encoder for Receipt, once
// per process. Run calls it while the first jail runs when the output is
// captured (neonbox-ns exec --json prints the receipt with it; a receipt
// written with --receipt alone is encoded cold): cold, building it took a
// few tenths of a millisecond between CMD's end and its receipt.
var warmReceiptJSON = sync.OnceFunc(func() { _ = (&Receipt{}).WriteJSON(io.Discard) })

// WriteJSON writes r as one indented JSON object.
func (r *Receipt) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	return enc.Encode(r)
}
