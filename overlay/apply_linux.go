package overlay

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/neonbox/neonbox-ns/internal/linux"
)

// Apply carries out plan, moving entries from the upper directory into the
// workspace. Every entry it moves is first cleaned of overlay's markers,
// given the owner ids maps it to, and stripped of setuid/setgid bits, file
// capabilities and POSIX ACLs, so nothing the run created gains powers by
// landing on the host. Upper and workspace should share a filesystem: then
// entries move by rename(2); otherwise they are copied.
func Apply(plan *Plan, upperDir, workspaceDir string, ids IDMap) error {
	if ids == nil {
		ids = Identity
	}
	up, err := unix.Open(upperDir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return &fs.PathError{Op: "open", Path: upperDir, Err: err}
	}
	defer unix.Close(up)
	ws, err := unix.Open(workspaceDir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return &fs.PathError{Op: "open", Path: workspaceDir, Err: err}
	}
	defer unix.Close(ws)
	a := applier{up: up, ws: ws, ids: ids, links: map[uint64]string{}, done: map[uint64]bool{}}
	for _, op := range plan.Ops {
		if err := a.do(op); err != nil {
			return fmt.Errorf("%s %q: %w", op.Kind, op.Path, err)
		}
	}
	return nil
}

type applier struct {
	up, ws int
	ids    IDMap
	// links maps upper inodes already copied (cross-filesystem case) to
	// their workspace path, so hard links stay together.
	links map[uint64]string
	// done holds the upper inodes already sanitized: a hard link's second
	// name must not have its owner translated twice.
	done map[uint64]bool
}

func (a *applier) do(op Op) error {
	switch op.Kind {
	case OpRemove:
		pfd, name, err := openParent(a.ws, op.Path)
		if err != nil {
			return err
		}
		defer unix.Close(pfd)
		return linux.RemoveAt(pfd, name)
	case OpPlace:
		return a.place(op.Path)
	case OpSetMeta:
		if op.Meta == nil {
			return errors.New("setmeta without metadata")
		}
		return a.setDirMeta(op.Path, op.Meta)
	}
	return fmt.Errorf("unknown operation %d", op.Kind)
}

func (a *applier) place(rel string) error {
	if rel == "" {
		return errors.New("cannot place the workspace root")
	}
	upParent, name, err := openParent(a.up, rel)
	if err != nil {
		return err
	}
	defer unix.Close(upParent)
	if err := a.sanitize(upParent, name); err != nil {
		return err
	}
	wsParent, _, err := openParent(a.ws, rel)
	if err != nil {
		return err
	}
	defer unix.Close(wsParent)
	err = unix.Renameat(upParent, name, wsParent, name)
	if errors.Is(err, unix.EXDEV) {
		return a.copyEntry(upParent, wsParent, name, rel)
	}
	if err != nil {
		return &fs.PathError{Op: "rename", Path: rel, Err: err}
	}
	return nil
}

// sanitize prepares the upper entry name of dirfd (and all below it) to
// become part of the workspace.
func (a *applier) sanitize(dirfd int, name string) error {
	var st unix.Stat_t
	if err := unix.Fstatat(dirfd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return &fs.PathError{Op: "fstatat", Path: name, Err: err}
	}
	if a.done[st.Ino] {
		return nil
	}
	a.done[st.Ino] = true
	uid, gid, err := a.ids(st.Uid, st.Gid)
	if err != nil {
		return fmt.Errorf("owner of %q: %w", name, err)
	}
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFLNK:
		if err := unix.Fchownat(dirfd, name, int(uid), int(gid), unix.AT_SYMLINK_NOFOLLOW); err != nil {
			return &fs.PathError{Op: "lchown", Path: name, Err: err}
		}
		return setTimes(dirfd, name, &st, unix.AT_SYMLINK_NOFOLLOW)
	case unix.S_IFREG, unix.S_IFDIR:
	default:
		return &fs.PathError{Op: "commit", Path: name, Err: ErrRefused}
	}
	fd, err := unix.Openat(dirfd, name, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return &fs.PathError{Op: "openat", Path: name, Err: err}
	}
	defer unix.Close(fd)
	dir := st.Mode&unix.S_IFMT == unix.S_IFDIR
	if dir {
		if err := a.sanitizeChildren(fd); err != nil {
			return fmt.Errorf("%s/%w", name, err)
		}
	}
	if err := cleanXattrs(procPath(fd)); err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	if err := unix.Fchownat(fd, "", int(uid), int(gid), unix.AT_EMPTY_PATH); err != nil {
		return &fs.PathError{Op: "chown", Path: name, Err: err}
	}
	mode := st.Mode & 0o7777
	if dir {
		mode &^= unix.S_ISUID
	} else {
		mode &^= unix.S_ISUID | unix.S_ISGID
	}
	if err := unix.Chmod(procPath(fd), mode); err != nil {
		return &fs.PathError{Op: "chmod", Path: name, Err: err}
	}
	return setTimes(fd, "", &st, unix.AT_EMPTY_PATH)
}

