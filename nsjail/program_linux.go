package nsjail

// Runs in the parent: turns a childConfig into the program the jail's
// init runs (internal/jailinit). The init makes the jail's namespaces,
// builds the new root on a tmpfs mounted on the state dir's mnt (in the
// jail's own mount namespace), pivots into it, drops every privilege and
// execs CMD, step by step as written here. Stage names in errors:
// "spawn", "hostname", "config", "rootfs", "binds", "dev", "tmp", "proc",
// "workspace", "pivot_root", "network", "call", "cwd", "exec", "cgroup",
// "credentials", "sync".

import (
	"errors"
	"path/filepath"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/neonbox/neonbox-ns/internal/jailinit"
	"github.com/neonbox/neonbox-ns/internal/linux"
	"github.com/neonbox/neonbox-ns/overlay"
)

// Device nodes bound from the host into the jail's /dev.
var devNodes = []string{"null", "zero", "full", "random", "urandom", "tty"}

// /proc paths hidden or made read-only, as OCI runtimes do (runc's and
// crun's defaults): they expose the host kernel's state or let a process
// change it even from inside namespaces.
var (
	procMasked = []string{
		"acpi", "asound", "kcore", "keys", "latency_stats", "timer_list",
		"timer_stats", "sched_debug", "scsi", "interrupts",
	}
	procReadOnly = []string{"bus", "fs", "irq", "sys", "sysrq-trigger"}
)

// Mount attributes of a read-only bind of a host directory.
const roBind = unix.MOUNT_ATTR_RDONLY | unix.MOUNT_ATTR_NOSUID | unix.MOUNT_ATTR_NODEV

// maxOpenFiles caps RLIMIT_NOFILE in the jail.
const maxOpenFiles = 65536

// Where the init keeps the overlay's layers in the new root: the lower
// layer until the overlay is mounted, and for a deferred init the run dir
// (upper and work) too, until the command comes.
const (
	lowerDir  = "/.lower"
	layersDir = "/.layers"
)

// Descriptor slots of the rest's message: the idmapped workspace (when
// cfg.WorkspaceFD), then, for a deferred init, cfg.CgroupTasks tasks
// files. The final part's message has the tasks files from slot 0.
const workspaceSlot = 0

func tasksSlot(cfg *childConfig) int {
	if cfg.WorkspaceFD {
		return 1
	}
	return 0
}

// The init gets its program in parts. The base part builds what depends
// only on the host, the state dir and whether the jail has network: the
// new root with the host's directories, /dev, /tmp and /proc.
// `neonbox-ns exec` queues the base of an earlier run before its Go
// runtime starts (jailinit.BaseFile), so that the init builds it
// meanwhile. The rest takes CMD's streams (an init started before they
// were known), makes HOME (the workspace owner's), finishes /dev, binds
// the policy's directories, mounts the workspace from the run dir,
// pivots, takes the command (its directory and lookup) and drops every
// privilege, loading neonbox-ns's own filter; the final part joins the
// cgroup, loads the policy's filters and execs. The parent makes the run
// dir while the init builds the base, and the cgroup while it runs the
// rest. A deferred init (a Pool's) gets the rest and the final part in
// one message and waits for its command in between.

// baseProgram is the first part of what the init runs for cfg.
func baseProgram(cfg *childConfig) ([]byte, error) {
	if cfg.noHostView {
		return nil, errors.New("the base of a jail built without the host's directories")
	}
	var p jailinit.Program
	p.Stage("config")
	p.Mark()
	buildBase(&p, cfg)
	// The network namespace (made long before by the process that
	// forked pid 1) is joined here, while the parent still prepares,
	// rather than on the way to the command.
	if !cfg.Network {
		p.Stage("network")
		p.JoinNetNS()
		p.LinkUp("lo")
	}
	p.MarkAs("base")
	p.Stage("config")
	p.Continue()
	return p.Encode()
}

