// Package linux wraps the Linux system calls neonbox-ns uses in more than
// one place: one small function per call, EINTR retried, errors returned as
// *os.SyscallError or *fs.PathError so callers can wrap them with context.
package linux

import (
	"errors"
	"io/fs"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

func retry(f func() error) error {
	for {
		if err := f(); !errors.Is(err, unix.EINTR) {
			return err
		}
	}
}

// Mount wraps mount(2).
func Mount(source, target, fstype string, flags uintptr, data string) error {
	err := retry(func() error { return unix.Mount(source, target, fstype, flags, data) })
	if err != nil {
		return &fs.PathError{Op: "mount " + fstype, Path: target, Err: err}
	}
	return nil
}

// Unmount wraps umount2(2).
func Unmount(target string, flags int) error {
	err := retry(func() error { return unix.Unmount(target, flags) })
	if err != nil {
		return &fs.PathError{Op: "umount", Path: target, Err: err}
	}
	return nil
}

// CloneTree returns a detached copy of the mount tree at path
// (open_tree(2) with OPEN_TREE_CLONE), recursive if recursive is set.
func CloneTree(path string, recursive bool) (int, error) {
	flags := uint(unix.OPEN_TREE_CLONE | unix.OPEN_TREE_CLOEXEC)
	if recursive {
		flags |= unix.AT_RECURSIVE
	}
	var fd int
	err := retry(func() (err error) {
		fd, err = unix.OpenTree(unix.AT_FDCWD, path, flags)
		return err
	})
	if err != nil {
		return -1, &fs.PathError{Op: "open_tree", Path: path, Err: err}
	}
	return fd, nil
}

// SetMountAttr sets attributes on the mount (tree, if recursive) that fd
// refers to; usernsFD is used with MOUNT_ATTR_IDMAP.
func SetMountAttr(fd int, set uint64, usernsFD int, recursive bool) error {
	attr := unix.MountAttr{Attr_set: set}
	if set&unix.MOUNT_ATTR_IDMAP != 0 {
		attr.Userns_fd = uint64(usernsFD)
	}
	flags := uint(unix.AT_EMPTY_PATH)
	if recursive {
		flags |= unix.AT_RECURSIVE
	}
	if err := retry(func() error { return unix.MountSetattr(fd, "", flags, &attr) }); err != nil {
		return os.NewSyscallError("mount_setattr", err)
	}
	return nil
}

// LastCap reports the highest capability number the running kernel knows.
func LastCap() (int, error) {
	b, err := ReadFile("/proc/sys/kernel/cap_last_cap")
	if err != nil {
		return 0, err
	}
	return strconv.Atoi(strings.TrimSpace(string(b)))
}

// Securebits (include/uapi/linux/securebits.h).
const (
	SecbitNoroot                 = 1 << 0
	SecbitNorootLocked           = 1 << 1
	SecbitKeepCapsLocked         = 1 << 5
	SecbitNoCapAmbientRaise      = 1 << 6
	SecbitNoCapAmbientRaiseLockd = 1 << 7
)

// fsTopdirFL is FS_TOPDIR_FL (include/uapi/linux/fs.h), chattr's +T.
const fsTopdirFL = 0x00020000

// MarkTopDir sets the "top of directory hierarchy" attribute (chattr +T)
// on dir, where the filesystem has it (ext2/3/4): the subdirectories of
// such a directory are spread across block groups by ext4's Orlov
// allocator instead of being packed into dir's own group. It reports
// whether dir has the attribute now.
func MarkTopDir(dir string) (bool, error) {
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC|unix.O_NOFOLLOW, 0)
	if err != nil {
		return false, &fs.PathError{Op: "open", Path: dir, Err: err}
	}
	defer unix.Close(fd)
	flags, err := unix.IoctlGetUint32(fd, unix.FS_IOC_GETFLAGS)
	if err != nil {
		return false, &fs.PathError{Op: "ioctl FS_IOC_GETFLAGS", Path: dir, Err: err}
	}
	if flags&fsTopdirFL != 0 {
		return true, nil
	}
	if err := unix.IoctlSetPointerInt(fd, unix.FS_IOC_SETFLAGS, int(flags|fsTopdirFL)); err != nil {
		return false, &fs.PathError{Op: "ioctl FS_IOC_SETFLAGS", Path: dir, Err: err}
	}
	return true, nil
}
