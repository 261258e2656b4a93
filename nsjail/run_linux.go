package nsjail

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/neonbox/neonbox-ns/cgroup"
	"github.com/neonbox/neonbox-ns/internal/jailinit"
	"github.com/neonbox/neonbox-ns/internal/linux"
	"github.com/neonbox/neonbox-ns/overlay"
	"github.com/neonbox/neonbox-ns/policies"
	"github.com/neonbox/neonbox-ns/seccomp"
)

// jailHome is HOME inside the jail: on the jail's private /tmp, so caches
// never land in the workspace and vanish with the run.
const jailHome = "/tmp/home"

// Run runs one command in a fresh jail and reports what happened. The
// error is non-nil only for invalid options (errors.Is(err, ErrInvalid)),
// in which case nothing was touched; every other failure is a receipt
// with status SANDBOX_ERROR.
func Run(ctx context.Context, o Options) (*Receipt, error) {
	t0 := time.Now()
	ws, ids, err := o.prepare()
	if err != nil {
		return nil, err
	}
	o.Env.Policy = o.Policy.Env
	env, scrubbed, err := BuildEnv(o.HostEnv, o.Env, jailHome)
	if err != nil {
		return nil, invalidf("%v", err)
	}
	id := newRunID()
	log := o.Logger.With("run", id)
	// In `neonbox-ns exec`, a helper forked before the Go runtime
	// removes the run's cgroup and run dir after neonbox-ns has exited
	// (td's socket is never closed here: its end at this process's exit
	// starts the helper).
	// Not for a --disk run dir, a mount of its own.
	td := jailinit.TakeTeardown() // once per process
	if td != nil && o.DiskBytes > 0 {
		_ = td.Close() // the helper exits
		td = nil
	}
	var stdout, stderr *boundedBuffer
	if o.CaptureOutput {
		stdout = &boundedBuffer{limit: o.OutputLimit}
		stderr = &boundedBuffer{limit: o.OutputLimit}
		o.Stdout, o.Stderr = stdout, stderr
	}
	network := o.Policy.Has(policies.Network)

	var rd runDir         // reserved below; removing the zero runDir does nothing
	var cg *cgroup.Cgroup // made below, once the jail has work of its own

	// own writes the run dir's owner file, by which a later run finds
	// and removes what this one leaves if it is killed, once: before the
	// cgroup, which such a run removes too, and while the jail mounts
	// its workspace (0.1-0.5 ms of ext4 metadata, which were on the
	// jail's way to its command before it), or before anything that may
	// take long (see reserveRunDir). Its failure is a *StepError of
	// the "state" stage, whichever step had to write it first.
	own := sync.OnceValue(func() error {
		if rd.path == "" {
			return nil
		}
		if err := rd.writeOwner(); err != nil {
			return stepError("state", err)
		}
		return nil
	})

	// Whether the jail starts before its cgroup exists (below).
	early := !cgroup.Unified() && o.DiskBytes == 0
	var j *jail
	var base []byte // the base of the init's program
	// The base the prestart queued, and the host's stamp: the base can
	// be taken as it is, or be stamped for the next run (stampBase).
	var queued []byte
	var host [sha256.Size]byte
	var hostOK, stamped, stampBase bool

	r := &Receipt{
		ID:          id,
		Command:     o.Command,
		Workspace:   o.Workspace,
		ScrubbedEnv: scrubbed,
		Cgroup:      "none",
		Limits:      Limits{TimeoutMS: o.Timeout.Milliseconds()},
		Changes:     emptyChanges(),
	}
	if r.ScrubbedEnv == nil {
		r.ScrubbedEnv = []string{}
	}
	var tFinished time.Time
	var released chan struct{} // closed once the jail's mounts are gone
	var ended *jailResult      // once the jail has ended, with its mount namespace if td takes it
	var helper string          // td's identity, learnt while the jail starts
	defer func() {
		r.Policy = policyRef(o.Policy)
		if td != nil {
			if helper == "" { // not learnt: the run ended before its jail had its command
				helper = helperIdentity(td)
				_ = own() // for the helper to join (else the cleanup is ours)
			}
			if err := handTeardown(td, helper, cg, rd, r.Held, ended); err != nil {
				// Nothing was handed over: the cleanup is this process's.
				log.Debug("teardown helper", "err", err)
				_ = td.Close() // the helper exits
				if ended != nil {
					ended.releaseMountNS()
				}
			} else {
				r.Phases.TeardownHandedOver = true
			}
		}
		if !r.Phases.TeardownHandedOver {
			r.cleanUp(cg, rd, released)
		}
		if j != nil && j.writeBase {
			// For the next run's prestarted init (the CLI's).
			// A base not written is never stamped: the stamp names
			// the base by its hash, and the next run's queued base is
			// the one the state dir still holds.
			if err := writePrestartBase(o.StateDir, base); err != nil {
				log.Debug("prestart base", "err", err)
			}
		}
		if stamped && r.Status == StatusSandboxError {
			// Whatever failed, the next run surveys the host again.
			_ = os.Remove(filepath.Join(o.StateDir, baseStampFile))
		}
		if j != nil && stampBase && (j.writeBase || bytes.Equal(queued, base)) {
			// The state dir's base is this run's: stamp it.
			if err := writeBaseStamp(o.StateDir, base, host); err != nil {
				log.Debug("prestart base stamp", "err", err)
			}
		}
		r.TotalMS = ms(time.Since(t0))
		r.Phases.ParentPeakRSSKiB = peakRSS()
		if !tFinished.IsZero() {
			r.Phases.TeardownMS = ms(time.Since(tFinished))
		}
	}()
	handed := false // to await, which waits for the jail's end
	killUnhanded := func() {
		if j != nil && !handed {
			j.kill()
			handed = true
		}
	}
	defer killUnhanded()

	// The run dir first, then the cgroup. The jail waits for its run
	// dir on the way to the rest of its program, which mounts the
	// workspace: so fill comes only once the workspace is locked and
	// whole.
	if rd, err = reserveRunDir(o.StateDir, id, o.DiskBytes == 0); err != nil {
		r.sandboxError(stepError("state", err))
		return r, nil
	}
	cfg, err := bareJailConfig(&o, ids)
	if err != nil {
		r.sandboxError(stepError("state", err))
		return r, nil
	}
	cfg.Argv, cfg.Env, cfg.Cwd = o.Command, env, o.Cwd
	cfg.DevPts = anyTerminal(o.Stdin, o.Stdout, o.Stderr)
	// The base of the init's program: the one the prestart queued,
	// where the host still stamps as when it was written
	// (stamp_linux.go), else built from a survey of the host.
	if early && !network && ids.rootful {
		var adopted bool
		if queued, adopted = queuedBase(); adopted {
			// Only a prestarted init's base is stamped, or queued.
			host, hostOK = hostStamp()
		}
	}
	stamped = hostOK && queued != nil && stampedBase(o.StateDir, queued, host)
	if stamped {
		base = queued
	} else {
		cfg.addHostView()
		if base, err = baseProgram(cfg); err != nil {
			r.sandboxError(asStepError("config", err))
			return r, nil
		}
		stampBase = hostOK
	}
	// Where the jail can be born before its cgroup exists (no unified
	// cgroup2 mount: a v1 cgroup, or none; the init joins at the end of
	// its program), it starts now and its start overlaps with all that
	// follows; it may even have started before this process's Go
	// runtime did, and built the base already (the neonbox-ns CLI's
	// exec). On v2 it is cloned into the cgroup (CLONE_INTO_CGROUP), so
	// the cgroup comes first; with --disk the run dir is a tmpfs mounted
	// below, which a jail started before would not see.
	if early {
		var spawnErr error
		j, spawnErr = startJail(o.Stdin, o.Stdout, o.Stderr, network, ids, nil, base)
		if j != nil {
			r.Warnings = append(r.Warnings, j.warnings...)
		}
		if spawnErr != nil {
			r.sandboxError(asStepError("spawn", spawnErr))
			r.RollbackPerformed = true
			return r, nil
		}
		// The init builds the base of the jail meanwhile; a failure
		// is reported by await.
		_ = j.sendBase(base)
		if stamped {
			j.mark("base_stamped")
		}
	}

	lock, err := lockWorkspace(ctx, o.StateDir, o.Workspace, o.LockTimeout, cfg.ReadOnlyWorkspace, own)
	if err != nil {
		r.lockFailed(ctx, asStepError("lock", err))
		return r, nil
	}
	// A jail still alive at a return from here on goes before the lock
	// does: it may have the workspace mounted over its lower layer.
	defer func() {
		killUnhanded()
		lock.release()
	}()
	notes, err := recoverWorkspace(o.StateDir, o.Workspace, own)
	r.Warnings = append(r.Warnings, notes...)
	if err != nil {
		r.sandboxError(asStepError("recover", err))
		return r, nil
	}
	if o.DiskBytes > 0 {
		// Before the tmpfs covers the run dir: what is under it needs
		// its owner too (until a cleanup that unmounts first is done).
		if err := own(); err != nil {
			r.sandboxError(asStepError("state", err))
			return r, nil
		}
	}
	if err := rd.fill(o.Workspace, ids, &ws, o.DiskBytes); err != nil {
		r.sandboxError(stepError("state", err))
		return r, nil
	}
	cfg.RunDir, cfg.OneFS = rd.path, rd.onFS(ws.Dev)
	// The filters come with the rest: the init drops every privilege
	// and loads neonbox-ns's own filter before it waits for the cgroup.
	if cfg.Seccomp, err = compileFilters(o.Policy, o.StateDir); err != nil {
		r.sandboxError(stepError("seccomp", err))
		return r, nil
	}
	if early {
		// Started before its cgroup: the rest now, the final part
		// later. The init mounts the workspace, pivots, takes its
		// command and drops its privileges while the cgroup is made
		// here; a failure is reported by await. (Made by a goroutine
		// from the start instead, the cgroup was ready later: on two
		// CPUs, one the init's, the goroutine often waited for main
		// to block, and then for the CPU.)
		_ = j.configureRest(cfg, nil)
	}
	if err := own(); err != nil {
		r.sandboxError(asStepError("state", err))
		return r, nil
	}
	cg, err = r.newCgroup(&o, log, cgroup.Probe().WithoutFreezer())
	if err != nil {
		r.sandboxError(stepError("cgroup", err))
		return r, nil
	}
	if !early {
		// Born in its v2 cgroup, and after a --disk run dir's mount.
		if j, err = startJail(o.Stdin, o.Stdout, o.Stderr, network, ids, cg, nil); err != nil {
			r.sandboxError(asStepError("spawn", err))
			r.RollbackPerformed = true
			return r, nil
		}
		r.Warnings = append(r.Warnings, j.warnings...)
		_ = j.sendBase(base)
	}
	runCtx := ctx
	if o.Timeout > 0 {
		var cancel context.CancelFunc
		runCtx, cancel = context.WithTimeoutCause(ctx, o.Timeout, errTimeout)
		defer cancel()
	}
	log.Debug("configuring jail", "workspace", o.Workspace, "rundir", rd.path)
	// A failure is in j.res for await.
	if early {
		_ = j.configureFinal(cfg, cg)
	} else {
		_ = j.configure(cfg, cg)
	}
	r.Phases.PrepareMS = ms(time.Since(t0))
	handed = true
	// While the init joins the cgroup and execs CMD: what the run's
	// end reads, and what is not the jail's business. The sweep goes
	// beside the run (it can take seconds: an abandoned run's cgroup
	// killed, its upper dir removed), not before await, which enforces
	// the timeout.
	if cg != nil {
		cg.OpenStats()
	}
	swept := make(chan []string, 1)
	go func() { swept <- sweepAbandoned(o.StateDir) }()
	if td != nil {
		helper = helperIdentity(td)
	}
	if o.CaptureOutput {
		// The receipt is printed as JSON with the output (neonbox-ns
		// exec --json): its encoder is built while the jail runs.
		go warmReceiptJSON()
	}
	res := j.await(runCtx)
	r.Warnings = append(r.Warnings, <-swept...)
	tSpawn := res.clone
	if td != nil {
		ended = res // the helper takes its mount namespace
	} else {
		// The jail's mounts go while the result is read, the workspace
		// finished and the run dir removed (overlay only holds
		// references to its upper and work dirs; nothing can use it
		// any more).
		released = make(chan struct{})
		go func() { res.releaseMountNS(); close(released) }()
	}
	if stdout != nil {
		r.Stdout, r.StdoutTruncated = stdout.result()
		r.Stderr, r.StderrTruncated = stderr.result()
	}
	r.classify(res)
	if !res.execStart.IsZero() {
		r.SetupMS = ms(res.execStart.Sub(t0))
		r.Phases.SpawnMS = ms(res.execStart.Sub(tSpawn))
		r.Phases.RunMS = ms(res.exitTime.Sub(res.execStart))
		r.Phases.Spawn = map[string]float64{}
		for _, s := range res.steps {
			r.Phases.Spawn[s.Name] = ms(time.Duration(s.At - res.forked))
		}
	} else {
		r.Phases.SpawnMS = ms(res.exitTime.Sub(tSpawn))
	}
	if cg != nil {
		r.readCgroup(cg)
	}
	if o.DiskBytes > 0 {
		r.Limits.DiskBytes = o.DiskBytes
		if rd.full() && r.Status != StatusSandboxError {
			r.Status, r.ExitCode = StatusDiskExceeded, ExitDisk
			r.Error = &StepError{Stage: "disk", Message: fmt.Sprintf("the run filled its --disk limit of %d bytes", o.DiskBytes)}
		}
	}
	log.Debug("jail ended", "status", r.Status, "exit", r.ExitCode)
	r.finishWorkspace(&o, rd, ids, td != nil, log)
	tFinished = time.Now()
	r.Phases.FinishMS = ms(tFinished.Sub(res.exitTime))
	return r, nil
}

