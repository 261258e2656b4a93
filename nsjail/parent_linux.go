package nsjail

// This file runs in the parent: the neonbox-ns process on the host. It
// starts the jail's init, hands it its config and waits for the outcome.
// The init's side of the protocol (protocol.go) is internal/jailinit; what
// it does in the jail is the program built in program_linux.go.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/neonbox/neonbox-ns/cgroup"
	"github.com/neonbox/neonbox-ns/internal/linux"
	"github.com/neonbox/neonbox-ns/reexec"
)

// cloneFlags are the namespaces every jail gets.
const cloneFlags = unix.CLONE_NEWUSER | unix.CLONE_NEWNS | unix.CLONE_NEWPID |
	unix.CLONE_NEWNET | unix.CLONE_NEWUTS | unix.CLONE_NEWIPC

// errTimeout is the cause of a run killed at its timeout.
var errTimeout = errors.New("run timed out")

// jailResult is what happened to the jail's process.
type jailResult struct {
	setupErr  *StepError // the init failed before execve
	forked    int64      // CLOCK_MONOTONIC just before the clone
	clone     time.Time  // the same, as wall time
	steps     []initStep // the init's own timings
	execStart time.Time  // when CMD started (zero if it never did)
	exitTime  time.Time
	state     *os.ProcessState
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

// jail is a started init, seen from the parent.
type jail struct {
	cmd      *exec.Cmd
	sock     *os.File
	cfg      *childConfig
	inCgroup bool // cloned into its v2 cgroup
	baseSent bool // the first part of the program
	exited   chan *os.ProcessState
	res      *jailResult
}

// startJail starts the init in the jail's namespaces, without network
// namespace when network is set, and in cg when cg is a v2 cgroup
// (CLONE_INTO_CGROUP: born there, nothing escapes the limits). The init
// waits for its program (configure); until then it has done nothing. A
// jail meant for a v1 cgroup, or none, may be started before the cgroup
// exists: its init joins it at the end of its program.
func startJail(stdin io.Reader, stdout, stderr io.Writer, network bool, ids idPlan, cg *cgroup.Cgroup) (*jail, error) {
	pair, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, stepError("spawn", os.NewSyscallError("socketpair", err))
	}
	parentEnd := os.NewFile(uintptr(pair[0]), "neonbox-sync")
	childEnd := os.NewFile(uintptr(pair[1]), "neonbox-sync-child")

	flags := uintptr(cloneFlags | unix.CLONE_NEWCGROUP)
	if network {
		flags &^= unix.CLONE_NEWNET
	}
	cmd := reexec.Command(initName)
	cmd.Env = []string{}
	cmd.ExtraFiles = []*os.File{childEnd}
	cmd.Stdin, cmd.Stdout, cmd.Stderr = stdin, stdout, stderr
	cmd.WaitDelay = time.Second
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Cloneflags:                 flags,
		UidMappings:                ids.uidMap,
		GidMappings:                ids.gidMap,
		GidMappingsEnableSetgroups: ids.rootful,
		// The child starts with the caller's host ids, which root's
		// mapping does not contain: become the jail's root before
		// execve, or the init would run as the overflow id with no
		// capabilities in its namespace.
		Credential: &syscall.Credential{Uid: 0, Gid: 0, NoSetGroups: !ids.rootful},
		// A session of its own, with no controlling terminal: the jail
		// cannot open the caller's terminal through /dev/tty to read
		// what the user types next or reconfigure it. (Its streams may
		// still be that terminal; TIOCSTI is denied by seccomp.)
		Setsid:    true,
		Pdeathsig: syscall.SIGKILL,
	}
	j := &jail{cmd: cmd, sock: parentEnd, exited: make(chan *os.ProcessState, 1)}
	if cg != nil {
		if fd, ok := cg.FD(); ok {
			cmd.SysProcAttr.UseCgroupFD, cmd.SysProcAttr.CgroupFD = true, fd
			j.inCgroup = true
		}
	}

	forked, tForked := monotonic(), time.Now()
	started := make(chan error, 1)
	go func() {
		// The parent-death signal fires when the thread that forked
		// the child exits, not the process (prctl(2)): keep this
		// goroutine on its own thread for the life of the jail.
		runtime.LockOSThread()
		if err := cmd.Start(); err != nil {
			started <- err
			return
		}
		started <- nil
		_ = cmd.Wait() // the exit status is in ProcessState
		j.exited <- cmd.ProcessState
	}()
	// Start returns once the clone and the init's execve are done.
	// Preparing the rest of the jail while it waits was measured to
	// gain nothing: with a new user namespace the clone is a fork (no
	// vfork), and this process's writes fault on the copied page
	// tables until the init's execve.
	err = <-started
	tStarted := monotonic()
	childEnd.Close()
	if err != nil {
		parentEnd.Close()
		return nil, stepError("spawn", err)
	}
	j.res = &jailResult{
		forked: forked, clone: tForked, mountNS: holdMountNS(cmd.Process.Pid),
		steps: []initStep{{Name: "parent_started", At: tStarted}},
	}
	return j, nil
}

