package nsjail

// Runs in the jail's init (see child_linux.go): builds the new root on a
// tmpfs, then pivots into it. Stage names in errors: "rootfs", "binds",
// "dev", "tmp", "proc", "workspace", "pivot_root".

import (
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"

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

func buildRoot(cfg *childConfig, lowerFD int) *StepError {
	// Mount events must not travel between the jail and the host.
	if err := linux.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return stepError("rootfs", err)
	}
	root := filepath.Join(cfg.RunDir, "root")
	if err := linux.Mount("tmpfs", root, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "mode=0755,size=4m"); err != nil {
		return stepError("rootfs", err)
	}
	for _, d := range []string{"proc", "dev", "tmp", "home", "root", "var", "run", "etc"} {
		if err := os.Mkdir(filepath.Join(root, d), 0o755); err != nil {
			return stepError("rootfs", err)
		}
	}
	for _, l := range cfg.Symlinks {
		if err := mkdirAll(filepath.Join(root, filepath.Dir(l.Path))); err != nil {
			return stepError("rootfs", err)
		}
		if err := os.Symlink(l.Target, filepath.Join(root, l.Path)); err != nil {
			return stepError("rootfs", err)
		}
	}
	for _, dir := range cfg.ReadOnly {
		dst := filepath.Join(root, dir)
		if err := mkdirAll(dst); err != nil {
			return stepError("binds", err)
		}
		if err := linux.BindTree(dir, dst, roBind); err != nil {
			return stepError("binds", err)
		}
	}
	for _, f := range cfg.Masked {
		if err := linux.BindTree("/dev/null", filepath.Join(root, f), unix.MOUNT_ATTR_RDONLY); err != nil {
			return stepError("binds", err)
		}
	}
	if err := buildDev(filepath.Join(root, "dev"), cfg.DevPts); err != nil {
		return stepError("dev", err)
	}
	tmp := filepath.Join(root, "tmp")
	if err := linux.Mount("tmpfs", tmp, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "mode=1777"); err != nil {
		return stepError("tmp", err)
	}
	home := filepath.Join(tmp, "home")
	if err := os.Mkdir(home, 0o700); err != nil {
		return stepError("tmp", err)
	}
	if err := os.Lchown(home, int(cfg.UID), int(cfg.GID)); err != nil {
		return stepError("tmp", err)
	}
	// Policy binds come after /tmp and /dev so that those do not hide them.
	for _, b := range cfg.Binds {
		dst := filepath.Join(root, b.Path)
		if err := mkdirAll(dst); err != nil {
			return stepError("binds", err)
		}
		attrs := uint64(unix.MOUNT_ATTR_NOSUID | unix.MOUNT_ATTR_NODEV)
		if b.ReadOnly {
			attrs |= unix.MOUNT_ATTR_RDONLY
		}
		if err := linux.BindTree(b.Path, dst, attrs); err != nil {
			return stepError("binds", err)
		}
	}
	// proc must be mounted while the host's /proc is still visible: the
	// kernel only lets a user namespace mount procfs where it could see
	// a full proc mount already (fs/namespace.c, mount_too_revealing).
	if err := mountProc(filepath.Join(root, "proc")); err != nil {
		return stepError("proc", err)
	}
	if err := mountWorkspace(cfg, root, lowerFD); err != nil {
		return stepError("workspace", err)
	}
	if err := linux.Mount("", root, "", unix.MS_REMOUNT|unix.MS_BIND|unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV, ""); err != nil {
		return stepError("rootfs", err)
	}
	if err := pivot(root); err != nil {
		return stepError("pivot_root", err)
	}
	return nil
}