func (a *applier) sanitizeChildren(fd int) error {
	names, err := readNames(fd)
	if err != nil {
		return err
	}
	for _, n := range names {
		var st unix.Stat_t
		if err := unix.Fstatat(fd, n, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			return &fs.PathError{Op: "fstatat", Path: n, Err: err}
		}
		if st.Mode&unix.S_IFMT == unix.S_IFCHR && st.Rdev == 0 {
			// A whiteout below a new or opaque directory hides nothing.
			if err := unix.Unlinkat(fd, n, 0); err != nil {
				return &fs.PathError{Op: "unlink whiteout", Path: n, Err: err}
			}
			continue
		}
		if err := a.sanitize(fd, n); err != nil {
			return err
		}
	}
	return nil
}

// cleanXattrs drops overlay's markers, restores escaped names and removes
// attributes that would grant powers or name ids of the jail: file
// capabilities and POSIX ACLs.
func cleanXattrs(p string) error {
	attrs, err := listXattrs(p, true)
	if err != nil {
		return &fs.PathError{Op: "listxattr", Path: p, Err: err}
	}
	for k, v := range attrs {
		switch {
		case strings.HasPrefix(k, xattrEscaped):
			real := xattrPrefix + strings.TrimPrefix(k, xattrEscaped)
			if err := unix.Setxattr(p, real, []byte(v), 0); err != nil {
				return &fs.PathError{Op: "setxattr " + real, Path: p, Err: err}
			}
		case strings.HasPrefix(k, xattrPrefix),
			k == "security.capability",
			strings.HasPrefix(k, "system.posix_acl_"):
		default:
			continue
		}
		if err := unix.Removexattr(p, k); err != nil && !errors.Is(err, unix.ENODATA) {
			return &fs.PathError{Op: "removexattr " + k, Path: p, Err: err}
		}
	}
	return nil
}

func setTimes(dirfd int, name string, st *unix.Stat_t, flags int) error {
	ts := []unix.Timespec{st.Atim, st.Mtim}
	if err := unix.UtimesNanoAt(dirfd, name, ts, flags); err != nil {
		return &fs.PathError{Op: "utimensat", Path: name, Err: err}
	}
	return nil
}

// setDirMeta gives the workspace directory at rel the owner, mode, user
// xattrs and mtime the plan recorded for it.
func (a *applier) setDirMeta(rel string, meta *Node) error {
	dst, err := openBeneath(a.ws, rel, unix.O_PATH|unix.O_DIRECTORY)
	if err != nil {
		return err
	}
	defer unix.Close(dst)
	if err := unix.Fchownat(dst, "", int(meta.UID), int(meta.GID), unix.AT_EMPTY_PATH); err != nil {
		return &fs.PathError{Op: "chown", Path: rel, Err: err}
	}
	if err := unix.Chmod(procPath(dst), modeToUnix(meta.Mode)&^unix.S_ISUID); err != nil {
		return &fs.PathError{Op: "chmod", Path: rel, Err: err}
	}
	if err := syncXattrs(procPath(dst), meta.Xattrs); err != nil {
		return err
	}
	ts := []unix.Timespec{{Nsec: unix.UTIME_OMIT}, unix.NsecToTimespec(meta.MTime)}
	if err := unix.UtimesNanoAt(dst, "", ts, unix.AT_EMPTY_PATH); err != nil {
		return &fs.PathError{Op: "utimensat", Path: rel, Err: err}
	}
	return nil
}

// syncXattrs makes the user.* xattrs of p exactly want.
func syncXattrs(p string, want map[string]string) error {
	have, err := listXattrs(p, true)
	if err != nil {
		return &fs.PathError{Op: "listxattr", Path: p, Err: err}
	}
	for k := range have {
		if _, keep := want[k]; strings.HasPrefix(k, "user.") && !keep {
			if err := unix.Removexattr(p, k); err != nil && !errors.Is(err, unix.ENODATA) {
				return &fs.PathError{Op: "removexattr " + k, Path: p, Err: err}
			}
		}
	}
	for k, v := range want {
		if cur, ok := have[k]; !ok || cur != v {
			if err := unix.Setxattr(p, k, []byte(v), 0); err != nil {
				return &fs.PathError{Op: "setxattr " + k, Path: p, Err: err}
			}
		}
	}
	return nil
}

