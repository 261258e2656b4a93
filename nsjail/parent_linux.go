package nsjail

// This file runs in the parent: the neonbox-ns process on the host. It
// starts the jail's init, hands it its config and waits for the outcome.
// The init's side of the protocol (protocol.go) is internal/jailinit; what
// it does in the jail is the program built in program_linux.go.

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/neonbox/neonbox-ns/cgroup"
	"github.com/neonbox/neonbox-ns/internal/jailinit"
	"github.com/neonbox/neonbox-ns/internal/linux"
	"github.com/neonbox/neonbox-ns/reexec"
)

// unshareFlags are the namespaces every jail gets, but for the pid
// namespace: the init forks pid 1 of that one (jailinit's CloneInit).
const unshareFlags = unix.CLONE_NEWUSER | unix.CLONE_NEWNS | unix.CLONE_NEWNET |
	unix.CLONE_NEWUTS | unix.CLONE_NEWIPC | unix.CLONE_NEWCGROUP

// errTimeout is the cause of a run killed at its timeout.
var errTimeout = errors.New("run timed out")

// jailResult is what happened to the jail's process.
type jailResult struct {
	setupErr  *StepError // the init failed before execve
	forked    int64      // CLOCK_MONOTONIC just before the init was started
	clone     time.Time  // the same, as wall time
	steps     []initStep // the init's own timings
	execStart time.Time  // when CMD started (zero if it never did)
	exitTime  time.Time
	state     *exitState
	cause     error // errTimeout, or the context's cause, if the run was killed
	mountNS   *os.File
}

// releaseMountNS lets go of the jail's mount namespace (see holdMountNS):
// its mounts are torn down now, in the caller's time.
func (r *jailResult) releaseMountNS() {
	if r.mountNS != nil {
		r.mountNS.Close()
		r.mountNS = nil
	}
}

// jail is a started init, seen from the parent. Two processes make it:
// first, the process started in the parent's namespaces, which makes the
// jail's namespaces, forks the init proper (proc) and exits; and proc,
// pid 1 of the jail, which builds it and becomes CMD.
type jail struct {
	streams  *streams
	sock     *os.File
	inCgroup bool                 // started in its v2 cgroup
	pre      *jailinit.Prestarted // if prestarted (adopted): its streams come with the rest of its program
	baseSent bool                 // the base part of the program
	// writeBase: the base queued for this process's prestarted init,
	// from the state dir, was not this jail's; Run writes this one.
	writeBase bool
	exited    chan *exitState
	res       *jailResult

	// Set by supervise before it closes spawned.
	spawned  chan struct{}
	proc     *child
	spawnErr *StepError
	pidAt    int64 // when the init's pid came
	spawnAt  int64
	mountNS  *os.File
	merged   bool // the above are in res

	buf []byte // for the init's messages, read by one goroutine at a time

	warnings []string // for the receipt
}

// startJail starts the jail's init, without network namespace when
// network is set, and in cg when cg is a v2 cgroup (CLONE_INTO_CGROUP:
// born there, nothing escapes the limits). It returns as soon as the init
// is running; the init makes the namespaces, and then waits for its
// program (sendBase, configure). A jail meant for a v1 cgroup, or none,
// may be started before the cgroup exists: its init joins it at the end
// of its program.
//
// The init is started with vfork, in this process's namespaces, and
// makes the jail's namespaces itself (as runc's nsexec does): a clone
// with a new user namespace cannot be a vfork, and copying this process's
// page tables, then faulting on every page it writes until the child's
// execve, cost more than anything else in starting a jail.
//
// With base (the base of the jail's program, baseProgram), an init this
// binary started before the Go runtime (AdoptPrestarted) is taken
// instead. It is discarded, and a new one started, without base (it made
// its mount namespace before anything the caller has mounted since), for
// a jail with network (it made a network namespace, which may fail where
// a jail with network would not), one born in a v2 cgroup, ids mapped for
// another user, when it failed to start, and when the base queued for it
// is not base (the state dir's, from an earlier run: the jail's writeBase
// then says that the caller should write base there).
func startJail(stdin io.Reader, stdout, stderr io.Writer, network bool, ids idPlan, cg *cgroup.Cgroup, base []byte) (*jail, error) {
	cgFD, intoCgroup := -1, false
	if cg != nil {
		cgFD, intoCgroup = cg.FD()
	}
	s, err := openStreams(stdin, stdout, stderr)
	if err != nil {
		return nil, stepError("spawn", err)
	}
	var warnings []string
	writeBase := false
	if j := takePrestarted(); j != nil {
		failed := j.failedToSpawn()
		usable := base != nil && !network && !intoCgroup && j.pre.Rootful == ids.rootful
		same := bytes.Equal(j.pre.Base, base)
		writeBase = usable && ids.rootful && !same
		if usable && !failed && (j.pre.Base == nil || same) {
			j.streams = s
			j.writeBase = writeBase
			return j, nil
		}
		if failed {
			// Every run of this host will pay for two: say so.
			warnings = append(warnings, fmt.Sprintf("the jail's init started ahead failed (%v); started another", j.spawnErr))
		}
		go j.kill()
	}
	flags := uintptr(unshareFlags)
	if network {
		flags &^= unix.CLONE_NEWNET
	}
	j, err := spawnJail(s, flags, ids, cgFD, intoCgroup)
	if err != nil {
		s.close()
		return nil, err
	}
	j.warnings = warnings
	j.writeBase = writeBase
	return j, nil
}

