package cgroup

import (
	"errors"
	"os"
	"path"
	"path/filepath"
	"time"
)

// RemoveStale removes the cgroup of a run whose neonbox-ns process died
// before it could (kill -9): the directories named name below this
// process's own cgroups, in every hierarchy, after killing anything left
// in them. It finds them only where this process would have created them.
func RemoveStale(name string) error {
	if err := validName(name); err != nil {
		return err
	}
	h := probe(defaultV2Mount)
	var dirs []runDir
	if h.v2 != nil {
		base := h.v2.base
		v2State.Lock()
		if b, ok := v2State.base[h.v2.mount]; ok {
			base = b
		}
		v2State.Unlock()
		dirs = append(dirs, runDir{
			parent: filepath.Join(base.dir, runsDir), dir: filepath.Join(base.dir, runsDir, name),
			path: path.Join(base.path, runsDir, name),
		})
	}
	seen := map[string]bool{}
	for _, hier := range h.v1 {
		d := filepath.Join(hier.own.dir, runsDir, name)
		if !seen[d] {
			seen[d] = true
			dirs = append(dirs, runDir{
				ctrls: []string{hier.ctrl}, parent: filepath.Join(hier.own.dir, runsDir), dir: d,
				// what /proc/<pid>/cgroup shows for it: a process is
				// signalled only if it is inside (see owns)
				path: path.Join(hier.own.path, runsDir, name),
			})
		}
	}
	c := &Cgroup{name: name, fd: -1, version: V1}
	for _, d := range dirs {
		if _, err := os.Stat(d.dir); err == nil {
			c.runs = append(c.runs, d)
		}
	}
	if len(c.runs) == 0 {
		return nil
	}
	if h.v2 != nil && c.runs[0].ctrls == nil {
		c.version = V2
	}
	var errs []error
	if c.version == V1 {
		// The freezer is needed only if processes are left: with the
		// jail's pid namespace gone there should be none.
		errs = append(errs, c.killRounds(deadlineFromNow(), nil))
	} else {
		errs = append(errs, c.killV2(deadlineFromNow()))
	}
	for _, r := range c.runs {
		errs = append(errs, rmdirTree(r.dir))
	}
	for _, r := range c.runs {
		errs = append(errs, rmdirShared(r.parent))
	}
	return errors.Join(errs...)
}

func deadlineFromNow() time.Time { return time.Now().Add(killTimeout) }
