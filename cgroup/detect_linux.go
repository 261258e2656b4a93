package cgroup

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"

	"github.com/containerd/cgroups/v3"
	"golang.org/x/sys/unix"

	"github.com/neonbox/neonbox-ns/internal/linux"
)

// defaultV2Mount is where a unified (cgroup v2) host mounts cgroup2.
const defaultV2Mount = "/sys/fs/cgroup"

// v2Controllers are the v2 controllers a run uses: a limit needs its own,
// and the others are enabled when available so that Stats can read them.
var v2Controllers = []string{"memory", "cpu", "pids"}

// v1Controllers are the v1 hierarchies a run may use, where mounted: cpu
// only for a CPU limit, freezer unless Host.WithoutFreezer. cpuacct
// gives CPUUsage and freezer makes Kill race-free; neither limits.
var v1Controllers = []string{"memory", "cpu", "cpuacct", "pids", "freezer"}

// selfLeaf is the child of our own v2 cgroup that New moves our process
// into when the no-internal-processes rule requires it.
const selfLeaf = "neonbox-self"

// runsDir is the directory below our own cgroup that holds the runs.
const runsDir = "neonbox"

// v2Cg is a cgroup in the unified hierarchy.
type v2Cg struct {
	path string // as /proc/<pid>/cgroup shows it, e.g. /user.slice/x.scope
	dir  string // its directory, e.g. /sys/fs/cgroup/user.slice/x.scope
}

// v2Host is what New needs to know about a cgroup2 mount.
type v2Host struct {
	mount string
	base  v2Cg // our own cgroup (before New moved us into selfLeaf)
}

// v1Hier is our place in one mounted v1 hierarchy.
type v1Hier struct {
	ctrl string // the controller we use the hierarchy for
	own  v2Cg   // our cgroup in this hierarchy (path and directory)
}

// host is what Detect found.
type host struct {
	v2     *v2Host // nil unless the v2 mount is cgroup2 and our cgroup is on it
	v2Full bool    // every v2Controllers entry is usable below our cgroup
	v2Why  string  // why v2 is not (fully) usable

	v1     map[string]v1Hier // by controller
	v1Full bool              // memory, cpu and pids are all there
	v1Why  string            // what is missing on v1
}

// v2State remembers, per cgroup2 mount, our own cgroup from before New
// moved this process into selfLeaf, so that later runs still go into that
// cgroup's neonbox/ and not into a new one below selfLeaf. Its mutex also
// serialises our writes to cgroup.subtree_control.
var v2State struct {
	sync.Mutex
	base map[string]v2Cg
}

// Detect reports what this host offers for limits: V2 if cgroup2 is
// mounted at /sys/fs/cgroup and the memory, cpu and pids controllers are
// delegated to our cgroup (enabled in its cgroup.subtree_control, or
// available and enable-able because no other process shares our cgroup);
// else V1 if the memory, cpu and pids v1 hierarchies are mounted; else
// V2 or V1 with only some controllers, if any; else None. The string says
// why v2 is not fully usable ("" when it is), and for V1 or None also what
// v1 lacks; New puts it in its errors.
func Detect() (Version, string) {
	h := probe(defaultV2Mount)
	return h.version()
}

// version chooses between what probe found, as Detect describes.
func (h *host) version() (Version, string) {
	switch {
	case h.v2 != nil && h.v2Full:
		return V2, ""
	case h.v1Full:
		return V1, "not v2: " + h.v2Why
	case h.v2 != nil:
		return V2, h.v2Why
	case len(h.v1) > 0:
		return V1, "not v2: " + h.v2Why + "; v1: " + h.v1Why
	default:
		return None, "not v2: " + h.v2Why + "; not v1: " + h.v1Why
	}
}

// probe looks at the cgroup2 mount at v2Mount and at the v1 hierarchies,
// reading /proc/self/mountinfo and /proc/self/cgroup once. It only reads.
func probe(v2Mount string) *host {
	h := &host{v1: map[string]v1Hier{}}
	mounts, v1Paths, unified, err := readSelf()
	if err != nil {
		h.v2Why, h.v1Why = err.Error(), err.Error()
		return h
	}
	h.probeV2(v2Mount, mounts, unified)
	h.probeV1(mounts, v1Paths)
	return h
}

// readSelf reads and parses /proc/self/mountinfo and /proc/self/cgroup.
func readSelf() (mounts []mountInfo, v1 map[string]string, unified string, err error) {
	mi, err := linux.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return nil, nil, "", err
	}
	if mounts, err = parseMountinfo(bytes.NewReader(mi)); err != nil {
		return nil, nil, "", err
	}
	cg, err := linux.ReadFile("/proc/self/cgroup")
	if err != nil {
		return nil, nil, "", err
	}
	v1, unified, err = procCgroups(bytes.NewReader(cg))
	return mounts, v1, unified, err
}