// spawnJail starts a new init, in the cgroup cgFD when intoCgroup.
func spawnJail(s *streams, flags uintptr, ids idPlan, cgFD int, intoCgroup bool) (*jail, error) {
	prog, err := spawnProgram(flags, ids)
	if err != nil {
		return nil, asStepError("config", err)
	}
	pair, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, stepError("spawn", os.NewSyscallError("socketpair", err))
	}
	parentEnd := os.NewFile(uintptr(pair[0]), "neonbox-sync")
	childEnd := os.NewFile(uintptr(pair[1]), "neonbox-sync-child")
	defer childEnd.Close()
	// The init reads its first program before this process can do
	// anything: queue it now.
	if err := unix.Sendmsg(pair[0], prog, nil, nil, 0); err != nil {
		parentEnd.Close()
		return nil, stepError("spawn", os.NewSyscallError("sendmsg", err))
	}

	attr := &os.ProcAttr{
		Env:   []string{},
		Files: []*os.File{s.files[0], s.files[1], s.files[2], childEnd},
		Sys: &syscall.SysProcAttr{
			// A session of its own, with no controlling terminal:
			// the jail cannot open the caller's terminal through
			// /dev/tty to read what the user types next or
			// reconfigure it. (Its streams may still be that
			// terminal; TIOCSTI is denied by seccomp.)
			Setsid:      true,
			Pdeathsig:   syscall.SIGKILL,
			UseCgroupFD: intoCgroup,
			CgroupFD:    cgFD,
		},
	}
	j := newJail(parentEnd, s)
	j.inCgroup = intoCgroup
	forked, tForked := monotonic(), time.Now()
	started := make(chan error, 1)
	go func() {
		// The parent-death signal fires when the thread that started
		// the init exits, not the process (prctl(2)); the init proper
		// is this thread's child too (CLONE_PARENT). Keep this
		// goroutine on its own thread for the life of the jail.
		runtime.LockOSThread()
		if slack, ok := jailinit.CallerTimerSlack(); ok {
			// The jail's processes inherit it, not the
			// slack of neonbox-ns's own threads.
			if err := unix.Prctl(unix.PR_SET_TIMERSLACK, uintptr(slack), 0, 0, 0); err != nil {
				started <- os.NewSyscallError("prctl PR_SET_TIMERSLACK", err)
				return
			}
		}
		proc, err := os.StartProcess(reexec.Self, []string{initName}, attr)
		started <- err
		if err != nil {
			return
		}
		// Waited for by pid, as the init is (child).
		first := &child{pid: proc.Pid}
		_ = proc.Release()
		j.learnPid()
		j.supervise(first)
	}()
	if err := <-started; err != nil {
		parentEnd.Close()
		return nil, stepError("spawn", err)
	}
	s.handedOver()
	j.res = &jailResult{
		forked: forked, clone: tForked,
		steps: []initStep{{Name: "parent_started", At: monotonic()}},
	}
	return j, nil
}

