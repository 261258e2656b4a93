package overlay

import (
	"errors"
	"io/fs"
	"os"
	"path"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// Path resolution for commits: every lookup stays beneath a root fd, never
// follows a symlink and never crosses a mount, so a symlink or mount the
// run planted cannot redirect a write outside the workspace
// (openat2(2), RESOLVE_BENEATH).
const resolveStrict = unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS |
	unix.RESOLVE_NO_MAGICLINKS | unix.RESOLVE_NO_XDEV

// openBeneath opens rel below the directory root with strict resolution.
// rel "" opens the root itself.
func openBeneath(root int, rel string, flags int) (int, error) {
	if rel == "" {
		rel = "."
	}
	how := unix.OpenHow{Flags: uint64(flags | unix.O_CLOEXEC | unix.O_NOFOLLOW), Resolve: resolveStrict}
	for {
		fd, err := unix.Openat2(root, rel, &how)
		if err == unix.EINTR || err == unix.EAGAIN {
			continue
		}
		if err != nil {
			return -1, &fs.PathError{Op: "openat2", Path: rel, Err: err}
		}
		return fd, nil
	}
}

// openParent opens the directory holding rel and returns it with rel's
// last element.
func openParent(root int, rel string) (int, string, error) {
	dir, name := path.Split(rel)
	fd, err := openBeneath(root, strings.TrimSuffix(dir, "/"), unix.O_PATH|unix.O_DIRECTORY)
	return fd, name, err
}

// procPath names the inode behind fd, for the calls that have no fd form
// usable with O_PATH descriptors.
func procPath(fd int) string { return "/proc/self/fd/" + strconv.Itoa(fd) }

// entryPath names entry name of the directory dirfd without following it.
func entryPath(dirfd int, name string) string { return procPath(dirfd) + "/" + name }

// listXattrs returns the extended attributes of p (following p only if
// follow is set).
func listXattrs(p string, follow bool) (map[string]string, error) {
	list, get := unix.Llistxattr, unix.Lgetxattr
	if follow {
		list, get = unix.Listxattr, unix.Getxattr
	}
	size, err := list(p, nil)
	if err != nil || size == 0 {
		if errors.Is(err, unix.ENOTSUP) {
			err = nil
		}
		return nil, err
	}
	buf := make([]byte, size)
	if size, err = list(p, buf); err != nil {
		return nil, err
	}
	out := map[string]string{}
	for _, name := range strings.Split(strings.TrimRight(string(buf[:size]), "\x00"), "\x00") {
		if name == "" {
			continue
		}
		vsize, err := get(p, name, nil)
		if errors.Is(err, unix.ENODATA) {
			continue
		}
		if err != nil {
			return nil, err
		}
		val := make([]byte, vsize)
		if vsize, err = get(p, name, val); err != nil {
			return nil, err
		}
		out[name] = string(val[:vsize])
	}
	return out, nil
}

// readNames lists the entries of the directory fd, sorted.
func readNames(fd int) ([]string, error) {
	dup, err := unix.Openat(fd, ".", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	d := os.NewFile(uintptr(dup), ".")
	defer d.Close()
	names, err := d.Readdirnames(-1)
	if err != nil {
		return nil, err
	}
	sortStrings(names)
	return names, nil
}