// mountWorkspace mounts the overlay that the run writes through. The lower
// layer is first attached at RunDir/lower (from the idmapped fd the parent
// sent, or as a bind of the workspace) and detached again once overlay
// holds it, so it is never reachable from the jail.
func mountWorkspace(cfg *childConfig, root string, lowerFD int) error {
	dst := filepath.Join(root, cfg.Workspace)
	if err := mkdirAll(dst); err != nil {
		return err
	}
	if cfg.ReadOnlyWorkspace {
		return bindReadOnlyWorkspace(cfg, dst, lowerFD)
	}
	if cfg.Deferred {
		return stageLayers(cfg, root, lowerFD)
	}
	lower := filepath.Join(cfg.RunDir, "lower")
	if lowerFD >= 0 {
		err := linux.MoveMount(lowerFD, lower)
		unix.Close(lowerFD)
		if err != nil {
			return err
		}
	} else if err := linux.BindTree(cfg.Workspace, lower, unix.MOUNT_ATTR_NOSUID|unix.MOUNT_ATTR_NODEV); err != nil {
		return err
	}
	data, err := overlay.MountData(lower, filepath.Join(cfg.RunDir, "upper"), filepath.Join(cfg.RunDir, "work"))
	if err != nil {
		return err
	}
	if err := linux.Mount("overlay", dst, "overlay", unix.MS_NOSUID|unix.MS_NODEV, data); err != nil {
		return err
	}
	return linux.Unmount(lower, unix.MNT_DETACH)
}

// mountProc mounts the jail's /proc and masks the paths OCI runtimes mask.
func mountProc(proc string) error {
	if err := linux.Mount("proc", proc, "proc", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
		return err
	}
	for _, name := range procMasked {
		p := filepath.Join(proc, name)
		st, err := os.Lstat(p)
		if err != nil {
			continue // not on this kernel
		}
		if st.IsDir() {
			err = linux.Mount("tmpfs", p, "tmpfs", unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "size=0,mode=0555")
		} else {
			err = linux.BindTree("/dev/null", p, unix.MOUNT_ATTR_RDONLY)
		}
		if err != nil {
			return err
		}
	}
	for _, name := range procReadOnly {
		p := filepath.Join(proc, name)
		if _, err := os.Lstat(p); err != nil {
			continue
		}
		if err := linux.BindTree(p, p, unix.MOUNT_ATTR_RDONLY|unix.MOUNT_ATTR_NOSUID|unix.MOUNT_ATTR_NODEV|unix.MOUNT_ATTR_NOEXEC); err != nil {
			return err
		}
	}
	return nil
}

// layersDir is where a deferred init keeps the overlay's layers, inside
// the new root, until the command comes.
const layersDir = "/.layers"

// stageLayers puts the run dir (whose upper and work dirs overlay needs on
// one mount) at layersDir in the new root, with the workspace's lower
// layer on its lower/, so that the overlay can be mounted after the
// pivot.
func stageLayers(cfg *childConfig, root string, lowerFD int) error {
	dst := filepath.Join(root, layersDir)
	if err := os.Mkdir(dst, 0o700); err != nil {
		return err
	}
	fd, err := linux.CloneTree(cfg.RunDir, false)
	if err != nil {
		return err
	}
	err = linux.MoveMount(fd, dst)
	unix.Close(fd)
	if err != nil {
		return err
	}
	lower := filepath.Join(dst, "lower")
	if lowerFD >= 0 {
		err := linux.MoveMount(lowerFD, lower)
		unix.Close(lowerFD)
		return err
	}
	return linux.BindTree(cfg.Workspace, lower, unix.MOUNT_ATTR_NOSUID|unix.MOUNT_ATTR_NODEV)
}

// mountDeferredWorkspace mounts the overlay from the staged layers, after
// the pivot, and takes the layers out of the jail's sight.
func mountDeferredWorkspace(cfg *childConfig, mark func(string)) error {
	data, err := overlay.MountData(layersDir+"/lower", layersDir+"/upper", layersDir+"/work")
	if err != nil {
		return err
	}
	if err := linux.Mount("overlay", cfg.Workspace, "overlay", unix.MS_NOSUID|unix.MS_NODEV, data); err != nil {
		return err
	}
	mark("overlay")
	if err := linux.Unmount(layersDir, unix.MNT_DETACH); err != nil {
		return err
	}
	mark("layers_hidden")
	// The empty mount point stays in the read-only root: cover it.
	return linux.Mount("tmpfs", layersDir, "tmpfs", unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "size=0,mode=0555")
}