// prestarted is the init this binary started before its Go runtime, once
// AdoptPrestarted has taken it.
var prestarted struct {
	sync.Mutex
	j *jail
}

// AdoptPrestarted takes the jail's init that this binary started before
// its Go runtime (the neonbox-ns CLI's exec: see internal/jailinit),
// learns its pid and keeps it for the next Run. Without a prestarted
// init it does nothing; Run takes one even if this was not called.
//
// (The survey of the host's directories and the cgroup probe, which Run
// needs, are not started here: a goroutine doing them beside main
// competes for the CPUs with main and with the init, which builds the
// base of the jail meanwhile, and made Run 0.2 ms slower.)
func AdoptPrestarted() {
	prestarted.Lock()
	defer prestarted.Unlock()
	if pre := jailinit.TakePrestarted(); pre != nil {
		prestarted.j = adoptJail(pre)
	}
}

// writePrestartBase writes base to the state dir's jailinit.BaseFile,
// after this binary's jailinit.BaseHeader, whole or not at all, for the
// prestart of the next `neonbox-ns exec` with this state dir (which reads
// it only if this user owns it and the state dir and no one else may
// write them).
func writePrestartBase(stateDir string, base []byte) error {
	if len(base) > jailinit.MaxBase {
		return fmt.Errorf("a base of %d bytes is longer than the prestart reads", len(base))
	}
	header, err := jailinit.BaseHeader()
	if err != nil {
		return err
	}
	return linux.WriteFileAtomic(stateDir, jailinit.BaseFile, append(header, base...))
}

// queuedBase is the base queued for the prestarted init, and whether
// there is one (which stays to be taken).
func queuedBase() (base []byte, adopted bool) {
	AdoptPrestarted()
	prestarted.Lock()
	defer prestarted.Unlock()
	if j := prestarted.j; j != nil && j.pre != nil {
		return j.pre.Base, true
	}
	return nil, false
}

// takePrestarted returns the adopted prestarted init, once, or nil.
func takePrestarted() *jail {
	AdoptPrestarted()
	prestarted.Lock()
	defer prestarted.Unlock()
	j := prestarted.j
	prestarted.j = nil
	return j
}

// failedToSpawn reports whether the jail failed before its init said its
// pid (an adopted init's was read as it was adopted).
func (j *jail) failedToSpawn() bool {
	<-j.spawned
	return j.proc == nil
}

// adoptJail takes the prestarted init as a jail's. It has run its spawn
// program: its pid is queued, and its ids are mapped by then; it gets its
// streams with the rest of its program (configureRest).
func adoptJail(pre *jailinit.Prestarted) *jail {
	j := newJail(pre.Sock, nil)
	j.pre = pre
	adopted := monotonic()
	// pre.At is on the monotonic clock; the start's wall time is as
	// long before now.
	j.res = &jailResult{
		forked: pre.At, clone: time.Now().Add(-time.Duration(adopted - pre.At)),
		steps: []initStep{{Name: "adopted", At: adopted}},
	}
	// The init and its first process are children of the thread that
	// ran the C constructor, the main thread, which lives as long as
	// this process.
	first := &child{pid: pre.Pid}
	// Its pid has been waiting since long before the Go runtime was
	// up: read at once, not by a goroutine that may wait for a CPU.
	j.learnPid()
	go j.supervise(first)
	return j
}

func newJail(sock *os.File, s *streams) *jail {
	return &jail{sock: sock, streams: s, exited: make(chan *exitState, 1), spawned: make(chan struct{})}
}

// learnPid learns the init's pid (spawn) and holds its mount namespace.
func (j *jail) learnPid() {
	j.proc, j.spawnErr = j.spawn()
	j.spawnAt = monotonic()
	if j.proc != nil {
		j.mountNS = holdMountNS(j.proc.pid)
	}
	close(j.spawned)
}

// supervise waits for the jail to end, once learnPid has run. first is
// the process started in this process's namespaces.
func (j *jail) supervise(first *child) {
	// The first process exits once it has forked pid 1 (and made the
	// network namespace): reaped now, it is no zombie for the run.
	state := first.wait()
	if j.proc != nil {
		state = j.proc.wait()
	}
	j.exited <- state
}