func (h *host) probeV2(mount string, mounts []mountInfo, unified string) {
	if !isCgroup2(mount) {
		h.v2Why = fmt.Sprintf("%s is not a cgroup2 mount", mount)
		if u := filepath.Join(mount, "unified"); isCgroup2(u) {
			ctrls, _ := linux.ReadFile(filepath.Join(u, "cgroup.controllers"))
			h.v2Why += fmt.Sprintf(" (hybrid host: the cgroup2 mount at %s offers controllers [%s])", u, strings.TrimSpace(string(ctrls)))
		}
		return
	}
	if unified == "" {
		h.v2Why = "/proc/self/cgroup has no cgroup2 (0::) entry"
		return
	}
	var mi *mountInfo
	for i := range mounts { // the last mount on a path is the visible one
		if mounts[i].mountpoint == mount && mounts[i].fstype == "cgroup2" {
			mi = &mounts[i]
		}
	}
	if mi == nil {
		h.v2Why = fmt.Sprintf("%s is not in /proc/self/mountinfo", mount)
		return
	}
	dir, err := cgroupDir(mount, mi.root, unified)
	if err != nil {
		h.v2Why = err.Error()
		return
	}
	h.v2 = &v2Host{mount: mount, base: v2Cg{path: unified, dir: dir}}
	v2State.Lock()
	if b, ok := v2State.base[mount]; ok {
		h.v2.base = b
	}
	v2State.Unlock()

	base := h.v2.base
	avail, err := readControllers(base.dir, "cgroup.controllers")
	if err != nil {
		h.v2Why = err.Error()
		return
	}
	var missing []string
	for _, c := range v2Controllers {
		if !avail[c] {
			missing = append(missing, c)
		}
	}
	if len(missing) > 0 {
		h.v2Why = fmt.Sprintf("cgroup2 controller(s) %s not delegated to our cgroup %s (its cgroup.controllers: [%s])",
			strings.Join(missing, ", "), base.dir, strings.Join(sortedKeys(avail), " "))
		return
	}
	enabled, err := readControllers(base.dir, "cgroup.subtree_control")
	if err != nil {
		h.v2Why = err.Error()
		return
	}
	if enabled["memory"] && enabled["cpu"] && enabled["pids"] {
		h.v2Full = true
		return
	}
	if isRootCgroup(base.dir) { // exempt from the no-internal-processes rule
		h.v2Full = true
		return
	}
	others, err := otherProcs(base.dir)
	if err != nil {
		h.v2Why = err.Error()
		return
	}
	if len(others) > 0 {
		h.v2Why = fmt.Sprintf("controllers cannot be enabled below our cgroup %s: it also holds processes %v (cgroup v2 no-internal-processes rule)", base.dir, others)
		return
	}
	h.v2Full = true
}

func (h *host) probeV1(mounts []mountInfo, paths map[string]string) {
	var why []string
	for _, ctrl := range v1Controllers {
		hier, err := findV1(ctrl, mounts, paths)
		if err != nil {
			why = append(why, err.Error())
			continue
		}
		h.v1[ctrl] = hier
	}
	_, mem := h.v1["memory"]
	_, cpu := h.v1["cpu"]
	_, pids := h.v1["pids"]
	h.v1Full = mem && cpu && pids
	h.v1Why = strings.Join(why, "; ")
	if h.v1Why == "" {
		h.v1Why = "complete"
	}
}

// findV1 finds the mounted v1 hierarchy of ctrl and our cgroup in it.
func findV1(ctrl string, mounts []mountInfo, paths map[string]string) (v1Hier, error) {
	own, ok := paths[ctrl]
	if !ok {
		return v1Hier{}, fmt.Errorf("no v1 %s hierarchy in /proc/self/cgroup", ctrl)
	}
	var lastErr error
	for _, m := range mounts {
		if m.fstype != "cgroup" || !hasOpt(m.superOpts, ctrl) {
			continue
		}
		dir, err := cgroupDir(m.mountpoint, m.root, own)
		if err != nil {
			lastErr = err
			continue
		}
		if st, err := os.Stat(dir); err != nil || !st.IsDir() {
			lastErr = fmt.Errorf("our v1 %s cgroup %s is not a directory", ctrl, dir)
			continue
		}
		return v1Hier{ctrl: ctrl, own: v2Cg{path: own, dir: dir}}, nil
	}
	if lastErr != nil {
		return v1Hier{}, lastErr
	}
	return v1Hier{}, fmt.Errorf("no v1 %s hierarchy is mounted", ctrl)
}

// procCgroups parses /proc/<pid>/cgroup. It returns the v1 hierarchies'
// paths keyed by controller ("cpu,cpuacct" gives both keys; a named
// hierarchy gives "name=systemd") and the unified (v2) path, "" if there
// is no "0::" line.
func procCgroups(r io.Reader) (v1 map[string]string, unified string, err error) {
	v1, unified, err = cgroups.ParseCgroupFromReaderUnified(r)
	if err != nil {
		return nil, "", fmt.Errorf("parse /proc/<pid>/cgroup: %w", err)
	}
	return v1, unified, nil
}

// isCgroup2 reports whether dir is the root of a cgroup2 mount.
func isCgroup2(dir string) bool {
	var st unix.Statfs_t
	return unix.Statfs(dir, &st) == nil && st.Type == unix.CGROUP2_SUPER_MAGIC
}

// isRootCgroup reports whether dir is the root of its cgroup2 hierarchy
// (not merely of a cgroup namespace): only the root lacks cgroup.events.
func isRootCgroup(dir string) bool {
	_, err := os.Stat(filepath.Join(dir, "cgroup.events"))
	return errors.Is(err, os.ErrNotExist)
}

// readControllers reads cgroup.controllers or cgroup.subtree_control in dir.
func readControllers(dir, file string) (map[string]bool, error) {
	data, err := linux.ReadFile(filepath.Join(dir, file))
	if err != nil {
		return nil, err
	}
	return parseControllers(string(data)), nil
}

// otherProcs lists the processes in dir's cgroup.procs other than us.
func otherProcs(dir string) ([]int, error) {
	data, err := linux.ReadFile(filepath.Join(dir, "cgroup.procs"))
	if err != nil {
		return nil, err
	}
	pids, err := parsePids(string(data))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", filepath.Join(dir, "cgroup.procs"), err)
	}
	self := os.Getpid()
	return slices.DeleteFunc(pids, func(p int) bool { return p == self }), nil
}

func sortedKeys(m map[string]bool) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}
