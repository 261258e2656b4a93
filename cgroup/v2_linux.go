package cgroup

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// newV2 creates <our cgroup>/neonbox/<name> on the cgroup2 mount of h,
// enabling the controllers l needs on the way, and writes l into it.
func newV2(h *v2Host, name string, l Limits, quota int64) (*Cgroup, error) {
	var need []string
	if l.MemoryBytes > 0 {
		need = append(need, "memory")
	}
	if quota > 0 {
		need = append(need, "cpu")
	}
	if l.Pids > 0 {
		need = append(need, "pids")
	}

	v2State.Lock()
	base, err := delegate(h, need)
	if err != nil {
		v2State.Unlock()
		return nil, err
	}
	parent := filepath.Join(base.dir, runsDir)
	dir := filepath.Join(parent, name)
	err = makeRunDir(parent, dir, func() error { return enableBelow(parent, need) })
	v2State.Unlock()
	if err != nil {
		return nil, errors.Join(err, rmdirShared(parent))
	}

	c := &Cgroup{
		version: V2,
		name:    name,
		limits:  l,
		fd:      -1,
		runs:    []runDir{{parent: parent, dir: dir, path: path.Join(base.path, runsDir, name)}},
	}
	fail := func(err error) (*Cgroup, error) {
		if c.fd >= 0 {
			unix.Close(c.fd)
		}
		return nil, errors.Join(err, rmdirTree(dir), rmdirShared(parent))
	}
	if quota > 0 {
		c.limits.CPUs = float64(quota) / cfsPeriod
	}
	if err := c.applyV2(quota); err != nil {
		return fail(fmt.Errorf("apply limits %+v: %w", l, err))
	}
	if l.MemoryBytes > 0 {
		m, err := c.readValue(filepath.Join(dir, "memory.max"))
		if err != nil {
			return fail(err)
		}
		c.limits.MemoryBytes = m
	}
	fd, err := unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fail(&fs.PathError{Op: "open", Path: dir, Err: err})
	}
	c.fd = fd
	return c, nil
}

// applyV2 writes c's limits into its v2 directory.
func (c *Cgroup) applyV2(quota int64) error {
	l, dir := c.limits, c.runs[0].dir
	if l.MemoryBytes > 0 {
		if err := writeFile(filepath.Join(dir, "memory.max"), strconv.FormatInt(l.MemoryBytes, 10)); err != nil {
			return err
		}
		// No swap, so that a memory limit is a limit.
		err := writeFile(filepath.Join(dir, "memory.swap.max"), "0")
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
	}
	if quota > 0 {
		if err := writeFile(filepath.Join(dir, "cpu.max"), fmt.Sprintf("%d %d", quota, cfsPeriod)); err != nil {
			return err
		}
	}
	if l.Pids > 0 {
		if err := writeFile(filepath.Join(dir, "pids.max"), strconv.FormatInt(l.Pids, 10)); err != nil {
			return err
		}
	}
	return nil
}

// delegate makes sure the controllers in need reach the children of our
// own cgroup (h.base): they must be listed in its cgroup.controllers, and
// are enabled in its cgroup.subtree_control if they are not yet (with
// memory, cpu and pids where available, for Stats). A non-root cgroup
// with processes cannot enable controllers for its children
// (Documentation/admin-guide/cgroup-v2.rst, "No Internal Process
// Constraint"); if the only process in our cgroup is us, delegate moves us
// into its leaf child selfLeaf and remembers our former cgroup as the
// base for later runs. It returns the base. The caller holds v2State.
func delegate(h *v2Host, need []string) (v2Cg, error) {
	base := h.base
	if len(need) == 0 {
		return base, nil
	}
	avail, err := readControllers(base.dir, "cgroup.controllers")
	if err != nil {
		return base, err
	}
	if missing := missing(need, avail); len(missing) > 0 {
		return base, fmt.Errorf("%s limit: %w: cgroup2 controller(s) %s not delegated to our cgroup %s (its cgroup.controllers: [%s])",
			strings.Join(missing, ", "), ErrUnsupported, strings.Join(missing, ", "), base.dir, strings.Join(sortedKeys(avail), " "))
	}
	enabled, err := readControllers(base.dir, "cgroup.subtree_control")
	if err != nil {
		return base, err
	}
	if len(missing(need, enabled)) == 0 {
		return base, nil
	}
	var add []string
	for _, ctrl := range v2Controllers {
		if avail[ctrl] && !enabled[ctrl] {
			add = append(add, ctrl)
		}
	}
	control := filepath.Join(base.dir, "cgroup.subtree_control")
	err = enable(control, add)
	if !errors.Is(err, unix.EBUSY) {
		return base, err
	}
	// EBUSY: our cgroup holds processes.
	others, err := otherProcs(base.dir)
	if err != nil {
		return base, err
	}
	if len(others) > 0 {
		return base, fmt.Errorf("enable %s in %s: %w: our cgroup also holds processes %v, and cgroup v2 lets no cgroup with processes hand controllers to its children; start neonbox-ns in a delegated cgroup of its own (e.g. systemd-run --scope -p Delegate=yes)",
			strings.Join(add, " "), control, ErrUnsupported, others)
	}
	leaf := filepath.Join(base.dir, selfLeaf)
	if err := os.Mkdir(leaf, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
		return base, err
	}
	if err := writeFile(filepath.Join(leaf, "cgroup.procs"), strconv.Itoa(os.Getpid())); err != nil {
		return base, fmt.Errorf("move ourselves into %s: %w", leaf, err)
	}
	if v2State.base == nil {
		v2State.base = map[string]v2Cg{}
	}
	v2State.base[h.mount] = base
	return base, enable(control, add)
}

