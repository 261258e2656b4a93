package nsjail

import (
	"context"
	"errors"
	"os"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/neonbox/neonbox-ns/cgroup"
	"github.com/neonbox/neonbox-ns/policies"
)

// Pool keeps jails for one workspace and policy prepared ahead of time:
// namespaces, filesystem view and cgroup made (on v1 the init's thread
// joins it just before execve), waiting for a command. A call then costs little more than handing the command over,
// yet each call is still a fresh jail with its own overlay upper dir and
// cgroup, and nothing of one call is visible to the next. Teardown of a
// finished call happens in the background; Close waits for it.
type Pool struct {
	tmpl    Options
	ids     idPlan
	filters [][]byte
	host    *cgroup.Host // probed once, for every jail's cgroup
	ready   chan *warmJail
	slots   chan struct{} // one per jail the pool may hold or run
	ctx     context.Context
	cancel  context.CancelFunc
	bg      sync.WaitGroup
	mu      sync.Mutex
	lastErr error
}

// warmJail is one prepared jail.
type warmJail struct {
	r  *Receipt
	rd runDir
	cg *cgroup.Cgroup
	j  *jail
	ws unix.Stat_t // the workspace root when the upper root was made
}

// NewPool prepares size jails (default 2) for the options in o, whose
// Command, Cwd, Timeout, stdio and output capture are ignored: they are
// given per call to Exec.
func NewPool(ctx context.Context, o Options, size int) (*Pool, error) {
	if size <= 0 {
		size = 2
	}
	o.Command = []string{"-"}
	_, ids, err := o.prepare()
	if err != nil {
		return nil, err
	}
	filters, err := compileFilters(o.Policy, o.StateDir)
	if err != nil {
		return nil, err
	}
	p := &Pool{tmpl: o, ids: ids, filters: filters, host: cgroup.Probe().WithoutFreezer(), ready: make(chan *warmJail, size), slots: make(chan struct{}, size)}
	p.ctx, p.cancel = context.WithCancel(context.WithoutCancel(ctx))
	// The first jail is prepared now, so that a pool that cannot work
	// says so at once.
	w, err := p.prepare()
	if err != nil {
		p.cancel()
		return nil, err
	}
	p.slots <- struct{}{}
	p.ready <- w
	for i := 0; i < size; i++ {
		p.bg.Add(1)
		go p.fill()
	}
	return p, nil
}

// fill keeps preparing jails while the pool is open. A jail is prepared
// only in a free slot, and a call frees its slot once it has ended and
// been torn down: the jail that replaces a used one (a process start,
// mounts) is not prepared while the call runs, competing with it for the
// CPU.
func (p *Pool) fill() {
	defer p.bg.Done()
	for p.ctx.Err() == nil {
		select {
		case p.slots <- struct{}{}:
		case <-p.ctx.Done():
			return
		}
		w, err := p.prepare()
		if err != nil {
			<-p.slots
			p.mu.Lock()
			p.lastErr = err
			p.mu.Unlock()
			select {
			case <-p.ctx.Done():
			case <-time.After(100 * time.Millisecond):
			}
			continue
		}
		select {
		case p.ready <- w:
		case <-p.ctx.Done():
			p.discard(w)
			<-p.slots
		}
	}
}

// prepare builds one jail up to the point where it waits for a command.
func (p *Pool) prepare() (*warmJail, error) {
	o := p.tmpl
	w := &warmJail{r: &Receipt{
		ID: newRunID(), Workspace: o.Workspace, Cgroup: "none", Changes: emptyChanges(), Policy: policyRef(o.Policy),
	}}
	if err := unix.Stat(o.Workspace, &w.ws); err != nil {
		return nil, err
	}
	var err error
	if w.rd, err = createRunDir(o.StateDir, w.r.ID, o.Workspace, p.ids, &w.ws, o.DiskBytes); err != nil {
		return nil, errors.Join(err, w.rd.remove())
	}
	if w.cg, err = w.r.newCgroup(&o, o.Logger, p.host); err != nil {
		return nil, errors.Join(err, w.rd.remove())
	}
	if w.cg != nil {
		w.cg.OpenStats()
	}
	cfg, err := jailConfig(&o, p.ids)
	if err != nil {
		return nil, errors.Join(err, w.teardown())
	}
	cfg.RunDir, cfg.Seccomp, cfg.Deferred = w.rd.path, p.filters, true
	cfg.OneFS = w.rd.onFS(w.ws.Dev)
	w.j, err = startJail(nil, nil, nil, cfg.Network, p.ids, w.cg, nil)
	if err == nil {
		if se := w.j.configure(cfg, w.cg); se != nil {
			err = se
		} else if se := w.j.readUntilExec(true); se != nil {
			err = se
		}
	}
	if err != nil {
		if w.j != nil {
			w.j.kill()
		}
		return nil, errors.Join(err, w.teardown())
	}
	return w, nil
}