// cleanUp removes the run's cgroup (Delete kills what is left) while the
// run dir is removed, but for its owner file, which goes last; then it
// waits for the jail's mounts to go (released, if not nil).
func (r *Receipt) cleanUp(cg *cgroup.Cgroup, rd runDir, released chan struct{}) {
	cgDeleted := make(chan error, 1)
	if cg != nil {
		go func() { cgDeleted <- cg.Delete() }()
	} else {
		cgDeleted <- nil
	}
	cgErr := sync.OnceValue(func() error { return <-cgDeleted })
	if err := rd.removeAfter(cgErr); err != nil {
		r.Warnings = append(r.Warnings, "clean up run dir: "+err.Error())
	}
	if err := cgErr(); err != nil {
		r.Warnings = append(r.Warnings, "remove cgroup: "+err.Error())
	}
	if released != nil {
		<-released
	}
}

func emptyChanges() overlay.Changes {
	return overlay.Changes{Added: []overlay.Change{}, Modified: []overlay.Change{}, Deleted: []overlay.Change{}}
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// jailConfig describes the jail o asks for, but for the command, the run
// dir and the seccomp filters.
func jailConfig(o *Options, ids idPlan) (*childConfig, error) {
	cfg, err := bareJailConfig(o, ids)
	if err == nil {
		cfg.addHostView()
	}
	return cfg, err
}

// addHostView adds the host's system directories and masked files
// (hostView), which the base of the init's program needs.
func (c *childConfig) addHostView() {
	view := hostView()
	c.ReadOnly, c.Symlinks, c.Masked = view.readOnly, view.symlinks, view.masked
	c.noHostView = false
}

// bareJailConfig is jailConfig without the host's directories: enough for
// all but the base of the init's program.
func bareJailConfig(o *Options, ids idPlan) (*childConfig, error) {
	mnt, err := rootMount(o.StateDir)
	if err != nil {
		return nil, err
	}
	return &childConfig{
		noHostView:  true,
		RootMount:   mnt,
		Workspace:   o.Workspace,
		WorkspaceFD: ids.rootful,
		UID:         ids.jailUID,
		GID:         ids.jailGID,
		SetGroups:   ids.setGroups(),

		ReadOnlyWorkspace: !o.Policy.Has(policies.FSWrite),
		Network:           o.Policy.Has(policies.Network),
		Binds:             policyBinds(o.Policy),
	}, nil
}

// asStepError is err if it is a StepError, else a StepError of stage.
func asStepError(stage string, err error) *StepError {
	var se *StepError
	if errors.As(err, &se) {
		return se
	}
	return stepError(stage, err)
}

func (r *Receipt) sandboxError(se *StepError) {
	r.Status, r.ExitCode, r.Error = StatusSandboxError, ExitSandbox, withRemedy(se)
}

// lockFailed reports a run that did not get its workspace's lock: one
// whose context ended while it waited (a signal to neonbox-ns, the
// caller's cancellation) was canceled, as a run canceled later is; any
// other failure is the sandbox's.
func (r *Receipt) lockFailed(ctx context.Context, se *StepError) {
	if ctx.Err() == nil {
		r.sandboxError(se)
		return
	}
	r.Status, r.ExitCode, r.Error = StatusCanceled, ExitCanceled, se
}

// classify sets status, exit code, signal and times from how the jail
// ended.
func (r *Receipt) classify(res *jailResult) {
	if res.state != nil {
		ru := &res.state.rusage
		r.CPUTimeMS = ms(time.Duration(ru.Utime.Nano() + ru.Stime.Nano()))
	}
	if !res.execStart.IsZero() {
		r.ExecutionTimeMS = ms(res.exitTime.Sub(res.execStart))
	}
	switch {
	case errors.Is(res.cause, errTimeout):
		r.Status, r.ExitCode = StatusTimeout, ExitTimeout
		return
	case res.cause != nil:
		r.Status, r.ExitCode = StatusCanceled, ExitCanceled
		return
	case res.setupErr != nil && res.setupErr.Stage == "exec":
		r.Status, r.Error = StatusExecutionError, res.setupErr
		r.ExitCode = 126
		if res.setupErr.Errno == int(unix.ENOENT) {
			r.ExitCode = 127
		}
		return
	case res.setupErr != nil:
		r.sandboxError(res.setupErr)
		return
	case res.state == nil || res.state.err != nil:
		// How CMD ended is not known: never reported as a success.
		err := errors.New("no exit status")
		if res.state != nil {
			err = res.state.err
		}
		r.sandboxError(stepError("wait", err))
		return
	}
	ws := res.state.status
	switch {
	case ws.Signaled():
		name := unix.SignalName(ws.Signal())
		r.Signal = &name
		r.ExitCode = 128 + int(ws.Signal())
		r.Status = StatusExecutionError
		if ws.Signal() == unix.SIGSYS {
			r.Status = StatusSecurityViolation
		}
	case ws.ExitStatus() == 0:
		r.Status = StatusSuccess
	default:
		r.Status, r.ExitCode = StatusExecutionError, ws.ExitStatus()
	}
}

// finishWorkspace commits or discards the run's upper dir. It runs after
// the jail's pid namespace is gone, and with it the overlay mount. With
// handOver, a rollback leaves the upper dir to the teardown helper, which
// removes the whole run dir after neonbox-ns has exited: nothing can
// reach it any more, and a large one takes long to remove.
func (r *Receipt) finishWorkspace(o *Options, rd runDir, ids idPlan, handOver bool, log *slog.Logger) {
	if !o.Policy.Has(policies.FSWrite) {
		return // the workspace was read-only: nothing to commit or undo
	}
	wantCommit := false
	switch o.Commit {
	case CommitAlways:
		wantCommit = r.Status != StatusSandboxError && r.Status != StatusSecurityViolation && r.Status != StatusDiskExceeded
	case CommitOnSuccess:
		wantCommit = r.Status == StatusSuccess
	}
	plan, err := planCommit(rd.upper(), o.Workspace, ids.commitIDs())
	switch {
	case err == nil:
		log.Debug("commit plan", "ops", plan.Ops)
		r.Changes = plan.Changes
		r.FilesystemModified = !plan.Changes.Empty()
		r.ProtectedPathsTouched = protectedTouched(plan.Changes, slices.Concat(o.Policy.ProtectedPaths, o.Protect))
		if len(r.ProtectedPathsTouched) > 0 && wantCommit {
			r.Status, r.ExitCode = StatusSecurityViolation, ExitViolation
			r.Error = &StepError{Stage: "commit", Op: "gate", Message: "the run changed protected paths: " + quoted(r.ProtectedPathsTouched)}
			wantCommit = false
		}
	case !wantCommit:
		r.Warnings = append(r.Warnings, "list changes: "+err.Error())
	case errors.Is(err, overlay.ErrRefused):
		r.Status, r.ExitCode = StatusSecurityViolation, ExitViolation
		r.Error = &StepError{Stage: "commit", Op: "plan", Message: err.Error()}
		wantCommit = false
	default:
		r.sandboxError(stepError("commit", err))
		wantCommit = false
	}
	if o.Hold && err == nil {
		if err := holdRun(o, r, rd, plan, ids); err != nil {
			r.sandboxError(stepError("hold", err))
		} else {
			r.Held = true
			return
		}
	}
	if wantCommit && len(plan.Ops) == 0 {
		r.Committed = true // nothing to apply: no transaction, no history entry
		return
	}
	if wantCommit {
		t := time.Now()
		warnings, err := commitPlan(plan, rd.upper(), o.Workspace, o.StateDir, r.ID, ids.commitIDs(), o.KeepHistory)
		r.CommitMS = ms(time.Since(t))
		r.Warnings = append(r.Warnings, warnings...)
		if err != nil {
			r.sandboxError(stepError("commit", err))
			return
		}
		r.Committed = true
		return
	}
	r.RollbackPerformed = true
	if handOver {
		return
	}
	t := time.Now()
	if err := rd.discardUpper(); err != nil {
		r.Warnings = append(r.Warnings, "discard changes: "+err.Error())
	}
	r.RollbackMS = ms(time.Since(t))
}

// commitPlan commits plan as a transaction kept for undo, or, with the
// state dir on another filesystem, by copying; it returns warnings to
// report.
func commitPlan(plan *overlay.Plan, upper, workspace, stateDir, runID string, ids overlay.IDMap, keep int) ([]string, error) {
	var warnings []string
	txnDir := newTxnDir(stateDir, workspace, runID)
	if err := os.WriteFile(filepath.Join(filepath.Dir(upper), committingMarker), []byte(txnDir), 0o600); err != nil {
		return nil, err
	}
	err := overlay.Commit(plan, upper, workspace, txnDir, runID, ids, nil)
	if errors.Is(err, overlay.ErrCrossDevice) {
		// rename(2) cannot move the changes: copy them, without the
		// journal's all-or-nothing guarantee or undo.
		warnings = append(warnings, "the state dir is on another filesystem than the workspace: the commit copied files, is not transactional and cannot be undone")
		if err = overlay.Apply(plan, upper, workspace, ids); err != nil {
			warnings = append(warnings, "the workspace may hold part of the change set")
		}
	}
	if err != nil {
		return warnings, err
	}
	if err := pruneHistory(stateDir, workspace, keep); err != nil {
		warnings = append(warnings, "prune history: "+err.Error())
	}
	return warnings, nil
}

func planCommit(upper, workspace string, ids overlay.IDMap) (*overlay.Plan, error) {
	up, err := overlay.OpenDirTree(upper, true)
	if err != nil {
		return nil, err
	}
	defer up.Close()
	ws, err := overlay.OpenDirTree(workspace, false)
	if err != nil {
		return nil, err
	}
	defer ws.Close()
	plan, err := overlay.PlanCommit(up, ws, ids)
	if err != nil {
		return nil, fmt.Errorf("plan: %w", err)
	}
	if err := overlay.Digest(up, &plan.Changes); err != nil {
		return nil, fmt.Errorf("plan: %w", err)
	}
	if plan.Changes.Added == nil {
		plan.Changes.Added = []overlay.Change{}
	}
	if plan.Changes.Modified == nil {
		plan.Changes.Modified = []overlay.Change{}
	}
	if plan.Changes.Deleted == nil {
		plan.Changes.Deleted = []overlay.Change{}
	}
	return plan, nil
}

// anyTerminal reports whether one of the streams is a terminal.
func anyTerminal(streams ...any) bool {
	for _, s := range streams {
		if f, ok := s.(*os.File); ok && f != nil {
			if _, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS); err == nil {
				return true
			}
		}
	}
	return false
}