// restProgram is the second part. It comes with the idmapped workspace
// (when cfg.WorkspaceFD); for a deferred init, which it takes to its
// execve, with cfg.CgroupTasks tasks files too (tasksSlot); with stdio
// (slot >= 0), CMD's three streams from that slot on. Any other init
// takes its command, drops every privilege and waits for finalProgram.
func restProgram(cfg *childConfig, stdio int) ([]byte, error) {
	last, err := lastCap()
	if err != nil {
		return nil, stepError("credentials", err)
	}
	if len(cfg.Seccomp) == 0 {
		// Every jail gets neonbox-ns's own filter at least.
		return nil, &StepError{Stage: "seccomp", Message: "no seccomp filter to load"}
	}
	var p jailinit.Program
	p.Stage("rest")
	p.Mark()
	if stdio >= 0 {
		p.Stdio(stdio)
	}
	finishRoot(&p, cfg)
	// All that does not depend on the command, the cgroup or the
	// filters is done before they come: for a deferred init the
	// overlay too (which looks nothing up in the lower layer until the
	// command does), and the privileges that can go while the init
	// still mounts (limits, securebits and the bounding set leave its
	// effective capabilities alone).
	if cfg.Deferred && !cfg.ReadOnlyWorkspace {
		mountDeferredWorkspace(&p, cfg)
	}
	dropBounds(&p, last)
	// Every init waits for what comes last (a deferred one for its
	// command, any other for its cgroup) with every privilege gone and
	// neonbox-ns's own filter loaded: what is left (for a call, the
	// command's streams, directory and lookup; the v1 cgroup through
	// tasks files the parent opened; execve) needs none, and is that
	// much quicker. A policy's own filters come last, as in any jail:
	// they are written for the command, not for the init's handling
	// of it.
	own, policy := cfg.Seccomp[:1], cfg.Seccomp[1:]
	if !cfg.Deferred {
		p.Argv(cfg.Argv)
		p.Env(cfg.Env)
		p.Cwd(cfg.Cwd)
		takeCommand(&p)
		dropPrivileges(&p, cfg, own)
		p.Stage("config")
		p.Continue()
		return p.Encode()
	}
	dropPrivileges(&p, cfg, own)
	// The v1 hierarchies but memory's (the first tasks file where it is
	// mounted: cgroup.OpenTasks) are joined before the call too: the init only
	// waits, and what it does for the call is charged to no limit that
	// matters; memory comes after the call, so that the init's own
	// pages are not (a charge is taken in batches of 256 KiB per CPU).
	tasks, n := tasksSlot(cfg), cfg.CgroupTasks
	if n > 1 {
		p.Stage("cgroup")
		p.JoinCgroup(tasks+1, n-1)
		n = 1
	}
	p.Stage("call")
	p.AwaitCall()
	p.Mark()
	takeCommand(&p)
	finishExec(&p, tasks, n, policy)
	return p.Encode()
}

// finalProgram is the last part of an init that is not deferred: the
// cgroup (cfg.CgroupTasks tasks files come with it), the policy's filters
// and execve.
func finalProgram(cfg *childConfig) ([]byte, error) {
	if len(cfg.Seccomp) == 0 {
		return nil, &StepError{Stage: "seccomp", Message: "no seccomp filter to load"}
	}
	var p jailinit.Program
	p.Stage("final")
	p.Mark()
	finishExec(&p, 0, cfg.CgroupTasks, cfg.Seccomp[1:])
	return p.Encode()
}

// takeCommand goes to the command's directory and looks the command up.
func takeCommand(p *jailinit.Program) {
	p.Stage("cwd")
	p.Chdir()
	p.Stage("exec")
	p.LookPath(DefaultPath)
	p.MarkAs("lookpath")
}

// finishExec takes an init with its command and no privileges left to
// execve: it joins the n cgroup tasks files in descriptor slots tasks on
// and loads filters, the policy's. The join comes last but for those,
// so that the init's own work is not charged to the run: the init's
// thread joins the v1 cgroup and takes CMD in with it at execve.
func finishExec(p *jailinit.Program, tasks, n int, filters [][]byte) {
	if n > 0 {
		p.Stage("cgroup")
		p.JoinCgroup(tasks, n)
		p.Mark()
	}
	if len(filters) > 0 {
		p.Stage("seccomp")
		loadFilters(p, filters)
	}
	p.Stage("sync")
	p.Ready()
	p.Stage("exec")
	p.Exec()
}

// callProgram gives a deferred init its command.
func callProgram(argv, env []string, cwd string) ([]byte, error) {
	var p jailinit.Program
	p.Stage("call")
	p.Argv(argv)
	p.Env(env)
	p.Cwd(cwd)
	return p.Encode()
}

var lastCap = sync.OnceValues(linux.LastCap)

