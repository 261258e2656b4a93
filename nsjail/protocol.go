package nsjail

// The parent and the jail's init talk over one SOCK_SEQPACKET socket, the
// init's fd 3, which is close-on-exec in the init. The init is C
// (internal/jailinit) and runs the program the parent built
// (program_linux.go); it answers in JSON:
//
//	parent (neonbox-ns)                        init (neonbox-init)
//	───────────────────                        ──────────────────────────────────────
//	spawn program                      ─────►  (queued)
//	vfork + execve [v2: CLONE_INTO_CGROUP]     starts; clone(USER|NS|UTS|IPC|CGROUP|
//	                                           NEWPID|PARENT): pid 1 of the jail
//	                                   ◄─────  {"pid":N} from the first process, which
//	                                           writes pid 1's id maps
//	                                   ◄─────  {"mapped":true}; it makes the network
//	                                           namespace in pid 1's user namespace, hands
//	                                           it to pid 1, exits; pid 1 becomes the
//	                                           jail's root
//	base of the program
//	[+ stdin, stdout, stderr]          ─────►  builds the base of the new root (host
//	                                           dirs, /dev, /tmp, /proc), joins the
//	                                           network namespace
//	run dir, seccomp filters; idmap the
//	workspace with the jail's user
//	namespace (root only)
//	rest: command, neonbox-ns's filter
//	[+ workspace fd]                   ─────►  mounts the workspace, pivots, drops the
//	                                           bounds (limits, bounding set), looks the
//	                                           command up, drops every privilege, loads
//	                                           neonbox-ns's own filter
//	cgroup
//	final part: the policy's filters
//	[+ v1 cgroup tasks fds]            ─────►  [v1: joins the run's cgroup], loads the
//	                                           policy's filters
//	                                   ◄─────  {"ready":true,"steps":[...]} just before execve
//	                                   ◄─────  EOF: execve succeeded
//
// A Pool's prepared jail (Deferred) gets the rest and the final part in
// one message and stops after building the jail:
//
//	                                   ◄─────  {"prepared":true,"steps":[...]}
//	call program (argv, env, cwd)
//	+ [stdin, stdout, stderr]          ─────►  looks the command up, joins the memory
//	                                           cgroup, loads the policy's filters, as
//	                                           above (its privileges went before it
//	                                           said "prepared")
//
// Any step that fails ends the init with
// {"error":{stage,op,path,errno,message}}. EOF without "ready" means the
// init died before it could say why.

import (
	"bytes"
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"strconv"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/neonbox/neonbox-ns/internal/jailinit"
)

// initName is the argv[0] under which the binary runs as a jail's init.
const initName = jailinit.Name

// childConfig describes the jail; baseProgram and restProgram turn it
// into the init's program. Host paths are absolute.
type childConfig struct {
	Argv []string
	Env  []string
	Cwd  string
	// RunDir holds the overlay's upper/ and work/.
	RunDir string
	// OneFS says the workspace and the upper dir are on one filesystem
	// (overlay.MountData).
	OneFS bool
	// noHostView: made without the host's directories (bareJailConfig),
	// so that baseProgram refuses it.
	noHostView bool
	// RootMount is where the init mounts the new root before the pivot.
	RootMount string
	// Workspace is the workspace's path, on the host and in the jail.
	Workspace string
	// WorkspaceFD says the workspace arrives as an idmapped mount fd
	// with the config; otherwise the init binds Workspace itself.
	WorkspaceFD bool
	// ReadOnly are host directories bound read-only at the same path.
	ReadOnly []string
	// Symlinks are recreated in the new root (/bin -> usr/bin, ...).
	Symlinks []symlink
	// Masked are files under ReadOnly hidden behind /dev/null.
	Masked []string
	// UID and GID are the jail ids CMD runs as.
	UID uint32
	GID uint32
	// SetGroups says supplementary groups can be cleared (false when
	// the jail maps a single unprivileged id).
	SetGroups bool
	// DevPts asks for a /dev/pts, for runs attached to a terminal.
	DevPts bool
	// Seccomp are compiled filters (classic BPF): neonbox-ns's own,
	// loaded as the init drops its privileges in the rest, then the
	// policy's, loaded just before execve; the kernel applies all of
	// them.
	Seccomp [][]byte
	// ReadOnlyWorkspace binds the workspace read-only instead of
	// mounting an overlay (no fs-write capability).
	ReadOnlyWorkspace bool
	// Network keeps the host's network: no lo to bring up.
	Network bool
	// Binds are extra host directories from the policy.
	Binds []bind
	// CgroupTasks is how many v1 cgroup tasks files (cgroup.OpenTasks)
	// follow the workspace fd: the init's thread joins the run's cgroup
	// through them just before execve.
	CgroupTasks int
	// Deferred: build the jail, overlay included, say "prepared",
	// then wait for a call program with the command (a Pool's
	// prepared jail).
	Deferred bool
}

type bind struct {
	Path     string
	ReadOnly bool
}

type symlink struct {
	Path   string
	Target string
}

// childMessage is what the init sends back.
type childMessage struct {
	// Pid is the jail's init, from the process that forked it, which
	// says Mapped once it has written the init's id maps.
	Pid      int        `json:"pid,omitempty"`
	Mapped   bool       `json:"mapped,omitempty"`
	Ready    bool       `json:"ready,omitempty"`
	Prepared bool       `json:"prepared,omitempty"`
	Error    *StepError `json:"error,omitempty"`
	// Steps are CLOCK_MONOTONIC times (ns) at which the init finished
	// its steps, for the receipt's phase breakdown.
	Steps []initStep `json:"steps,omitempty"`
}

