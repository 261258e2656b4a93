package cgroup

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// newV1 creates the run's directory in each v1 hierarchy of hiers and
// writes l into them (applyV1). why says why v2 is not used.
func newV1(hiers map[string]v1Hier, name string, l Limits, quota int64, why string) (*Cgroup, error) {
	for _, need := range []struct {
		ctrl, limit string
		set         bool
	}{
		{"memory", "memory", l.MemoryBytes > 0},
		{"cpu", "cpu", quota > 0},
		{"pids", "pids", l.Pids > 0},
	} {
		if _, ok := hiers[need.ctrl]; need.set && !ok {
			return nil, fmt.Errorf("%s limit: %w: no usable v1 %s hierarchy (and %s)", need.limit, ErrUnsupported, need.ctrl, why)
		}
	}

	c := &Cgroup{version: V1, name: name, limits: l, fd: -1}
	byDir := map[string]int{} // co-mounted controllers share one directory
	for _, ctrl := range v1Controllers {
		h, ok := hiers[ctrl]
		if !ok || ctrl == "cpu" && quota <= 0 {
			// Without a CPU limit the cpu hierarchy would only count
			// throttling, of which there is none (cpuacct counts the
			// time, and keeps a directory shared with cpu where the two
			// are mounted together).
			continue
		}
		dir := filepath.Join(h.own.dir, runsDir, name)
		if i, ok := byDir[dir]; ok {
			c.runs[i].ctrls = append(c.runs[i].ctrls, ctrl)
			continue
		}
		byDir[dir] = len(c.runs)
		c.runs = append(c.runs, runDir{
			ctrls:  []string{ctrl},
			parent: filepath.Join(h.own.dir, runsDir),
			dir:    dir,
			path:   path.Join(h.own.path, runsDir, name),
		})
	}

	var made []runDir
	fail := func(err error) (*Cgroup, error) {
		errs := []error{err}
		for _, r := range made {
			errs = append(errs, rmdirTree(r.dir), rmdirShared(r.parent))
		}
		return nil, errors.Join(errs...)
	}
	for _, r := range c.runs {
		if err := makeRunDir(r.parent, r.dir, nil); err != nil {
			return fail(err)
		}
		made = append(made, r)
	}

	if err := c.applyV1(quota); err != nil {
		return fail(fmt.Errorf("apply limits %+v: %w", l, err))
	}
	if l.MemoryBytes > 0 {
		m, err := c.readValue(filepath.Join(c.dir("memory"), "memory.limit_in_bytes"))
		if err != nil {
			return fail(err)
		}
		c.limits.MemoryBytes = m
	}
	if quota > 0 {
		c.limits.CPUs = float64(quota) / cfsPeriod
	}
	return c, nil
}

// applyV1 writes c's limits into its v1 directories, memory's before
// memsw's (the kernel refuses a memory+swap limit below the memory
// limit) and the CFS period before the quota.
func (c *Cgroup) applyV1(quota int64) error {
	l := c.limits
	if l.MemoryBytes > 0 {
		dir := c.dir("memory")
		m := strconv.FormatInt(l.MemoryBytes, 10)
		if err := writeFile(filepath.Join(dir, "memory.limit_in_bytes"), m); err != nil {
			return err
		}
		// With swap accounting, memory+swap gets the same limit, so that
		// the run cannot swap its way past the memory limit.
		err := writeFile(filepath.Join(dir, "memory.memsw.limit_in_bytes"), m)
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
	}
	if quota > 0 {
		dir := c.dir("cpu")
		if err := writeFile(filepath.Join(dir, "cpu.cfs_period_us"), strconv.Itoa(cfsPeriod)); err != nil {
			return err
		}
		if err := writeFile(filepath.Join(dir, "cpu.cfs_quota_us"), strconv.FormatInt(quota, 10)); err != nil {
			return err
		}
	}
	if l.Pids > 0 {
		if err := writeFile(filepath.Join(c.dir("pids"), "pids.max"), strconv.FormatInt(l.Pids, 10)); err != nil {
			return err
		}
	}
	return nil
}

// dir returns the run's directory in the v1 hierarchy of ctrl, "" if the
// run has none there (not mounted, cpu without a CPU limit, freezer for
// a Host.WithoutFreezer).
func (c *Cgroup) dir(ctrl string) string {
	for _, r := range c.runs {
		for _, x := range r.ctrls {
			if x == ctrl {
				return r.dir
			}
		}
	}
	return ""
}

// statsFilesV1 are the files statsV1 reads.
func (c *Cgroup) statsFilesV1() []string {
	var paths []string
	if d := c.dir("memory"); d != "" {
		paths = append(paths, filepath.Join(d, "memory.max_usage_in_bytes"), filepath.Join(d, "memory.oom_control"))
	}
	if d := c.dir("cpuacct"); d != "" {
		paths = append(paths, filepath.Join(d, "cpuacct.usage"))
	}
	if d := c.dir("cpu"); d != "" {
		paths = append(paths, filepath.Join(d, "cpu.stat"))
	}
	if d := c.dir("pids"); d != "" {
		paths = append(paths, filepath.Join(d, "pids.peak"))
	}
	return paths
}

func (c *Cgroup) statsV1(s *Stats) error {
	var err error
	if d := c.dir("memory"); d != "" {
		if s.PeakMemoryBytes, err = c.readValue(filepath.Join(d, "memory.max_usage_in_bytes")); err != nil {
			return err
		}
		oom, err := c.readKeyed(filepath.Join(d, "memory.oom_control"))
		if err != nil {
			return err
		}
		s.OOMKills = oom["oom_kill"]
	}
	if d := c.dir("cpuacct"); d != "" {
		v, err := c.readValue(filepath.Join(d, "cpuacct.usage"))
		if err != nil {
			return err
		}
		s.CPUUsage = time.Duration(v) // nanoseconds
	}
	if d := c.dir("cpu"); d != "" {
		st, err := c.readKeyed(filepath.Join(d, "cpu.stat"))
		if err != nil {
			return err
		}
		s.NrThrottled = st["nr_throttled"]
		s.ThrottledTime = time.Duration(st["throttled_time"]) // nanoseconds
	}
	if d := c.dir("pids"); d != "" {
		if s.PidsPeak, err = c.readValue(filepath.Join(d, "pids.peak")); err != nil {
			return err
		}
	}
	return nil
}

// freezeV1 freezes (or thaws) the run's v1 freezer cgroup and waits, until
// deadline and for at most a second, for the state to be reached. Without
// a freezer hierarchy it does nothing.
func (c *Cgroup) freezeV1(frozen bool, deadline time.Time) error {
	d := c.dir("freezer")
	if d == "" {
		return nil
	}
	state := filepath.Join(d, "freezer.state")
	want := "THAWED"
	if frozen {
		want = "FROZEN"
	}
	if err := writeFile(state, want); err != nil {
		return err
	}
	if t := time.Now().Add(time.Second); t.Before(deadline) {
		deadline = t
	}
	for {
		got, err := os.ReadFile(state)
		if err != nil {
			return err
		}
		if strings.TrimSpace(string(got)) == want {
			return nil
		}
		if time.Now().After(deadline) {
			if frozen {
				return nil // kill anyway; the caller thaws
			}
			return fmt.Errorf("%s stays %s, want %s", state, strings.TrimSpace(string(got)), want)
		}
		time.Sleep(time.Millisecond)
	}
}