// bindReadOnlyWorkspace shows the workspace read-only, for runs without
// fs-write: writes fail with EROFS and there is nothing to commit.
func bindReadOnlyWorkspace(cfg *childConfig, dst string, lowerFD int) error {
	const attrs = unix.MOUNT_ATTR_RDONLY | unix.MOUNT_ATTR_NOSUID | unix.MOUNT_ATTR_NODEV
	if lowerFD < 0 {
		return linux.BindTree(cfg.Workspace, dst, attrs)
	}
	defer unix.Close(lowerFD)
	if err := linux.SetMountAttr(lowerFD, attrs, -1, false); err != nil {
		return err
	}
	return linux.MoveMount(lowerFD, dst)
}

// buildDev makes a minimal /dev: a few host device nodes bound in, the
// usual symlinks, a private /dev/shm and, for terminals, a private devpts.
func buildDev(dev string, pts bool) error {
	if err := linux.Mount("tmpfs", dev, "tmpfs", unix.MS_NOSUID|unix.MS_NOEXEC, "mode=0755,size=64k"); err != nil {
		return err
	}
	for _, n := range devNodes {
		dst := filepath.Join(dev, n)
		f, err := os.OpenFile(dst, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o666)
		if err != nil {
			return err
		}
		f.Close()
		if err := linux.BindTree("/dev/"+n, dst, unix.MOUNT_ATTR_NOSUID|unix.MOUNT_ATTR_NOEXEC); err != nil {
			return err
		}
	}
	links := map[string]string{
		"fd": "/proc/self/fd", "stdin": "/proc/self/fd/0",
		"stdout": "/proc/self/fd/1", "stderr": "/proc/self/fd/2",
	}
	if pts {
		links["ptmx"] = "pts/ptmx"
	}
	for name, target := range links {
		if err := os.Symlink(target, filepath.Join(dev, name)); err != nil {
			return err
		}
	}
	shm := filepath.Join(dev, "shm")
	if err := os.Mkdir(shm, 0o1777); err != nil {
		return err
	}
	if err := linux.Mount("tmpfs", shm, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "mode=1777"); err != nil {
		return err
	}
	if pts {
		dir := filepath.Join(dev, "pts")
		if err := os.Mkdir(dir, 0o755); err != nil {
			return err
		}
		if err := linux.Mount("devpts", dir, "devpts", unix.MS_NOSUID|unix.MS_NOEXEC, "newinstance,ptmxmode=0666,mode=0620"); err != nil {
			return err
		}
	}
	return linux.Mount("", dev, "", unix.MS_REMOUNT|unix.MS_BIND|unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NOEXEC, "")
}

// pivot makes root the jail's / and detaches the host's root for good.
func pivot(root string) error {
	if err := unix.Chdir(root); err != nil {
		return &os.PathError{Op: "chdir", Path: root, Err: err}
	}
	// pivot_root(".", ".") stacks the old root on top of the new one;
	// detaching "." then removes the old root (see pivot_root(2), NOTES).
	if err := unix.PivotRoot(".", "."); err != nil {
		return &os.PathError{Op: "pivot_root", Path: root, Err: err}
	}
	if err := linux.Unmount(".", unix.MNT_DETACH); err != nil {
		return err
	}
	if err := unix.Chdir("/"); err != nil {
		return &os.PathError{Op: "chdir", Path: "/", Err: err}
	}
	return nil
}

// mkdirAll is os.MkdirAll that reports the failing path.
func mkdirAll(p string) error {
	if err := os.MkdirAll(p, 0o755); err != nil {
		return err
	}
	return nil
}
