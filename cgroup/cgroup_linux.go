package cgroup

import (
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/neonbox/neonbox-ns/internal/linux"
)

// Cgroup is one run's cgroup: a directory in the unified hierarchy (v2) or
// one in each v1 hierarchy. Its methods are called by the parent, and may
// be called from several goroutines.
type Cgroup struct {
	version Version
	name    string
	limits  Limits

	// runs are the run's directories: one on v2, one per v1 hierarchy
	// (controllers co-mounted in one hierarchy share it).
	runs []runDir

	mu      sync.Mutex
	fd      int // v2: the run's directory, for CLONE_INTO_CGROUP; -1 if none
	deleted bool

	// stats are descriptors of the files Stats reads, by path, once
	// OpenStats has opened them: reading them at a run's end is then a
	// pread each, not a path lookup in cgroupfs (0.1-0.15 ms for the
	// five of a v1 run). statsMu, not mu, guards them: Delete holds mu
	// while Kill reads cgroup files.
	statsMu sync.Mutex
	stats   map[string]int
}

// runDir is the run's cgroup in one hierarchy.
type runDir struct {
	ctrls  []string // v1 controllers of the hierarchy we use; nil on v2
	parent string   // <our cgroup>/neonbox
	dir    string   // <our cgroup>/neonbox/<name>
	path   string   // the run's cgroup as /proc/<pid>/cgroup shows it
}

// New creates a fresh cgroup for one run, named name (unique per run),
// below our own cgroup, and applies l. It uses v2 or v1 as Detect reports.
// It fails, with an error wrapping ErrUnsupported that names the missing
// piece, if a requested limit cannot be enforced here, and it fails if a
// cgroup of that name exists already. On failure it removes what it made.
func New(name string, l Limits) (*Cgroup, error) {
	return Probe().New(name, l)
}

// Host is what Probe found out about the cgroups this process may use.
type Host struct{ h *host }

// Probe looks at this process's cgroups, once, for Version and New.
func Probe() *Host { return &Host{probe(defaultV2Mount)} }

// Unified reports whether the host mounts cgroup2 at /sys/fs/cgroup, as
// unified (v2-only) hosts do. Only then can Probe find V2; it costs one
// statfs, where Probe reads and parses the host's mounts.
func Unified() bool { return isCgroup2(defaultV2Mount) }

// New is the package's New on what h found.
func (h *Host) New(name string, l Limits) (*Cgroup, error) { return newAt(h.h, name, l) }

// WithoutFreezer returns h for cgroups that New makes without a v1
// freezer hierarchy: for processes that all live in one pid namespace
// whose init the caller kills, which kills the rest (the kernel's
// zap_pid_ns_processes), so that Kill need not freeze them to win
// against fork (it signals them in rounds). A run's cgroup then costs a
// directory and a tasks file fewer. On v2 nothing changes.
func (h *Host) WithoutFreezer() *Host {
	c := *h.h
	c.v1 = maps.Clone(h.h.v1)
	delete(c.v1, "freezer")
	return &Host{&c}
}

// newAt is New on what probe found.
func newAt(h *host, name string, l Limits) (*Cgroup, error) {
	if err := validName(name); err != nil {
		return nil, err
	}
	quota, err := l.validate()
	if err != nil {
		return nil, fmt.Errorf("create cgroup %s: %w", name, err)
	}
	v, why := h.version()
	switch v {
	case V2:
		c, err := newV2(h.v2, name, l, quota)
		if err != nil {
			return nil, fmt.Errorf("create v2 cgroup %s: %w", name, err)
		}
		return c, nil
	case V1:
		c, err := newV1(h.v1, name, l, quota, why)
		if err != nil {
			return nil, fmt.Errorf("create v1 cgroup %s: %w", name, err)
		}
		return c, nil
	default:
		return nil, fmt.Errorf("create cgroup %s: %w: %s", name, ErrUnsupported, why)
	}
}

// Version reports whether c is a v2 or a v1 cgroup.
func (c *Cgroup) Version() Version { return c.version }