func (w *warmJail) teardown() error {
	if w.j != nil {
		w.j.res.releaseMountNS()
	}
	var cgErr error
	if w.cg != nil {
		cgErr = w.cg.Delete() // kills what is left
	}
	return w.rd.removeAfterCgroup(cgErr)
}

func (p *Pool) discard(w *warmJail) {
	w.j.kill()
	_ = w.teardown()
}

// Exec runs one command in a prepared jail. From o it takes Command,
// Cwd, Timeout, Env, HostEnv, Stdin, Stdout, Stderr, CaptureOutput,
// OutputLimit and Commit; the rest is the pool's.
func (p *Pool) Exec(ctx context.Context, o Options) (*Receipt, error) {
	if len(o.Command) == 0 || o.Command[0] == "" {
		return nil, invalidf("no command to run")
	}
	t0 := time.Now()
	var w *warmJail
	select {
	case w = <-p.ready:
	case <-ctx.Done():
		return nil, context.Cause(ctx)
	case <-p.ctx.Done():
		return nil, errors.New("pool closed")
	}
	// Overlay took the workspace root's mode and owner when the jail
	// was prepared, and checks permissions against them: had they
	// changed since, the call could write where it now may not. A jail
	// prepared now takes its place.
	var root unix.Stat_t
	if err := unix.Stat(p.tmpl.Workspace, &root); err == nil && (root.Mode != w.ws.Mode || root.Uid != w.ws.Uid || root.Gid != w.ws.Gid) {
		p.discard(w)
		fresh, err := p.prepare()
		if err != nil {
			<-p.slots
			return nil, errors.Join(errors.New("prepare a jail for the changed workspace root"), err)
		}
		w = fresh
	}
	call := p.tmpl
	call.Command, call.Env, call.HostEnv = o.Command, o.Env, o.HostEnv
	if o.Timeout > 0 {
		call.Timeout = o.Timeout // else the policy's, from the template
	}
	call.Stdin, call.Stdout, call.Stderr, call.CaptureOutput, call.OutputLimit = o.Stdin, o.Stdout, o.Stderr, o.CaptureOutput, o.OutputLimit
	if o.Commit != "" {
		call.Commit = o.Commit
	}
	if call.HostEnv == nil {
		call.HostEnv = os.Environ()
	}
	if call.OutputLimit <= 0 {
		call.OutputLimit = DefaultOutputLimit
	}
	call.Cwd = call.Workspace
	if o.Cwd != "" && within(o.Cwd, call.Workspace) {
		call.Cwd = o.Cwd
	}
	r := w.r
	r.Command = call.Command
	r.Limits.TimeoutMS = call.Timeout.Milliseconds()
	call.Env.Policy = call.Policy.Env
	env, scrubbed, err := BuildEnv(call.HostEnv, call.Env, jailHome)
	if err != nil {
		p.returnUnused(w)
		return nil, invalidf("%v", err)
	}
	r.ScrubbedEnv = scrubbed
	if r.ScrubbedEnv == nil {
		r.ScrubbedEnv = []string{}
	}
	defer func() {
		// Teardown after the result is known, in the background.
		p.bg.Add(1)
		go func() {
			defer p.bg.Done()
			defer func() { <-p.slots }()
			if err := w.teardown(); err != nil {
				p.mu.Lock()
				p.lastErr = err
				p.mu.Unlock()
			}
		}()
	}()

	// A failure before the call is handed over ends the jail unused.
	fail := func(stage string, err error) (*Receipt, error) {
		w.j.kill()
		r.sandboxError(stepError(stage, err))
		return r, nil
	}
	lock, err := lockWorkspace(ctx, call.StateDir, call.Workspace, call.LockTimeout, !call.Policy.Has(policies.FSWrite), nil)
	if err != nil {
		w.j.kill()
		r.lockFailed(ctx, stepError("lock", err))
		return r, nil
	}
	defer lock.release()
	notes, err := recoverWorkspace(call.StateDir, call.Workspace, nil)
	r.Warnings = append(r.Warnings, notes...)
	if err != nil {
		return fail("recover", err)
	}
	// The jail was prepared before earlier calls committed: its upper
	// root must show the workspace root as it is now, or an empty call
	// would "commit" the root's old mtime back. Any change to the
	// root's owner, mode, xattrs or times moves its ctime. (The overlay
	// is mounted already: stat reads the upper root's attributes each
	// time; permission checks use overlay's copy of its mode and owner,
	// which is why a change of those made for a fresh jail above.)
	var ws unix.Stat_t
	err = unix.Stat(call.Workspace, &ws)
	if err == nil && !sameInode(&ws, &w.ws) {
		err = setUpperRoot(w.rd.upper(), call.Workspace, p.ids, &ws)
	}
	if err != nil {
		return fail("state", err)
	}

	var stdout, stderr *boundedBuffer
	if call.CaptureOutput {
		stdout, stderr = &boundedBuffer{limit: call.OutputLimit}, &boundedBuffer{limit: call.OutputLimit}
		call.Stdout, call.Stderr = stdout, stderr
	}
	streams, err := openStreams(call.Stdin, call.Stdout, call.Stderr)
	if err != nil {
		return fail("stdio", err)
	}
	runCtx := ctx
	if call.Timeout > 0 {
		var cancel context.CancelFunc
		runCtx, cancel = context.WithTimeoutCause(ctx, call.Timeout, errTimeout)
		defer cancel()
	}
	tSpawn := time.Now()
	r.Phases.PrepareMS = ms(tSpawn.Sub(t0))
	if err := w.j.sendCall(call.Command, env, call.Cwd, streams); err != nil {
		w.j.res.setupErr = stepError("call", err)
	}
	res := w.j.await(runCtx) // and the copying of the call's output
	if stdout != nil {
		r.Stdout, r.StdoutTruncated = stdout.result()
		r.Stderr, r.StderrTruncated = stderr.result()
	}
	r.classify(res)
	if !res.execStart.IsZero() {
		r.SetupMS = ms(res.execStart.Sub(t0))
		r.Phases.SpawnMS = ms(res.execStart.Sub(tSpawn))
		r.Phases.RunMS = ms(res.exitTime.Sub(res.execStart))
		// The call's steps, in ms after the command was sent.
		r.Phases.Spawn = map[string]float64{}
		var sent int64
		for _, st := range res.steps {
			if st.Name == "call_sent" {
				sent = st.At
			}
			if sent != 0 {
				r.Phases.Spawn[st.Name] = ms(time.Duration(st.At - sent))
			}
		}
	}
	if w.cg != nil {
		r.readCgroup(w.cg)
	}
	r.finishWorkspace(&call, w.rd, p.ids, false, call.Logger)
	r.Phases.FinishMS = ms(time.Since(res.exitTime))
	r.TotalMS = ms(time.Since(t0))
	return r, nil
}