func policyRef(p *policies.Policy) PolicyRef {
	caps := []string{}
	for _, c := range p.Capabilities {
		caps = append(caps, string(c))
	}
	return PolicyRef{Name: p.Name, Hash: p.Hash(), Capabilities: caps}
}

// compileFilters returns neonbox-ns's own filter and, stacked after it,
// the policy's: the kernel applies both, so a policy can only restrict.
// Compiled programs are kept in the state dir, so that a new neonbox-ns
// process reads them back instead of compiling them again.
func compileFilters(p *policies.Policy, stateDir string) ([][]byte, error) {
	cache := filepath.Join(stateDir, "seccomp")
	own, err := seccomp.CompileDefaultIn(cache, p.Has(policies.Subprocess))
	if err != nil {
		return nil, err
	}
	out := [][]byte{own.BPF}
	if p.Seccomp != nil {
		extra, err := seccomp.CompileIn(cache, p.Seccomp)
		if err != nil {
			return nil, fmt.Errorf("policy %s: %w", p.Name, err)
		}
		out = append(out, extra.BPF)
	}
	return out, nil
}

func policyBinds(p *policies.Policy) []bind {
	if p.Binds == nil {
		return nil
	}
	var out []bind
	for _, d := range p.Binds.ReadOnly {
		out = append(out, bind{Path: d, ReadOnly: true})
	}
	for _, d := range p.Binds.ReadWrite {
		out = append(out, bind{Path: d})
	}
	return out
}