// enableBelow enables in the cgroup.subtree_control of parent (our
// neonbox/ directory, which never holds processes) the controllers in need
// and, where parent has them, the others of v2Controllers.
func enableBelow(parent string, need []string) error {
	avail, err := readControllers(parent, "cgroup.controllers")
	if err != nil {
		return err
	}
	if missing := missing(need, avail); len(missing) > 0 {
		return fmt.Errorf("%w: cgroup2 controller(s) %s not available in %s", ErrUnsupported, strings.Join(missing, ", "), parent)
	}
	enabled, err := readControllers(parent, "cgroup.subtree_control")
	if err != nil {
		return err
	}
	var add []string
	for _, ctrl := range v2Controllers {
		if avail[ctrl] && !enabled[ctrl] {
			add = append(add, ctrl)
		}
	}
	control := filepath.Join(parent, "cgroup.subtree_control")
	if err := enable(control, add); err != nil {
		// The optional ones are not worth failing for.
		return enable(control, missing(need, enabled))
	}
	return nil
}

// enable writes "+ctrl ..." to the cgroup.subtree_control file control.
func enable(control string, ctrls []string) error {
	if len(ctrls) == 0 {
		return nil
	}
	var b strings.Builder
	for i, c := range ctrls {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString("+" + c)
	}
	if err := writeFile(control, b.String()); err != nil {
		return fmt.Errorf("enable controllers %s: %w", b.String(), err)
	}
	return nil
}

// missing returns the entries of want not in have.
func missing(want []string, have map[string]bool) []string {
	return slices.DeleteFunc(slices.Clone(want), func(c string) bool { return have[c] })
}

// statsFilesV2 are the files statsV2 reads.
func (c *Cgroup) statsFilesV2() []string {
	dir := c.runs[0].dir
	return []string{filepath.Join(dir, "memory.peak"), filepath.Join(dir, "memory.events"), filepath.Join(dir, "cpu.stat"), filepath.Join(dir, "pids.peak")}
}

func (c *Cgroup) statsV2(s *Stats) error {
	dir := c.runs[0].dir
	var err error
	if s.PeakMemoryBytes, err = c.readValue(filepath.Join(dir, "memory.peak")); err != nil {
		return err
	}
	ev, err := c.readKeyed(filepath.Join(dir, "memory.events"))
	if err != nil {
		return err
	}
	s.OOMKills = ev["oom_kill"]
	st, err := c.readKeyed(filepath.Join(dir, "cpu.stat"))
	if err != nil {
		return err
	}
	s.CPUUsage = time.Duration(st["usage_usec"]) * time.Microsecond
	s.NrThrottled = st["nr_throttled"]
	s.ThrottledTime = time.Duration(st["throttled_usec"]) * time.Microsecond
	if s.PidsPeak, err = c.readValue(filepath.Join(dir, "pids.peak")); err != nil {
		return err
	}
	return nil
}

// killV2 writes cgroup.kill and waits for the cgroup to empty; on kernels
// before 5.14, which lack cgroup.kill, it falls back to freezing and
// signalling each process.
func (c *Cgroup) killV2(deadline time.Time) error {
	err := writeFile(filepath.Join(c.runs[0].dir, "cgroup.kill"), "1")
	switch {
	case err == nil:
		return c.waitEmpty(deadline)
	case errors.Is(err, fs.ErrNotExist):
		return c.killRounds(deadline, c.freezeV2)
	default:
		return err
	}
}

// freezeV2 freezes (or thaws) the run's cgroup through cgroup.freeze and
// waits, until deadline and for at most a second, for cgroup.events to
// agree. Without cgroup.freeze (kernels before 5.2) it does nothing.
func (c *Cgroup) freezeV2(frozen bool, deadline time.Time) error {
	dir := c.runs[0].dir
	want := int64(0)
	if frozen {
		want = 1
	}
	err := writeFile(filepath.Join(dir, "cgroup.freeze"), strconv.FormatInt(want, 10))
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	if t := time.Now().Add(time.Second); t.Before(deadline) {
		deadline = t
	}
	for {
		ev, err := c.readKeyed(filepath.Join(dir, "cgroup.events"))
		if err != nil {
			return err
		}
		if ev["frozen"] == want {
			return nil
		}
		if time.Now().After(deadline) {
			if frozen {
				return nil // kill anyway; the caller thaws
			}
			return fmt.Errorf("%s does not thaw", dir)
		}
		time.Sleep(time.Millisecond)
	}
}