// buildBase builds the new root on a tmpfs, up to the workspace.
func buildBase(p *jailinit.Program, cfg *childConfig) {
	root := cfg.RootMount
	p.Stage("rootfs")
	// Mount events must not travel between the jail and the host.
	p.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, "")
	p.Mount("tmpfs", root, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "mode=0755,size=4m")
	for _, d := range []string{"proc", "dev", "tmp", "home", "root", "var", "run", "etc"} {
		p.Mkdir(filepath.Join(root, d), 0o755)
	}
	for _, l := range cfg.Symlinks {
		p.MkdirAll(filepath.Join(root, filepath.Dir(l.Path)))
		p.Symlink(l.Target, filepath.Join(root, l.Path))
	}
	p.Stage("binds")
	for _, dir := range cfg.ReadOnly {
		dst := filepath.Join(root, dir)
		p.MkdirAll(dst)
		p.Bind(dir, dst, roBind, true)
	}
	for _, f := range cfg.Masked {
		p.Bind("/dev/null", filepath.Join(root, f), unix.MOUNT_ATTR_RDONLY, true)
	}
	buildDev(p, filepath.Join(root, "dev"))
	p.Stage("tmp")
	p.Mount("tmpfs", filepath.Join(root, "tmp"), "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "mode=1777")
	// proc must be mounted while the host's /proc is still visible: the
	// kernel only lets a user namespace mount procfs where it could see
	// a full proc mount already (fs/namespace.c, mount_too_revealing).
	mountProc(p, filepath.Join(root, "proc"))
}

// finishRoot makes HOME (owned by the jail's user, the workspace's
// owner), finishes /dev, binds the policy's directories, mounts the
// workspace in the new root and pivots into it.
func finishRoot(p *jailinit.Program, cfg *childConfig) {
	root := cfg.RootMount
	p.Stage("tmp")
	home := filepath.Join(root, jailHome)
	p.Mkdir(home, 0o700)
	p.Lchown(home, cfg.UID, cfg.GID)
	finishDev(p, filepath.Join(root, "dev"), cfg.DevPts)
	// After /tmp and /dev, so that those do not hide them (a policy's
	// binds cannot be under /proc: policies.Validate).
	p.Stage("binds")
	for _, b := range cfg.Binds {
		dst := filepath.Join(root, b.Path)
		p.MkdirAll(dst)
		attrs := uint64(unix.MOUNT_ATTR_NOSUID | unix.MOUNT_ATTR_NODEV)
		if b.ReadOnly {
			attrs |= unix.MOUNT_ATTR_RDONLY
		}
		p.Bind(b.Path, dst, attrs, true)
	}
	p.Stage("workspace")
	mountWorkspace(p, cfg, root)
	p.Stage("rootfs")
	p.Mount("", root, "", unix.MS_REMOUNT|unix.MS_BIND|unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV, "")
	p.Stage("pivot_root")
	p.Pivot(root)
	p.Stage("rootfs")
	p.Mark()
}

// mountWorkspace mounts the overlay that the run writes through. The lower
// layer is first attached at lowerDir in the new root (from the idmapped
// fd the parent sent, or as a bind of the workspace) and detached again
// once overlay holds it, so it is never reachable from the jail.
func mountWorkspace(p *jailinit.Program, cfg *childConfig, root string) {
	dst := filepath.Join(root, cfg.Workspace)
	p.MkdirAll(dst)
	if cfg.ReadOnlyWorkspace {
		// No fs-write capability: writes fail with EROFS and there is
		// nothing to commit.
		const attrs = unix.MOUNT_ATTR_RDONLY | unix.MOUNT_ATTR_NOSUID | unix.MOUNT_ATTR_NODEV
		if cfg.WorkspaceFD {
			p.SetAttrFD(workspaceSlot, attrs, cfg.Workspace)
			p.MoveFD(workspaceSlot, dst)
		} else {
			p.Bind(cfg.Workspace, dst, attrs, true)
		}
		return
	}
	if cfg.Deferred {
		stageLayers(p, cfg, root)
		return
	}
	// The lower layer goes over the workspace's own path in the old
	// root (this mount namespace's copy of the host's), which the
	// pivot detaches with it: one unmount, and one RCU grace period,
	// fewer than attaching it in the new root and detaching it again
	// (0.12 ms). Neither the new root nor the run dir can be below it:
	// the state dir and the workspace do not nest (Options.prepare). A
	// path overlay's options cannot carry goes the other way.
	lower := cfg.Workspace
	inNewRoot := overlay.CheckOptionPath(lower) != nil
	if inNewRoot {
		lower = filepath.Join(root, lowerDir)
		p.Mkdir(lower, 0o700)
	}
	attachLower(p, cfg, lower)
	data, err := overlay.MountData(lower, filepath.Join(cfg.RunDir, "upper"), filepath.Join(cfg.RunDir, "work"), cfg.OneFS)
	if err != nil {
		p.Fail(err)
		return
	}
	p.Mount("overlay", dst, "overlay", unix.MS_NOSUID|unix.MS_NODEV, data)
	if inNewRoot {
		p.Unmount(lower, unix.MNT_DETACH)
		p.Rmdir(lower)
	}
}