// configure sends the init the rest of its program for cfg (and the base,
// unless sendBase did); the init builds the jail while the caller goes
// on. A failure is also kept for await to report.
func (j *jail) configure(cfg *childConfig, cg *cgroup.Cgroup) *StepError {
	j.cfg = cfg
	if !j.baseSent {
		j.sendBase(cfg)
	}
	if j.res.setupErr != nil {
		return j.res.setupErr
	}
	var tasks []*os.File
	if cg != nil {
		if _, ok := cg.FD(); ok != j.inCgroup {
			j.res.setupErr = &StepError{Stage: "cgroup", Message: "the jail was not started in its v2 cgroup"}
			return j.res.setupErr
		}
		// v1: the init's thread joins the cgroup just before execve,
		// through the tasks files sent with the program; the init's
		// own setup is not charged to the run.
		var err error
		if tasks, err = cg.OpenTasks(); err != nil {
			j.res.setupErr = stepError("cgroup", err)
			return j.res.setupErr
		}
		defer func() {
			for _, f := range tasks {
				f.Close()
			}
		}()
	}
	cfg.CgroupTasks = len(tasks)
	if se := j.sendConfig(tasks); se != nil {
		j.res.setupErr = se
	}
	return j.res.setupErr
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

// sendBase sends the first part of the init's program (baseProgram),
// which needs no descriptors: the init builds the base of the jail while
// the caller prepares the rest. A failure is also kept for await.
func (j *jail) sendBase(cfg *childConfig) *StepError {
	msg, err := baseProgram(cfg)
	if err == nil {
		err = unix.Sendmsg(int(j.sock.Fd()), msg, nil, nil, 0)
		if err != nil {
			err = os.NewSyscallError("sendmsg", err)
		}
	}
	j.baseSent = true
	if err != nil {
		j.res.setupErr = asStepError("config", err)
	}
	j.mark("base_sent")
	return j.res.setupErr
}

// sendConfig sends the rest of the init's program, with the idmapped
// workspace as root and the v1 cgroup's tasks files. If the init failed
// in the base of its program meanwhile, its own report is returned.
func (j *jail) sendConfig(tasks []*os.File) *StepError {
	se := j.sendRest(tasks)
	if se != nil {
		if ie := j.initFailure(); ie != nil {
			return ie
		}
	}
	return se
}

func (j *jail) sendRest(tasks []*os.File) *StepError {
	msg, err := restProgram(j.cfg)
	if err != nil {
		return asStepError("config", err)
	}
	var fds []int
	if j.cfg.WorkspaceFD {
		fd, err := idmappedWorkspace(j.cfg.Workspace, j.cmd.Process.Pid)
		if err != nil {
			return stepError("idmap", err)
		}
		defer unix.Close(fd)
		fds = append(fds, fd)
	}
	for _, f := range tasks {
		fds = append(fds, int(f.Fd()))
	}
	var rights []byte
	if len(fds) > 0 {
		rights = unix.UnixRights(fds...)
	}
	j.mark("config_sent")
	if err := unix.Sendmsg(int(j.sock.Fd()), msg, rights, nil, 0); err != nil {
		return stepError("config", os.NewSyscallError("sendmsg", err))
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

// kill ends the jail and waits for it.
func (j *jail) kill() {
	_ = j.cmd.Process.Kill()
	<-j.exited
	j.sock.Close()
}

// await lets the jail run: it waits until the init has exec'd CMD (or
// reported why it could not) and then for the jail to end, killing it
// when ctx ends.
func (j *jail) await(ctx context.Context) *jailResult {
	defer j.sock.Close()
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
			_ = j.cmd.Process.Kill()
		case <-stopWatch:
		}
	}()
	if res.setupErr == nil {
		res.setupErr = j.readUntilExec(false)
	}
	if res.setupErr != nil {
		_ = j.cmd.Process.Kill()
	} else {
		res.execStart = time.Now()
	}
	res.state = <-j.exited
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
	buf := make([]byte, 64<<10)
	ready := false
	for {
		n, err := j.sock.Read(buf)
		if n == 0 || errors.Is(err, io.EOF) {
			if ready {
				j.mark("exec")
				return nil
			}
			return &StepError{Stage: "init", Message: "the jail's init exited before it could report"}
		}
		if err != nil {
			return stepError("sync", err)
		}
		var m childMessage
		if err := json.Unmarshal(buf[:n], &m); err != nil {
			return stepError("sync", fmt.Errorf("bad message from init: %w", err))
		}
		if m.Error != nil {
			if m.Error.Message == "" && m.Error.Errno != 0 {
				m.Error.Message = syscall.Errno(m.Error.Errno).Error()
			}
			return m.Error
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