// protectedTouched lists the changed paths that match a protected
// pattern. The gate works on the change list, so it also catches paths
// that did not exist before the run.
func protectedTouched(c overlay.Changes, globs []string) []string {
	var out []string
	for _, list := range [][]overlay.Change{c.Added, c.Modified, c.Deleted} {
		for _, ch := range list {
			for _, g := range globs {
				if policies.MatchPath(g, ch.Path) {
					out = append(out, ch.Path)
					break
				}
			}
		}
	}
	sort.Strings(out)
	return out
}

// newCgroup creates the run's cgroup. Asked-for limits that cannot be
// enforced refuse the run, unless AllowUnlimited. A run without limits
// on a host without usable cgroups goes ahead without one.
// It says in r which cgroup the run has ("none" without one) and its
// limits as the kernel took them.
func (r *Receipt) newCgroup(o *Options, log *slog.Logger, host *cgroup.Host) (*cgroup.Cgroup, error) {
	r.Cgroup = "none"
	want := o.effectiveLimits()
	limited := want != (cgroup.Limits{})
	cg, err := host.New("run-"+r.ID, want)
	switch {
	case err == nil:
		r.Cgroup = string(cg.Version())
		l := cg.Limits()
		r.Limits.MemoryBytes, r.Limits.CPUs, r.Limits.Pids = l.MemoryBytes, l.CPUs, l.Pids
		return cg, nil
	case limited && !o.AllowUnlimited:
		return nil, fmt.Errorf("%w (--allow-unlimited runs without them)", err)
	case limited:
		r.Limits.Unenforced = true
		r.Warnings = append(r.Warnings, "limits not enforced: "+err.Error())
	default:
		log.Debug("running without a cgroup", "err", err)
	}
	return nil, nil
}