// decodeMessage decodes one message of the init. The first two, its pid
// and that its ids are mapped, come as a cold neonbox-ns process starts,
// and the report that the init is about to exec CMD comes as the jail
// starts: all three are read without encoding/json, whose first
// decoding of a type builds that type's decoder by reflection, 0.1-0.2
// ms here. Anything else (an error, a message not written as the init
// writes it) goes to encoding/json.
func decodeMessage(b []byte, m *childMessage) error {
	if string(b) == `{"mapped":true}` {
		m.Mapped = true
		return nil
	}
	if s, ok := bytes.CutPrefix(b, []byte(`{"pid":`)); ok {
		if s, ok := bytes.CutSuffix(s, []byte("}")); ok && len(s) > 0 && s[0] != '0' {
			if n, err := strconv.ParseUint(string(s), 10, 31); err == nil {
				m.Pid = int(n)
				return nil
			}
		}
	}
	if decodeReport(b, m) {
		return nil
	}
	return json.Unmarshal(b, m)
}

// Prefixes of the init's reports (report in jailinit.c).
var (
	readyPrefix    = []byte(`{"ready":true,"steps":[`)
	preparedPrefix = []byte(`{"prepared":true,"steps":[`)
)

// decodeReport decodes {"ready":true,"steps":[...]} or its "prepared"
// twin exactly as report in jailinit.c writes them (no spaces, step
// names of [a-z0-9_], times in plain decimal), and says false for
// anything else.
func decodeReport(b []byte, m *childMessage) bool {
	ready := bytes.HasPrefix(b, readyPrefix)
	switch {
	case ready:
		b = b[len(readyPrefix):]
	case bytes.HasPrefix(b, preparedPrefix):
		b = b[len(preparedPrefix):]
	default:
		return false
	}
	steps := []initStep{}
	for len(b) > 0 && b[0] != ']' {
		if len(steps) > 0 {
			if b[0] != ',' {
				return false
			}
			b = b[1:]
		}
		var ok bool
		if b, ok = bytes.CutPrefix(b, []byte(`{"name":"`)); !ok {
			return false
		}
		end := bytes.IndexByte(b, '"')
		if end < 0 {
			return false
		}
		name := b[:end]
		for _, c := range name {
			if (c < 'a' || c > 'z') && (c < '0' || c > '9') && c != '_' {
				return false
			}
		}
		if b, ok = bytes.CutPrefix(b[end+1:], []byte(`,"at":`)); !ok {
			return false
		}
		digits := 0
		for digits < len(b) && b[digits] >= '0' && b[digits] <= '9' {
			digits++
		}
		if digits == 0 || digits > 1 && b[0] == '0' {
			return false
		}
		at, err := strconv.ParseInt(string(b[:digits]), 10, 64)
		if err != nil {
			return false
		}
		if b, ok = bytes.CutPrefix(b[digits:], []byte("}")); !ok {
			return false
		}
		steps = append(steps, initStep{Name: string(name), At: at})
	}
	if string(b) != "]}" {
		return false
	}
	m.Ready, m.Prepared, m.Steps = ready, !ready, steps
	return true
}

type initStep struct {
	Name string `json:"name"`
	At   int64  `json:"at"`
}

// monotonic reads CLOCK_MONOTONIC, which parent and init share.
func monotonic() int64 {
	var ts unix.Timespec
	_ = unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
	return ts.Nano()
}

// StepError says which isolation step failed and why. It is what the
// jail's init reports and what a SANDBOX_ERROR receipt carries.
type StepError struct {
	// Stage is the step ("rootfs", "workspace", "commit", ...), Op the
	// operation or system call that failed in it, Path the path it
	// failed on, Errno its errno (0 if none) and Message what went
	// wrong. Remedy, when set, says what to change on the machine, in
	// the words neonbox-ns doctor uses.
	Stage   string `json:"stage"`
	Op      string `json:"op,omitempty"`
	Path    string `json:"path,omitempty"`
	Errno   int    `json:"errno,omitempty"`
	Message string `json:"message"`
	Remedy  string `json:"remedy,omitempty"`
}

// Error formats e as "stage: op path: message", leaving out what is
// empty.
func (e *StepError) Error() string {
	s := e.Stage
	if e.Op != "" {
		s += ": " + e.Op
	}
	if e.Path != "" {
		s += " " + e.Path
	}
	return s + ": " + e.Message
}

// Unwrap exposes the errno, so errors.Is(err, syscall.ENOENT) works.
func (e *StepError) Unwrap() error {
	if e.Errno == 0 {
		return nil
	}
	return syscall.Errno(e.Errno)
}

// stepError turns err into a StepError of stage, keeping the operation,
// path and errno when err carries them.
func stepError(stage string, err error) *StepError {
	se := &StepError{Stage: stage, Message: err.Error()}
	var pe *fs.PathError
	var sce *os.SyscallError
	switch {
	case errors.As(err, &pe):
		se.Op, se.Path, se.Message = pe.Op, pe.Path, pe.Err.Error()
	case errors.As(err, &sce):
		se.Op, se.Message = sce.Syscall, sce.Err.Error()
	}
	var errno syscall.Errno
	if errors.As(err, &errno) {
		se.Errno = int(errno)
	}
	return se
}