// Limits reports the limits applied to c, as the kernel took them (it
// rounds a memory limit down to a page).
func (c *Cgroup) Limits() Limits { return c.limits }

// FD returns a descriptor of c's v2 directory for CLONE_INTO_CGROUP
// (syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: fd}): the child starts
// inside the cgroup, with no window in which it runs unlimited. ok is false
// on v1 (use Add) and after Delete. c owns the descriptor.
func (c *Cgroup) FD() (fd int, ok bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.fd, c.fd >= 0
}

// Add moves the process pid (all its threads) into c: on v1 into every
// hierarchy's cgroup.
func (c *Cgroup) Add(pid int) error {
	if pid <= 0 {
		return fmt.Errorf("add pid %d to cgroup %s: not a pid", pid, c.name)
	}
	for _, r := range c.runs {
		if err := writeFile(filepath.Join(r.dir, "cgroup.procs"), strconv.Itoa(pid)); err != nil {
			return fmt.Errorf("add pid %d to cgroup %s: %w", pid, c.name, err)
		}
	}
	return nil
}

// OpenTasks opens, on v1, the tasks file of each of c's hierarchies for
// writing; on v2 it returns nil (use FD). A thread that writes "0" to
// every one of them moves itself, alone, into c, and when it then calls
// execve the new program is in c: execve ends the other threads. This
// is how a jail joins a v1 cgroup: moving a whole process (Add) makes
// the kernel take cgroup_threadgroup_rwsem for writing, which waits for
// an RCU grace period, several milliseconds; a thread moving itself
// needs no such lock (kernel/cgroup/cgroup.c, cgroup_procs_write_start).
// The kernel checks the permission with the credentials the files were
// opened with, so they work in a process that could not open them.
// The memory hierarchy's comes first, where it is mounted. The caller
// closes the files.
func (c *Cgroup) OpenTasks() ([]*os.File, error) {
	if c.version != V1 {
		return nil, nil
	}
	var files []*os.File
	for _, r := range c.runs {
		// Not os.OpenFile, which would register the file with the
		// netpoller (see OpenStats): these are on the jail's way to
		// its command.
		p := filepath.Join(r.dir, "tasks")
		fd, err := linux.Open(p, unix.O_WRONLY, 0)
		if err != nil {
			for _, f := range files {
				f.Close()
			}
			return nil, fmt.Errorf("open tasks of cgroup %s: %w", c.name, err)
		}
		files = append(files, os.NewFile(uintptr(fd), p))
	}
	return files, nil
}

// Stats reads what the run used so far; the peaks and counters keep their
// values after the processes exit, until Delete.
func (c *Cgroup) Stats() (Stats, error) {
	var (
		s   Stats
		err error
	)
	if c.version == V2 {
		err = c.statsV2(&s)
	} else {
		err = c.statsV1(&s)
	}
	if err != nil {
		return Stats{}, fmt.Errorf("read stats of cgroup %s: %w", c.name, err)
	}
	return s, nil
}

// Kill kills every process in c and waits, at most 5 s, until none is
// left. On v2 it writes cgroup.kill. On v1 (and v2 kernels before 5.14) it
// freezes the cgroup when a freezer is there, so that nothing can fork
// meanwhile, sends SIGKILL to each listed process, thaws, and repeats
// until the cgroup is empty. A process is signalled through a pidfd and
// only after /proc/<pid>/cgroup shows it inside c, so a recycled pid is
// never hit. Processes that have exited but not been reaped (zombies)
// do not count.
func (c *Cgroup) Kill() error {
	deadline := time.Now().Add(killTimeout)
	var err error
	if c.version == V2 {
		err = c.killV2(deadline)
	} else {
		err = c.killRounds(deadline, c.freezeV1)
	}
	if err != nil {
		return fmt.Errorf("kill cgroup %s: %w", c.name, err)
	}
	return nil
}