// spawn learns the pid of the jail's init and that its ids are mapped,
// both of which the process that forked it reports, the pid first. The
// init is this process's child (CLONE_PARENT), to be waited for: its pid
// cannot be reused before. A failure (a failure to map the ids included)
// may be reported by that process or by the init, before the pid or
// after it; the first is the cause. Once a failure is known, spawn still
// waits for the pid, if one comes, so that the init is reaped.
func (j *jail) spawn() (*child, *StepError) {
	var proc *child
	var failed *StepError
	for {
		m, eof, se := j.readMessage()
		switch {
		case se != nil && eof:
			msg := "the jail's init exited before it said its pid"
			if proc != nil {
				msg = "the jail's init exited before its ids were mapped"
			}
			failed = cmp.Or(failed, &StepError{Stage: "spawn", Message: msg})
		case se != nil:
			failed = cmp.Or(failed, se)
			if proc == nil {
				continue // for the pid
			}
		case proc == nil && m.Pid > 0:
			j.pidAt = monotonic()
			proc = &child{pid: m.Pid}
			if failed == nil {
				continue // for the maps
			}
		case proc != nil && m.Mapped:
			return proc, nil
		default:
			failed = cmp.Or(failed, &StepError{Stage: "spawn", Message: "unexpected message before the jail's ids were mapped"})
		}
		if proc != nil {
			_ = proc.kill()
		}
		return proc, failed
	}
}

// waitSpawned waits until the jail's init is known (or failed to start)
// and returns the error the jail has failed with so far, if any.
func (j *jail) waitSpawned() *StepError {
	<-j.spawned
	if !j.merged {
		j.merged = true
		j.res.mountNS = j.mountNS
		j.res.steps = append(j.res.steps, initStep{Name: "pid", At: j.pidAt}, initStep{Name: "spawned", At: j.spawnAt})
		if j.spawnErr != nil {
			// The cause, where sending the base (to an init that
			// is gone) failed too.
			j.res.setupErr = j.spawnErr
		}
	}
	return j.res.setupErr
}

// configure sends the init the rest of its program for cfg (and the base,
// unless sendBase did); the init builds the jail while the caller goes
// on. A failure is also kept for await to report.
func (j *jail) configure(cfg *childConfig, cg *cgroup.Cgroup) *StepError {
	if se := j.configureRest(cfg, cg); se != nil || cfg.Deferred {
		return se
	}
	return j.configureFinal(cfg, cg)
}

// configureRest sends the rest of the init's program (restProgram): for
// an init that is not deferred, configureFinal follows, with the cgroup,
// which the caller may make meanwhile (cg is then nil here).
func (j *jail) configureRest(cfg *childConfig, cg *cgroup.Cgroup) *StepError {
	if !j.baseSent {
		base, err := baseProgram(cfg)
		if err != nil {
			return j.failed(asStepError("config", err))
		}
		j.sendBase(base)
	}
	if se := j.waitSpawned(); se != nil {
		return se
	}
	var tasks []*os.File
	if cfg.Deferred {
		var se *StepError
		if tasks, se = j.openTasks(cg); se != nil {
			return se
		}
		defer closeAll(tasks)
	}
	cfg.CgroupTasks = len(tasks)
	// An adopted init, started before CMD's streams were known, takes
	// them after the other descriptors.
	stdio := -1
	if j.pre != nil {
		stdio = tasksSlot(cfg) + len(tasks)
	}
	msg, err := restProgram(cfg, stdio)
	if err != nil {
		return j.failed(asStepError("config", err))
	}
	var fds []int
	if cfg.WorkspaceFD {
		fd, err := idmappedWorkspace(cfg.Workspace, j.proc.pid)
		if err != nil {
			return j.failed(stepError("idmap", err))
		}
		defer unix.Close(fd)
		fds = append(fds, fd)
	}
	files := tasks
	if j.pre != nil {
		defer j.streams.handedOver()
		files = append(slices.Clip(tasks), j.streams.files[:]...)
	}
	return j.send("config_sent", msg, fds, files)
}

