package nsjail

// The parent and the jail's init talk over one SOCK_SEQPACKET socket, the
// init's fd 3, which is close-on-exec in the init:
//
//	parent (neonbox-ns)                        init (neonbox-init, pid 1 of the jail)
//	───────────────────                        ──────────────────────────────────────
//	clone(USER|NS|PID|NET|UTS|IPC),
//	write uid_map/gid_map (os/exec)    ─────►  starts; blocks in recvmsg
//	idmap the workspace with the jail's
//	user namespace (root only)
//	childConfig JSON [+ workspace fd]  ─────►  builds the filesystem view,
//	                                           drops capabilities
//	                                   ◄─────  {"ready":true} just before execve
//	"g" (v1 cgroups: the init is in the
//	run's cgroup now)                  ─────►  execve
//	                                   ◄─────  EOF: execve succeeded
//
// A Pool's prepared jail (Deferred) stops after building the jail:
//
//	                                   ◄─────  {"prepared":true}
//	callMessage JSON + [stdin, stdout,
//	stderr]                            ─────►  mounts the overlay, then as above
//	                                   ◄─────  or {"error":{stage,op,path,errno,message}}
//
// A config is decoded strictly (unknown fields are an error). EOF without
// "ready" means the init died before it could say why.

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"syscall"

	"golang.org/x/sys/unix"
)

// initName is the argv[0] under which the binary runs as a jail's init.
const initName = "neonbox-init"

// childConfig is everything the init needs. Host paths are absolute.
type childConfig struct {
	Argv     []string `json:"argv"`
	Env      []string `json:"env"`
	Cwd      string   `json:"cwd"`
	Hostname string   `json:"hostname"`
	// RunDir holds root/ (the new root's mount point), lower/ (where the
	// workspace is attached before overlay), upper/ and work/.
	RunDir string `json:"run_dir"`
	// Workspace is the workspace's path, on the host and in the jail.
	Workspace string `json:"workspace"`
	// WorkspaceFD says the workspace arrives as an idmapped mount fd
	// with the config; otherwise the init binds Workspace itself.
	WorkspaceFD bool `json:"workspace_fd"`
	// ReadOnly are host directories bound read-only at the same path.
	ReadOnly []string `json:"read_only"`
	// Symlinks are recreated in the new root (/bin -> usr/bin, ...).
	Symlinks []symlink `json:"symlinks"`
	// Masked are files under ReadOnly hidden behind /dev/null.
	Masked []string `json:"masked"`
	// UID and GID are the jail ids CMD runs as.
	UID uint32 `json:"uid"`
	GID uint32 `json:"gid"`
	// SetGroups says supplementary groups can be cleared (false when
	// the jail maps a single unprivileged id).
	SetGroups bool `json:"set_groups"`
	// DevPts asks for a /dev/pts, for runs attached to a terminal.
	DevPts bool `json:"dev_pts"`
	// Seccomp are compiled filters (classic BPF) loaded, in order, just
	// before execve; the kernel applies all of them.
	Seccomp [][]byte `json:"seccomp"`
	// ReadOnlyWorkspace binds the workspace read-only instead of
	// mounting an overlay (no fs-write capability).
	ReadOnlyWorkspace bool `json:"read_only_workspace"`
	// Network keeps the host's network: no lo to bring up.
	Network bool `json:"network"`
	// Binds are extra host directories from the policy.
	Binds []bind `json:"binds"`
	// WaitGo: after "ready", wait for the parent's go-ahead (one byte)
	// before execve; the parent sends it once the init is in the run's
	// cgroup.
	WaitGo bool `json:"wait_go"`
	// Deferred: build the jail, say "prepared", then wait for a
	// callMessage with the command (a Pool's prepared jail). The
	// overlay is mounted only then.
	Deferred bool `json:"deferred"`
}

// callMessage gives a deferred init its command, with its stdin, stdout
// and stderr attached as SCM_RIGHTS.
type callMessage struct {
	Argv []string `json:"argv"`
	Env  []string `json:"env"`
	Cwd  string   `json:"cwd"`
}

type bind struct {
	Path     string `json:"path"`
	ReadOnly bool   `json:"read_only"`
}

type symlink struct {
	Path   string `json:"path"`
	Target string `json:"target"`
}

// childMessage is what the init sends back.
type childMessage struct {
	Ready    bool       `json:"ready,omitempty"`
	Prepared bool       `json:"prepared,omitempty"`
	Error    *StepError `json:"error,omitempty"`
	// Steps are CLOCK_MONOTONIC times (ns) at which the init finished
	// its steps, for the receipt's phase breakdown.
	Steps []initStep `json:"steps,omitempty"`
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

func decodeConfig(b []byte) (*childConfig, error) {
	var c childConfig
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&c); err != nil {
		return nil, fmt.Errorf("decode config: %w", err)
	}
	if len(c.Argv) == 0 && !c.Deferred {
		return nil, errors.New("decode config: empty argv")
	}
	return &c, nil
}