// attachLower puts the workspace's lower layer at dst: the idmapped mount
// the parent sent, or a bind of the workspace.
func attachLower(p *jailinit.Program, cfg *childConfig, dst string) {
	if cfg.WorkspaceFD {
		p.MoveFD(workspaceSlot, dst)
		return
	}
	p.Bind(cfg.Workspace, dst, unix.MOUNT_ATTR_NOSUID|unix.MOUNT_ATTR_NODEV, true)
}

// mountProc mounts the jail's /proc and masks the paths OCI runtimes mask.
// Paths this kernel does not have are skipped.
func mountProc(p *jailinit.Program, proc string) {
	p.Stage("proc")
	p.Mount("proc", proc, "proc", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "")
	dirs := hostView().procDirs
	for _, name := range procMasked {
		dst := filepath.Join(proc, name)
		if dirs[name] {
			p.MountIfExists("tmpfs", dst, "tmpfs", unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "size=0,mode=0555")
		} else {
			p.BindIfExists("/dev/null", dst, unix.MOUNT_ATTR_RDONLY, true)
		}
	}
	for _, name := range procReadOnly {
		dst := filepath.Join(proc, name)
		p.BindIfExists(dst, dst, unix.MOUNT_ATTR_RDONLY|unix.MOUNT_ATTR_NOSUID|unix.MOUNT_ATTR_NODEV|unix.MOUNT_ATTR_NOEXEC, true)
	}
}

// stageLayers puts the run dir (whose upper and work dirs overlay needs on
// one mount) at layersDir in the new root, and the workspace's lower
// layer at lowerDir, so that the overlay can be mounted after the pivot.
func stageLayers(p *jailinit.Program, cfg *childConfig, root string) {
	dst := filepath.Join(root, layersDir)
	p.Mkdir(dst, 0o700)
	p.Bind(cfg.RunDir, dst, 0, false)
	lower := filepath.Join(root, lowerDir)
	p.Mkdir(lower, 0o700)
	attachLower(p, cfg, lower)
}

// mountDeferredWorkspace mounts the overlay from the staged layers, after
// the pivot, and takes the layers out of the jail's sight.
func mountDeferredWorkspace(p *jailinit.Program, cfg *childConfig) {
	p.Stage("workspace")
	data, err := overlay.MountData(lowerDir, layersDir+"/upper", layersDir+"/work", cfg.OneFS)
	if err != nil {
		p.Fail(err)
		return
	}
	p.Mount("overlay", cfg.Workspace, "overlay", unix.MS_NOSUID|unix.MS_NODEV, data)
	p.MarkAs("overlay")
	for _, dir := range []string{lowerDir, layersDir} {
		p.Unmount(dir, unix.MNT_DETACH)
		// The empty mount point stays in the read-only root: cover it.
		p.Mount("tmpfs", dir, "tmpfs", unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "size=0,mode=0555")
	}
	p.MarkAs("layers_hidden")
}

// buildDev makes a minimal /dev: a few host device nodes bound in, the
// usual symlinks and a private /dev/shm; finishDev the rest.
func buildDev(p *jailinit.Program, dev string) {
	p.Stage("dev")
	p.Mount("tmpfs", dev, "tmpfs", unix.MS_NOSUID|unix.MS_NOEXEC, "mode=0755,size=64k")
	for _, n := range devNodes {
		dst := filepath.Join(dev, n)
		p.Create(dst, 0o666)
		p.Bind("/dev/"+n, dst, unix.MOUNT_ATTR_NOSUID|unix.MOUNT_ATTR_NOEXEC, true)
	}
	links := [][2]string{
		{"fd", "/proc/self/fd"}, {"stdin", "/proc/self/fd/0"},
		{"stdout", "/proc/self/fd/1"}, {"stderr", "/proc/self/fd/2"},
	}
	for _, l := range links {
		p.Symlink(l[1], filepath.Join(dev, l[0]))
	}
	shm := filepath.Join(dev, "shm")
	p.Mkdir(shm, 0o1777)
	p.Mount("tmpfs", shm, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "mode=1777")
}