// Delete kills what is left in c (see Kill) and removes its directories
// with rmdir, deepest first, never with os.RemoveAll; neonbox/ goes too
// when no other run is in it. Errors are joined. After a successful Delete
// c must not be used; Delete again is a no-op.
func (c *Cgroup) Delete() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.deleted {
		return nil
	}
	var errs []error
	if c.fd >= 0 {
		if err := unix.Close(c.fd); err != nil {
			errs = append(errs, os.NewSyscallError("close", err))
		}
		c.fd = -1
	}
	c.closeStats()
	if !c.rmdirEmpty() {
		if pids, err := c.procs(); err != nil {
			errs = append(errs, fmt.Errorf("delete cgroup %s: %w", c.name, err))
		} else if len(pids) > 0 {
			errs = append(errs, c.Kill())
		}
		for _, r := range c.runs {
			errs = append(errs, rmdirTree(r.dir))
		}
	}
	for _, r := range c.runs {
		errs = append(errs, rmdirShared(r.parent))
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	c.deleted = true
	return nil
}

// Dirs lists the directories Delete removes: the run's own, and the
// shared neonbox/ directories above them, which go when they are left
// empty. For a process that removes them after this one (Disown).
func (c *Cgroup) Dirs() (own, shared []string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, r := range c.runs {
		own = append(own, r.dir)
		if !slices.Contains(shared, r.parent) {
			shared = append(shared, r.parent)
		}
	}
	return own, shared
}

// Disown lets go of c without removing it: another process does (see
// Dirs). It closes c's FD; c must not be used after.
func (c *Cgroup) Disown() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.fd >= 0 {
		unix.Close(c.fd)
		c.fd = -1
	}
	c.closeStats()
	c.deleted = true
}

// OpenStats opens the files Stats reads, so that Stats, at a run's end,
// costs a pread of each. New leaves them for OpenStats: a jail that waits
// for its cgroup need not wait for them too. Stats reads a file that is
// not open by name.
func (c *Cgroup) OpenStats() {
	c.statsMu.Lock()
	defer c.statsMu.Unlock()
	if c.stats != nil { // opened, or closed by Delete or Disown
		return
	}
	paths := c.statsFiles()
	c.stats = make(map[string]int, len(paths))
	for _, p := range paths {
		// Not os.Open: a cgroup file can be polled, so os.Open would
		// register it with the netpoller (three system calls more),
		// and Fd would set it blocking again.
		if fd, err := linux.Open(p, unix.O_RDONLY, 0); err == nil {
			c.stats[p] = fd
		}
	}
}

// statsFiles are the files Stats reads.
func (c *Cgroup) statsFiles() []string {
	if c.version == V2 {
		return c.statsFilesV2()
	}
	return c.statsFilesV1()
}

func (c *Cgroup) closeStats() {
	c.statsMu.Lock()
	defer c.statsMu.Unlock()
	for _, fd := range c.stats {
		unix.Close(fd)
	}
	c.stats = map[string]int{} // not nil: OpenStats opens no more
}

// readStat reads the cgroup file path: through its descriptor from
// OpenStats if it has one, else by name (nil and no error if it does not
// exist).
func (c *Cgroup) readStat(path string) ([]byte, error) {
	c.statsMu.Lock()
	defer c.statsMu.Unlock()
	fd, ok := c.stats[path]
	if !ok {
		b, err := linux.ReadFile(path)
		if errors.Is(err, fs.ErrNotExist) {
			return nil, nil
		}
		return b, err
	}
	// One pread from the start: the kernel makes the file's text afresh
	// for it. (A second one at an offset could splice two versions.)
	buf := make([]byte, 4096)
	n, err := linux.Pread(fd, buf, 0)
	if err != nil {
		return nil, &fs.PathError{Op: "pread", Path: path, Err: err}
	}
	if n == len(buf) {
		return linux.ReadFile(path) // longer than expected: read it whole
	}
	return buf[:n], nil
}

