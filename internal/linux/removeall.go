package linux

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// ErrMountPoint is returned (wrapped) by RemoveAll for a directory that
// is a mount point: what is mounted there is not its to remove.
var ErrMountPoint = errors.New("is a mount point")

// RemoveAll removes path and everything below it. Unlike os.RemoveAll it
// never goes through a mount point or a symlink (a mount point below path
// is an error wrapping ErrMountPoint, and is left with its directory),
// it makes directories its caller may not list listable (overlay leaves
// work/work with mode 0), and it costs a few system calls per directory:
// an empty one is a single rmdir. A missing path is not an error.
func RemoveAll(path string) error {
	path = filepath.Clean(path)
	dir, name := filepath.Split(path)
	if name == "" || name == "." || name == ".." {
		return &fs.PathError{Op: "remove", Path: path, Err: unix.EINVAL}
	}
	if dir == "" {
		dir = "."
	}
	parent, err := unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err == unix.ENOENT {
		return nil
	}
	if err != nil {
		return &fs.PathError{Op: "open", Path: dir, Err: err}
	}
	defer unix.Close(parent)
	return removeAt(parent, name, path, unix.DT_UNKNOWN)
}

// RemoveAt is RemoveAll for the entry name of the directory parent.
func RemoveAt(parent int, name string) error {
	return removeAt(parent, name, name, unix.DT_UNKNOWN)
}

// removeAt removes name in the directory parent; typ is its type from
// the parent's listing (DT_UNKNOWN if not known).
func removeAt(parent int, name, path string, typ uint8) error {
	if typ != unix.DT_DIR && typ != unix.DT_UNKNOWN {
		return unlinkAt(parent, name, path)
	}
	switch err := unix.Unlinkat(parent, name, unix.AT_REMOVEDIR); err {
	case nil, unix.ENOENT:
		return nil
	case unix.ENOTDIR:
		return unlinkAt(parent, name, path)
	case unix.ENOTEMPTY, unix.EEXIST:
	case unix.EBUSY: // on Linux: a mount point (or this process's root)
		return fmt.Errorf("remove %s: %w", path, ErrMountPoint)
	default:
		return &fs.PathError{Op: "rmdir", Path: path, Err: err}
	}
	fd, err := openBelow(parent, name)
	if err == unix.EACCES {
		if unix.Fchmodat(parent, name, 0o700, 0) == nil {
			fd, err = openBelow(parent, name)
		}
	}
	switch err {
	case nil:
	case unix.ENOENT:
		return nil
	case unix.EXDEV:
		return fmt.Errorf("remove %s: %w", path, ErrMountPoint)
	default:
		return &fs.PathError{Op: "open", Path: path, Err: err}
	}
	defer unix.Close(fd)
	// Entries removed while the directory is read may make the listing
	// skip others (as with readdir): then it is read again.
	for range 3 {
		var errs []error
		err := ReadDirents(fd, path, func(child string, typ uint8) {
			if err := removeAt(fd, child, path+"/"+child, typ); err != nil {
				errs = append(errs, err)
			}
		})
		if err := errors.Join(append(errs, err)...); err != nil {
			return err
		}
		err = unix.Unlinkat(parent, name, unix.AT_REMOVEDIR)
		if err == nil || err == unix.ENOENT {
			return nil
		}
		if err != unix.ENOTEMPTY {
			return &fs.PathError{Op: "rmdir", Path: path, Err: err}
		}
		if _, err := unix.Seek(fd, 0, 0); err != nil {
			return &fs.PathError{Op: "seek", Path: path, Err: err}
		}
	}
	return &fs.PathError{Op: "rmdir", Path: path, Err: unix.ENOTEMPTY}
}

func unlinkAt(parent int, name, path string) error {
	if err := unix.Unlinkat(parent, name, 0); err != nil && err != unix.ENOENT {
		return &fs.PathError{Op: "unlink", Path: path, Err: err}
	}
	return nil
}

// openBelow opens the directory name in parent for listing, refusing a
// symlink (ELOOP) and a mount point (EXDEV).
func openBelow(parent int, name string) (int, error) {
	for {
		fd, err := unix.Openat2(parent, name, &unix.OpenHow{
			Flags:   unix.O_RDONLY | unix.O_DIRECTORY | unix.O_NOFOLLOW | unix.O_CLOEXEC,
			Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_XDEV | unix.RESOLVE_NO_SYMLINKS,
		})
		if err != unix.EINTR && err != unix.EAGAIN {
			return fd, err
		}
	}
}

// ReadDirents calls f with the name and type of each entry of the
// directory fd but . and .., from fd's offset on (getdents64 gives the
// type, so no stat); path names the directory in errors.
func ReadDirents(fd int, path string, f func(name string, typ uint8)) error {
	var buf [8 << 10]byte
	for {
		n, err := unix.Getdents(fd, buf[:])
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return &fs.PathError{Op: "getdents", Path: path, Err: err}
		}
		if n <= 0 {
			return nil
		}
		// struct linux_dirent64: ino u64, off s64, reclen u16, type u8,
		// then the NUL-terminated name.
		for b := buf[:n]; len(b) >= 19; {
			reclen := int(binary.NativeEndian.Uint16(b[16:18]))
			if reclen < 19 || reclen > len(b) {
				return &fs.PathError{Op: "getdents", Path: path, Err: unix.EIO}
			}
			typ, raw := b[18], b[19:reclen]
			if i := bytes.IndexByte(raw, 0); i >= 0 {
				raw = raw[:i]
			}
			if name := string(raw); name != "." && name != ".." {
				f(name, typ)
			}
			b = b[reclen:]
		}
	}
}