// sameInode reports whether a and b describe the same inode with the
// same metadata (nothing was changed between the two stats).
func sameInode(a, b *unix.Stat_t) bool {
	return a.Dev == b.Dev && a.Ino == b.Ino && a.Mode == b.Mode && a.Uid == b.Uid && a.Gid == b.Gid &&
		a.Mtim == b.Mtim && a.Ctim == b.Ctim
}

// returnUnused gives back a jail that was taken but not used.
func (p *Pool) returnUnused(w *warmJail) {
	select {
	case p.ready <- w:
	default:
		p.discard(w)
		<-p.slots
	}
}

// Err reports the last error preparing or tearing down jails, if any.
func (p *Pool) Err() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.lastErr
}

// Close stops preparing jails, ends the prepared ones and waits for
// every teardown.
func (p *Pool) Close() error {
	p.cancel()
	p.bg.Wait() // fillers stop (discarding what they held), teardowns end
	for {
		select {
		case w := <-p.ready:
			p.discard(w)
			<-p.slots
		default:
			return nil
		}
	}
}

// sendCall hands a prepared jail its command and streams, which become
// the jail's (await waits for their copying).
func (j *jail) sendCall(argv, env []string, cwd string, s *streams) error {
	j.streams = s
	defer s.handedOver()
	msg, err := callProgram(argv, env, cwd)
	if err != nil {
		return err
	}
	j.mark("call_sent")
	if err := unix.Sendmsg(int(j.sock.Fd()), msg, s.rights(), nil, 0); err != nil {
		return os.NewSyscallError("sendmsg", err)
	}
	return nil
}