// readValue reads a single-value cgroup file (0 if it does not exist).
func (c *Cgroup) readValue(path string) (int64, error) {
	b, err := c.readStat(path)
	if err != nil || b == nil {
		return 0, err
	}
	v, err := parseValue(string(b))
	if err != nil {
		return 0, fmt.Errorf("read %s: %w", path, err)
	}
	return v, nil
}

// readKeyed reads a flat keyed cgroup file (empty if it does not exist).
func (c *Cgroup) readKeyed(path string) (map[string]int64, error) {
	b, err := c.readStat(path)
	if err != nil || b == nil {
		return map[string]int64{}, err
	}
	m, err := parseKeyed(string(b))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	return m, nil
}

// rmdirEmpty tries one rmdir per directory of c, which is all it takes
// once a run's processes are gone, and reports whether they all went.
// The kernel refuses it (EBUSY) while a process or a child cgroup is in
// one; Delete then goes the long way.
func (c *Cgroup) rmdirEmpty() bool {
	gone := true
	for _, r := range c.runs {
		if err := unix.Rmdir(r.dir); err != nil && err != unix.ENOENT {
			gone = false
		}
	}
	return gone
}

// procs lists the processes in c and in any cgroup below it.
func (c *Cgroup) procs() ([]int, error) {
	var all []int
	for _, r := range c.runs {
		pids, err := procsTree(r.dir)
		if err != nil {
			return nil, err
		}
		all = append(all, pids...)
	}
	slices.Sort(all)
	return slices.Compact(all), nil
}

// owns reports whether /proc/<pid>/cgroup shows pid inside c. gone is
// true when the process no longer exists.
func (c *Cgroup) owns(pid int) (ok, gone bool, err error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/cgroup", pid))
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) || errors.Is(err, unix.ESRCH) {
			return false, true, nil
		}
		return false, false, err
	}
	defer f.Close()
	v1, unified, err := procCgroups(f)
	if errors.Is(err, unix.ESRCH) {
		return false, true, nil // it exited between the open and the read
	}
	if err != nil {
		return false, false, err
	}
	for _, r := range c.runs {
		p := unified
		if r.ctrls != nil {
			p = v1[r.ctrls[0]]
		}
		if p != "" && inCgroup(p, r.path) {
			return true, false, nil
		}
	}
	return false, false, nil
}

// killRounds freezes c (when freeze is not nil), SIGKILLs every process in
// it, thaws it, and repeats until c is empty or deadline passes.
func (c *Cgroup) killRounds(deadline time.Time, freeze func(frozen bool, deadline time.Time) error) error {
	return c.untilEmpty(deadline, 50*time.Millisecond, func(pids []int) error {
		var errs []error
		if freeze != nil {
			// A cgroup that will not freeze (a task stuck in the kernel)
			// is still signalled; thawing below lets the signal through.
			errs = append(errs, freeze(true, deadline))
			var err error
			if pids, err = c.procs(); err != nil {
				errs = append(errs, err)
			}
		}
		for _, pid := range pids {
			errs = append(errs, c.signal(pid))
		}
		if freeze != nil {
			errs = append(errs, freeze(false, deadline))
		}
		return errors.Join(errs...)
	})
}

// untilEmpty polls c, with pauses growing to maxPause, until it holds no
// process or deadline passes; act (if not nil) runs on what is left
// before each pause.
func (c *Cgroup) untilEmpty(deadline time.Time, maxPause time.Duration, act func(pids []int) error) error {
	pause := time.Millisecond
	for {
		pids, err := c.procs()
		if err != nil {
			return err
		}
		if len(pids) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("processes %v still there after %v", pids, killTimeout)
		}
		if act != nil {
			if err := act(pids); err != nil {
				return err
			}
		}
		time.Sleep(pause)
		pause = min(2*pause, maxPause)
	}
}