// configureFinal sends the final part of the program of an init that is
// not deferred (finalProgram), with the v1 cgroup's tasks files: the
// init's thread joins the cgroup just before execve, so the init's own
// setup is not charged to the run.
func (j *jail) configureFinal(cfg *childConfig, cg *cgroup.Cgroup) *StepError {
	if j.res.setupErr != nil {
		return j.res.setupErr
	}
	tasks, se := j.openTasks(cg)
	if se != nil {
		return se
	}
	defer closeAll(tasks)
	cfg.CgroupTasks = len(tasks)
	msg, err := finalProgram(cfg)
	if err != nil {
		return j.failed(asStepError("config", err))
	}
	return j.send("final_sent", msg, nil, tasks)
}

// openTasks opens cg's v1 tasks files (none on v2, where the init was
// cloned into the cgroup, or without a cgroup).
func (j *jail) openTasks(cg *cgroup.Cgroup) ([]*os.File, *StepError) {
	if cg == nil {
		return nil, nil
	}
	if _, ok := cg.FD(); ok != j.inCgroup {
		return nil, j.failed(&StepError{Stage: "cgroup", Message: "the jail was not started in its v2 cgroup"})
	}
	tasks, err := cg.OpenTasks()
	if err != nil {
		return nil, j.failed(stepError("cgroup", err))
	}
	return tasks, nil
}

// failed keeps se as the jail's setup error for await, unless the init
// has reported a failure of its own meanwhile (which likely caused se):
// then that.
func (j *jail) failed(se *StepError) *StepError {
	if ie := j.initFailure(); ie != nil {
		se = ie
	}
	j.res.setupErr = se
	return se
}

func closeAll(files []*os.File) {
	for _, f := range files {
		f.Close()
	}
}

// holdMountNS opens the jail's mount namespace, so that it outlives the
// jail's last process: when CMD exits, the kernel would otherwise tear
// down the jail's mounts, and wait for an RCU grace period, before the
// parent learns that CMD has exited. Held, that happens when the parent
// closes the file, after it has the result. Without the file (an error
// opening it) the namespace simply goes with the jail.
func holdMountNS(pid int) *os.File {
	f, err := os.Open("/proc/" + strconv.Itoa(pid) + "/ns/mnt")
	if err != nil {
		return nil
	}
	return f
}

// sendBase sends base, the first part of the init's program
// (baseProgram): the init builds the base of the jail while the caller
// prepares the rest. An adopted init that has it queued already gets
// nothing. A failure is also kept for await.
func (j *jail) sendBase(base []byte) *StepError {
	j.baseSent = true
	if j.pre != nil && j.pre.Base != nil {
		j.mark("base_prestarted")
		return nil
	}
	if err := unix.Sendmsg(int(j.sock.Fd()), base, nil, nil, 0); err != nil {
		j.res.setupErr = stepError("config", os.NewSyscallError("sendmsg", err))
	}
	j.mark("base_sent")
	return j.res.setupErr
}

// send sends a part of the init's program with the descriptors fds and
// then those of files, after marking the moment as mark; a failure is
// kept for await.
func (j *jail) send(mark string, msg []byte, fds []int, files []*os.File) *StepError {
	for _, f := range files {
		fds = append(fds, int(f.Fd()))
	}
	var rights []byte
	if len(fds) > 0 {
		rights = unix.UnixRights(fds...)
	}
	j.mark(mark)
	if err := unix.Sendmsg(int(j.sock.Fd()), msg, rights, nil, 0); err != nil {
		return j.failed(stepError("config", os.NewSyscallError("sendmsg", err)))
	}
	return nil
}

// initFailure returns what the init reported if it has already written
// to the socket (it writes nothing before "ready" or "prepared" unless a
// step failed, and exits after an error), or nil.
func (j *jail) initFailure() *StepError {
	pfd := []unix.PollFd{{Fd: int32(j.sock.Fd()), Events: unix.POLLIN}}
	if n, err := unix.Poll(pfd, 0); err != nil || n == 0 {
		return nil
	}
	return j.readUntilExec(false)
}

func (j *jail) mark(name string) {
	j.res.steps = append(j.res.steps, initStep{Name: name, At: monotonic()})
}

// kill ends the jail, waits for it and lets go of its mount namespace.
func (j *jail) kill() {
	j.waitSpawned()
	j.killInit()
	j.ended()
	j.sock.Close()
	j.res.releaseMountNS()
}