// copyMeta gives dst (an O_PATH fd of a file or directory) the owner (as
// translated by ids), mode, user xattrs and times of src.
func copyMeta(src, dst int, ids IDMap) error {
	var st unix.Stat_t
	if err := unix.Fstat(src, &st); err != nil {
		return err
	}
	uid, gid, err := ids(st.Uid, st.Gid)
	if err != nil {
		return err
	}
	if err := unix.Fchownat(dst, "", int(uid), int(gid), unix.AT_EMPTY_PATH); err != nil {
		return &fs.PathError{Op: "chown", Path: "", Err: err}
	}
	mode := st.Mode & 0o7777 &^ unix.S_ISUID
	if st.Mode&unix.S_IFMT != unix.S_IFDIR {
		mode &^= unix.S_ISGID
	}
	if err := unix.Chmod(procPath(dst), mode); err != nil {
		return &fs.PathError{Op: "chmod", Path: "", Err: err}
	}
	// src was sanitized: overlay's markers are gone and escaped names are
	// restored, so every user.* xattr left is content. Reading it as a
	// layer would drop the restored user.overlay.* names.
	t := DirTree{layer: false}
	var want Node
	raw, err := listXattrs(procPath(src), true)
	if err != nil {
		return err
	}
	if err := t.setXattrs(&want, raw); err != nil {
		return err
	}
	if err := syncXattrs(procPath(dst), want.Xattrs); err != nil {
		return err
	}
	return setTimes(dst, "", &st, unix.AT_EMPTY_PATH)
}

// copyEntry copies the (already sanitized) upper entry name from upParent
// into wsParent, for an upper directory on another filesystem.
func (a *applier) copyEntry(upParent, wsParent int, name, rel string) error {
	var st unix.Stat_t
	if err := unix.Fstatat(upParent, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return &fs.PathError{Op: "fstatat", Path: rel, Err: err}
	}
	tmp := ".neonbox-tmp-" + name
	if len(tmp) > 255 {
		tmp = tmp[:255]
	}
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFLNK:
		target, err := readlinkAt(upParent, name)
		if err != nil {
			return err
		}
		_ = linux.RemoveAt(wsParent, tmp)
		if err := unix.Symlinkat(target, wsParent, tmp); err != nil {
			return &fs.PathError{Op: "symlink", Path: rel, Err: err}
		}
		if err := unix.Fchownat(wsParent, tmp, int(st.Uid), int(st.Gid), unix.AT_SYMLINK_NOFOLLOW); err != nil {
			return err
		}
		if err := setTimes(wsParent, tmp, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			return err
		}
		return renameInto(wsParent, tmp, name, rel)
	case unix.S_IFDIR:
		if err := unix.Mkdirat(wsParent, name, 0o700); err != nil {
			return &fs.PathError{Op: "mkdir", Path: rel, Err: err}
		}
		src, err := unix.Openat(upParent, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != nil {
			return err
		}
		defer unix.Close(src)
		dst, err := unix.Openat(wsParent, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != nil {
			return err
		}
		defer unix.Close(dst)
		names, err := readNames(src)
		if err != nil {
			return err
		}
		for _, n := range names {
			if err := a.copyEntry(src, dst, n, rel+"/"+n); err != nil {
				return err
			}
		}
		return copyMeta(src, dst, Identity) // sanitize already translated owners
	case unix.S_IFREG:
		if first, ok := a.links[st.Ino]; ok && st.Nlink > 1 {
			_ = linux.RemoveAt(wsParent, tmp)
			if err := unix.Linkat(a.ws, first, wsParent, tmp, 0); err != nil {
				return &fs.PathError{Op: "link", Path: rel, Err: err}
			}
			return renameInto(wsParent, tmp, name, rel)
		}
		if err := copyFile(upParent, wsParent, name, tmp); err != nil {
			return fmt.Errorf("copy %q: %w", rel, err)
		}
		src, err := unix.Openat(upParent, name, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != nil {
			return err
		}
		defer unix.Close(src)
		dst, err := unix.Openat(wsParent, tmp, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != nil {
			return err
		}
		defer unix.Close(dst)
		if err := copyMeta(src, dst, Identity); err != nil {
			return err
		}
		if st.Nlink > 1 {
			a.links[st.Ino] = rel
		}
		return renameInto(wsParent, tmp, name, rel)
	}
	return &fs.PathError{Op: "commit", Path: rel, Err: ErrRefused}
}

func renameInto(dirfd int, tmp, name, rel string) error {
	if err := unix.Renameat(dirfd, tmp, dirfd, name); err != nil {
		return &fs.PathError{Op: "rename", Path: rel, Err: err}
	}
	return nil
}

func copyFile(srcDir, dstDir int, name, tmp string) error {
	sfd, err := unix.Openat(srcDir, name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	src := os.NewFile(uintptr(sfd), name)
	defer src.Close()
	_ = linux.RemoveAt(dstDir, tmp)
	dfd, err := unix.Openat(dstDir, tmp, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return err
	}
	dst := os.NewFile(uintptr(dfd), tmp)
	if _, err := io.Copy(dst, src); err != nil {
		return errors.Join(err, dst.Close())
	}
	return dst.Close()
}