// signal sends SIGKILL to pid if it is inside c: through a pidfd, opened
// before the check, so that the check and the signal are about one
// process even if pid is recycled in between.
func (c *Cgroup) signal(pid int) error {
	pidfd, err := unix.PidfdOpen(pid, unix.PIDFD_NONBLOCK)
	switch {
	case errors.Is(err, unix.ESRCH):
		return nil
	case errors.Is(err, unix.ENOSYS):
		pidfd = -1 // kernel before 5.3: kill(2), with a tiny pid-reuse window
	case err != nil:
		return os.NewSyscallError("pidfd_open", err)
	default:
		defer unix.Close(pidfd)
	}
	ok, gone, err := c.owns(pid)
	if err != nil || gone || !ok {
		return err
	}
	if pidfd >= 0 {
		err = os.NewSyscallError("pidfd_send_signal", unix.PidfdSendSignal(pidfd, unix.SIGKILL, nil, 0))
	} else {
		err = os.NewSyscallError("kill", unix.Kill(pid, unix.SIGKILL))
	}
	if errors.Is(err, unix.ESRCH) {
		return nil
	}
	return err
}

// waitEmpty waits until c holds no process or deadline passes.
func (c *Cgroup) waitEmpty(deadline time.Time) error {
	return c.untilEmpty(deadline, 20*time.Millisecond, nil)
}

// makeRunDir creates parent (if missing), calls prepare on it, and
// creates dir below it, which must not exist yet. Another run's Delete
// may remove parent in between: then it starts over.
func makeRunDir(parent, dir string, prepare func() error) error {
	var err error
	for range 5 {
		if err = os.Mkdir(parent, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
			return err
		}
		if prepare != nil {
			if err = prepare(); errors.Is(err, fs.ErrNotExist) {
				continue
			} else if err != nil {
				return err
			}
		}
		if err = os.Mkdir(dir, 0o755); errors.Is(err, fs.ErrNotExist) {
			continue
		} else if errors.Is(err, fs.ErrExist) {
			return fmt.Errorf("cgroup %s exists already (left over from an earlier run?): %w", dir, err)
		}
		return err
	}
	return err
}

// rmdirTree removes the cgroup dir and any cgroups below it with rmdir,
// deepest first. A cgroup directory holds only control files, which rmdir
// takes along, and child cgroups. A missing dir is not an error.
func rmdirTree(dir string) error {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	var errs []error
	for _, e := range entries {
		if e.IsDir() {
			errs = append(errs, rmdirTree(filepath.Join(dir, e.Name())))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	// Right after its last task exits a cgroup can still be busy for a
	// moment; retry EBUSY for up to a second.
	pause := time.Millisecond
	for deadline := time.Now().Add(time.Second); ; {
		if err = unix.Rmdir(dir); err == nil || err == unix.ENOENT {
			return nil
		}
		err = &fs.PathError{Op: "rmdir", Path: dir, Err: err}
		if !errors.Is(err, unix.EBUSY) || time.Now().After(deadline) {
			return err
		}
		time.Sleep(pause)
		pause = min(2*pause, 100*time.Millisecond)
	}
}

// rmdirShared removes the shared neonbox/ directory unless other runs are
// still in it (or it is gone already).
func rmdirShared(dir string) error {
	err := unix.Rmdir(dir)
	if err == nil || err == unix.ENOENT || err == unix.EBUSY || err == unix.ENOTEMPTY {
		return nil
	}
	return &fs.PathError{Op: "rmdir", Path: dir, Err: err}
}

// procsTree lists the processes in the cgroup dir and below it; a missing
// dir holds none.
func procsTree(dir string) ([]int, error) {
	data, err := os.ReadFile(filepath.Join(dir, "cgroup.procs"))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	pids, err := parsePids(string(data))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", filepath.Join(dir, "cgroup.procs"), err)
	}
	entries, err := os.ReadDir(dir)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, err
	}
	for _, e := range entries {
		if e.IsDir() {
			sub, err := procsTree(filepath.Join(dir, e.Name()))
			if err != nil {
				return nil, err
			}
			pids = append(pids, sub...)
		}
	}
	return pids, nil
}

// writeFile writes s to the existing cgroup file path (never creating it).
func writeFile(path, s string) error {
	return linux.WriteFile(path, []byte(s), 0, 0)
}
