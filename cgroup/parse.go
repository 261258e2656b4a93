package cgroup

// Parsers for the kernel files this package reads. They take the file's
// text and touch nothing, so they are tested without privilege.

import (
	"fmt"
	"io"
	"math"
	"path"
	"strconv"
	"strings"

	"github.com/neonbox/neonbox-ns/internal/linux"
)

// mountInfo is one line of /proc/self/mountinfo.
type mountInfo struct {
	root       string // the mounted directory inside its filesystem
	mountpoint string
	fstype     string
	superOpts  []string
}

// parseMountinfo parses /proc/self/mountinfo (proc(5)).
func parseMountinfo(r io.Reader) ([]mountInfo, error) {
	data, err := io.ReadAll(r)
	if err != nil {
		return nil, fmt.Errorf("read mountinfo: %w", err)
	}
	var out []mountInfo
	for _, line := range strings.Split(string(data), "\n") {
		if line == "" {
			continue
		}
		fields := strings.Fields(line)
		sep := -1
		for i := 6; i < len(fields); i++ {
			if fields[i] == "-" {
				sep = i
				break
			}
		}
		if len(fields) < 7 || sep < 0 || len(fields) < sep+4 {
			return nil, fmt.Errorf("parse mountinfo line %q: too few fields", line)
		}
		out = append(out, mountInfo{
			root:       linux.UnescapeMountinfo(fields[3]),
			mountpoint: linux.UnescapeMountinfo(fields[4]),
			fstype:     fields[sep+1],
			superOpts:  strings.Split(fields[sep+3], ","),
		})
	}
	return out, nil
}

// hasOpt reports whether opts contains o.
func hasOpt(opts []string, o string) bool {
	for _, x := range opts {
		if x == o {
			return true
		}
	}
	return false
}

// cgroupDir returns the directory of the cgroup at cgPath (as
// /proc/self/cgroup shows it) under a mount of its hierarchy whose root is
// mountRoot. It fails if the cgroup lies outside the mounted subtree.
func cgroupDir(mountpoint, mountRoot, cgPath string) (string, error) {
	if !path.IsAbs(cgPath) || !path.IsAbs(mountRoot) {
		return "", fmt.Errorf("cgroup path %q or mount root %q is not absolute", cgPath, mountRoot)
	}
	cgPath, mountRoot = path.Clean(cgPath), path.Clean(mountRoot)
	rel := strings.TrimPrefix(cgPath, mountRoot)
	switch {
	case mountRoot == "/":
		rel = cgPath
	case cgPath == mountRoot:
		rel = "/"
	case len(rel) == len(cgPath) || rel[0] != '/':
		return "", fmt.Errorf("cgroup %s is outside the subtree %s mounted at %s", cgPath, mountRoot, mountpoint)
	}
	return path.Join(mountpoint, rel), nil
}

// parseKeyed parses a flat keyed file such as cpu.stat, memory.events,
// memory.oom_control or pids.events: one "key value" pair per line.
// A value of "max" is returned as math.MaxInt64.
func parseKeyed(data string) (map[string]int64, error) {
	out := make(map[string]int64)
	for _, line := range strings.Split(data, "\n") {
		if strings.TrimSpace(line) == "" {
			continue
		}
		f := strings.Fields(line)
		if len(f) != 2 {
			return nil, fmt.Errorf("parse %q: want \"key value\"", line)
		}
		v, err := parseValue(f[1])
		if err != nil {
			return nil, fmt.Errorf("parse %q: %w", line, err)
		}
		out[f[0]] = v
	}
	return out, nil
}

// parseValue parses a single-value cgroup file such as memory.peak,
// cpuacct.usage or pids.max. "max" (no limit) is returned as
// math.MaxInt64, and so is anything larger.
func parseValue(s string) (int64, error) {
	s = strings.TrimSpace(s)
	if s == "max" {
		return math.MaxInt64, nil
	}
	v, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("parse cgroup value %q: %w", s, err)
	}
	if v > math.MaxInt64 {
		return math.MaxInt64, nil
	}
	return int64(v), nil
}

// parseControllers parses cgroup.controllers or cgroup.subtree_control.
func parseControllers(data string) map[string]bool {
	out := make(map[string]bool)
	for _, c := range strings.Fields(data) {
		out[c] = true
	}
	return out
}

// parsePids parses cgroup.procs.
func parsePids(data string) ([]int, error) {
	var out []int
	for _, f := range strings.Fields(data) {
		pid, err := strconv.Atoi(f)
		if err != nil || pid <= 0 {
			return nil, fmt.Errorf("parse cgroup.procs entry %q: not a pid", f)
		}
		out = append(out, pid)
	}
	return out, nil
}

// inCgroup reports whether the cgroup at p (a /proc/<pid>/cgroup path)
// is cg or below it.
func inCgroup(p, cg string) bool {
	return p == cg || strings.HasPrefix(p, strings.TrimSuffix(cg, "/")+"/")
}