// finishDev gives /dev, for terminals (pts), a private devpts, and makes
// it read-only.
func finishDev(p *jailinit.Program, dev string, pts bool) {
	p.Stage("dev")
	if pts {
		p.Symlink("pts/ptmx", filepath.Join(dev, "ptmx"))
		dir := filepath.Join(dev, "pts")
		p.Mkdir(dir, 0o755)
		p.Mount("devpts", dir, "devpts", unix.MS_NOSUID|unix.MS_NOEXEC, "newinstance,ptmxmode=0666,mode=0620")
	}
	p.Mount("", dev, "", unix.MS_REMOUNT|unix.MS_BIND|unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NOEXEC, "")
}

// dropBounds sets what limits the init and CMD without touching the
// init's effective capabilities: resource limits, securebits that keep
// uid 0 from regaining capabilities at execve (capabilities(7), "The
// securebits flags"), an empty bounding set and no ambient ones.
func dropBounds(p *jailinit.Program, lastCap int) {
	p.Stage("credentials")
	// No core dumps (they would land in the workspace and could leak
	// memory contents into a commit), and a ceiling on open files.
	p.Rlimit(unix.RLIMIT_CORE, 0)
	p.Rlimit(unix.RLIMIT_NOFILE, maxOpenFiles)
	p.Securebits(linux.SecbitNoroot | linux.SecbitNorootLocked | linux.SecbitKeepCapsLocked |
		linux.SecbitNoCapAmbientRaise | linux.SecbitNoCapAmbientRaiseLockd)
	p.CapbsetDrop(lastCap)
	p.AmbientClear()
}

// dropPrivileges, after dropBounds, leaves the init with no capabilities
// in any set and no way back: no_new_privs is set, the jail ids are
// cfg.UID and cfg.GID, and filters (seccomp programs) are loaded; the
// step is marked "credentials".
func dropPrivileges(p *jailinit.Program, cfg *childConfig, filters [][]byte) {
	p.Stage("credentials")
	// Before the filters: a policy's own filter may deny prctl.
	setIDs(p, cfg.UID, cfg.GID, cfg.SetGroups)
	p.CapsetZero()
	p.NoNewPrivs()
	loadFilters(p, filters)
	p.Mark()
}

// loadFilters loads the seccomp programs filters, in order.
func loadFilters(p *jailinit.Program, filters [][]byte) {
	for _, prog := range filters {
		p.Seccomp(prog)
	}
}

// setIDs makes the init uid and gid (and, with setGroups, drops its
// supplementary groups), then sets the parent-death signal again, which a
// change of credentials clears, so the jail still dies with neonbox-ns.
func setIDs(p *jailinit.Program, uid, gid uint32, setGroups bool) {
	if setGroups {
		p.Setgroups()
	}
	p.Setresgid(gid)
	p.Setresuid(uid)
	p.Pdeathsig(int(unix.SIGKILL))
}

// jailHostname is the jail's hostname.
const jailHostname = "neonbox"

// spawnProgram is the first part of what the init runs, queued before it
// starts: the process started in the parent's namespaces forks the init
// proper, pid 1 of a new pid namespace and of the jail's other
// namespaces (flags), writes its id maps (ids) and tells the parent its
// pid; the init waits for its maps and becomes root in the jail. The
// network namespace, the slowest to make, is made by the first process
// meanwhile; the init joins it at the end of the base of the program.
// While it waits, the init names the host, which needs no mapped ids.
func spawnProgram(flags uintptr, ids idPlan) ([]byte, error) {
	var p jailinit.Program
	newNet := flags&unix.CLONE_NEWNET != 0
	p.Stage("spawn")
	p.CloneInit(flags&^unix.CLONE_NEWNET, newNet, ids.idMap())
	p.MarkAs("cloned")
	p.Stage("hostname")
	p.Hostname(jailHostname)
	p.Stage("spawn")
	p.AwaitIDMap()
	// As the jail's root from here on; clears the groups the init
	// inherited from the parent (setgroups is denied when the jail
	// maps only one id).
	setIDs(&p, 0, 0, ids.setGroups())
	p.MarkAs("mapped")
	p.Stage("config")
	p.Continue()
	return p.Encode()
}