// ended waits for the jail's end and for the copying of CMD's output, if
// any, which ends with it (even for a jail that never got its streams).
func (j *jail) ended() *exitState {
	state := <-j.exited
	if j.streams != nil {
		j.streams.handedOver()
		j.streams.wait(time.Second)
	}
	return state
}

// killInit kills the jail's init, once it is known. (The process that
// forked it exits by itself.)
func (j *jail) killInit() {
	if j.proc != nil {
		_ = j.proc.kill()
	}
}

// await lets the jail run: it waits until the init has exec'd CMD (or
// reported why it could not) and then for the jail to end, killing it
// when ctx ends.
func (j *jail) await(ctx context.Context) *jailResult {
	defer j.sock.Close()
	j.waitSpawned()
	res := j.res
	// The cause is recorded before the kill, so a jail that died of it
	// is never mistaken for one that died on its own.
	killedBy := make(chan error, 1)
	stopWatch := make(chan struct{})
	defer close(stopWatch)
	go func() {
		select {
		case <-ctx.Done():
			killedBy <- context.Cause(ctx)
			j.killInit()
		case <-stopWatch:
		}
	}()
	if res.setupErr == nil {
		res.setupErr = j.readUntilExec(false)
	}
	if res.setupErr != nil {
		j.killInit()
	} else {
		res.execStart = time.Now()
	}
	res.state = j.ended()
	res.exitTime = time.Now()
	select {
	case res.cause = <-killedBy:
	default:
	}
	return res
}

// readUntilExec reads the init's messages: "ready" and then EOF, which
// means execve succeeded. With prepared set it returns at the init's
// "prepared" instead.
func (j *jail) readUntilExec(prepared bool) *StepError {
	ready := false
	for {
		m, eof, se := j.readMessage()
		switch {
		case eof && ready:
			j.mark("exec")
			return nil
		case se != nil:
			return se
		}
		j.res.steps = append(j.res.steps, m.Steps...)
		if prepared && m.Prepared {
			return nil
		}
		if m.Ready {
			ready = true
		}
	}
}

// readMessage reads the init's next message. An error the init reported
// is returned as the error; so is EOF, with eof set: the init has
// exited, or exec'd (the socket is close-on-exec in it).
func (j *jail) readMessage() (m childMessage, eof bool, se *StepError) {
	if j.buf == nil {
		j.buf = make([]byte, jailinit.MaxReport)
	}
	buf := j.buf
	n, err := j.sock.Read(buf)
	for errors.Is(err, syscall.ECONNRESET) {
		// The init exited with part of its program unread; what it
		// wrote before may still be queued.
		n, err = j.sock.Read(buf)
	}
	if n == 0 || errors.Is(err, io.EOF) {
		return m, true, &StepError{Stage: "init", Message: "the jail's init exited before it could report"}
	}
	if err != nil {
		return m, false, stepError("sync", err)
	}
	if err := decodeMessage(buf[:n], &m); err != nil {
		return m, false, stepError("sync", fmt.Errorf("bad message from init: %w", err))
	}
	if m.Error != nil {
		if m.Error.Message == "" && m.Error.Errno != 0 {
			m.Error.Message = syscall.Errno(m.Error.Errno).Error()
		}
		return m, false, m.Error
	}
	return m, false, nil
}

// idmappedWorkspace returns a detached mount of the workspace whose ids
// are shifted by the jail's user namespace mapping: a file owned by host
// id n appears owned by jail id n (mount_setattr(2), MOUNT_ATTR_IDMAP).
func idmappedWorkspace(workspace string, pid int) (int, error) {
	userns, err := unix.Open("/proc/"+strconv.Itoa(pid)+"/ns/user", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, &os.PathError{Op: "open", Path: "/proc/" + strconv.Itoa(pid) + "/ns/user", Err: err}
	}
	defer unix.Close(userns)
	fd, err := linux.CloneTree(workspace, false)
	if err != nil {
		return -1, err
	}
	if err := linux.SetMountAttr(fd, unix.MOUNT_ATTR_IDMAP|unix.MOUNT_ATTR_NOSUID|unix.MOUNT_ATTR_NODEV, userns, false); err != nil {
		unix.Close(fd)
		return -1, &os.PathError{Op: "mount_setattr idmap", Path: workspace, Err: err}
	}
	return fd, nil
}