// readCgroup fills the receipt from the run's cgroup counters. An OOM
// kill anywhere in the run makes it MEMORY_EXCEEDED, even if CMD itself
// survived and exited 0.
func (r *Receipt) readCgroup(cg *cgroup.Cgroup) {
	st, err := cg.Stats()
	if err != nil {
		r.Warnings = append(r.Warnings, "read cgroup stats: "+err.Error())
		return
	}
	r.PeakMemoryMB = float64(st.PeakMemoryBytes*1000/(1<<20)) / 1000
	r.CPUTimeMS = ms(st.CPUUsage)
	r.PidsPeak = st.PidsPeak
	r.OOMKills = st.OOMKills
	r.CPUThrottled = st.NrThrottled
	if st.OOMKills > 0 && (r.Status == StatusSuccess || r.Status == StatusExecutionError) {
		r.Status, r.ExitCode = StatusMemoryExceeded, ExitMemory
	}
}

// peakRSS reads this process's VmHWM (KiB). Unlike getrusage's maxrss it
// starts afresh at execve, so a parent's memory does not show up in it.
func peakRSS() int64 {
	b, err := linux.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	_, v, ok := bytes.Cut(b, []byte("\nVmHWM:"))
	if !ok {
		return 0
	}
	v, _, _ = bytes.Cut(v, []byte("\n"))
	n, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(string(v)), " kB"), 10, 64)
	if err != nil {
		return 0
	}
	return n
}

// quoted joins paths for a message, each quoted: a run chooses its file
// names, and they must not carry terminal escapes into logs.
func quoted(paths []string) string {
	q := make([]string, len(paths))
	for i, p := range paths {
		q[i] = strconv.QuoteToGraphic(p)
	}
	return strings.Join(q, ", ")
}
