package overlay

import (
	"fmt"
	"io"
	"io/fs"
	"os"
	"sort"
	"strings"

	"golang.org/x/sys/unix"
)

// Overlay's markers with the userxattr mount option.
const (
	xattrPrefix   = "user.overlay."
	xattrEscaped  = "user.overlay.overlay."
	xattrOpaque   = "user.overlay.opaque"
	xattrWhiteout = "user.overlay.whiteout"
)

// DirTree is a Tree over a real directory, read through file descriptors
// with strict beneath-the-root resolution.
type DirTree struct {
	root  int
	layer bool
}

// OpenDirTree opens dir as a Tree. With layer set, dir is an overlay upper
// directory and overlay's markers (whiteouts, opaque directories, escaped
// xattrs) are interpreted; otherwise every entry is taken as it is.
func OpenDirTree(dir string, layer bool) (*DirTree, error) {
	fd, err := unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: dir, Err: err}
	}
	return &DirTree{root: fd, layer: layer}, nil
}

// Close releases the tree's root descriptor.
func (t *DirTree) Close() error { return unix.Close(t.root) }

// Lstat implements Tree.
func (t *DirTree) Lstat(rel string) (Node, error) {
	if rel == "" {
		return t.stat(t.root, "", ".")
	}
	pfd, name, err := openParent(t.root, rel)
	if err != nil {
		return Node{}, err
	}
	defer unix.Close(pfd)
	return t.stat(pfd, name, name)
}

// ReadDir implements Tree.
func (t *DirTree) ReadDir(rel string) ([]Node, error) {
	fd, err := openBeneath(t.root, rel, unix.O_RDONLY|unix.O_DIRECTORY)
	if err != nil {
		return nil, err
	}
	defer unix.Close(fd)
	names, err := readNames(fd)
	if err != nil {
		return nil, &fs.PathError{Op: "readdir", Path: rel, Err: err}
	}
	nodes := make([]Node, 0, len(names))
	for _, name := range names {
		n, err := t.stat(fd, name, name)
		if err != nil {
			return nil, err
		}
		nodes = append(nodes, n)
	}
	return nodes, nil
}

// Open implements Tree.
func (t *DirTree) Open(rel string) (io.ReadCloser, error) {
	fd, err := openBeneath(t.root, rel, unix.O_RDONLY|unix.O_NONBLOCK)
	if err != nil {
		return nil, err
	}
	return os.NewFile(uintptr(fd), rel), nil
}

// stat describes entry name of the directory dirfd ("" for dirfd itself).
func (t *DirTree) stat(dirfd int, name, display string) (Node, error) {
	var st unix.Stat_t
	flags := unix.AT_SYMLINK_NOFOLLOW
	if name == "" {
		flags |= unix.AT_EMPTY_PATH
	}
	if err := unix.Fstatat(dirfd, name, &st, flags); err != nil {
		return Node{}, &fs.PathError{Op: "fstatat", Path: display, Err: err}
	}
	n := nodeFromStat(&st)
	n.Name = name
	if t.layer && n.Type == TypeSpecial && st.Mode&unix.S_IFMT == unix.S_IFCHR && st.Rdev == 0 {
		n.Type = TypeWhiteout
	}
	switch n.Type {
	case TypeSymlink:
		target, err := readlinkAt(dirfd, name)
		if err != nil {
			return Node{}, &fs.PathError{Op: "readlinkat", Path: display, Err: err}
		}
		n.Target = target
	case TypeFile, TypeDir:
		// The root is named by its /proc/self/fd magic link, which must
		// be followed: llistxattr(2) on the link itself lists nothing.
		// An entry is named below it and is not followed.
		p, follow := procPath(dirfd), true
		if name != "" {
			p, follow = entryPath(dirfd, name), false
		}
		raw, err := listXattrs(p, follow)
		if err != nil {
			return Node{}, &fs.PathError{Op: "listxattr", Path: display, Err: err}
		}
		if err := t.setXattrs(&n, raw); err != nil {
			return Node{}, fmt.Errorf("%s: %w", display, err)
		}
	}
	return n, nil
}

func (t *DirTree) setXattrs(n *Node, raw map[string]string) error {
	for k, v := range raw {
		if !strings.HasPrefix(k, "user.") {
			continue // security.*, system.* and trusted.* are not content
		}
		if t.layer && strings.HasPrefix(k, xattrPrefix) {
			switch {
			case strings.HasPrefix(k, xattrEscaped):
				k = xattrPrefix + strings.TrimPrefix(k, xattrEscaped)
			case k == xattrOpaque:
				n.Opaque = n.Type == TypeDir && v == "y"
				continue
			case k == xattrWhiteout && n.Type == TypeFile:
				n.Type = TypeWhiteout
				continue
			default:
				continue // origin, impure, uuid, ...: overlay's bookkeeping
			}
		}
		if n.Xattrs == nil {
			n.Xattrs = map[string]string{}
		}
		n.Xattrs[k] = v
	}
	if n.Type == TypeWhiteout {
		n.Xattrs = nil
	}
	return nil
}

func nodeFromStat(st *unix.Stat_t) Node {
	n := Node{
		UID:   st.Uid,
		GID:   st.Gid,
		Size:  st.Size,
		MTime: st.Mtim.Nano(),
		Ino:   st.Ino,
		Nlink: uint64(st.Nlink),
		Mode:  modeFromUnix(st.Mode),
	}
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFREG:
		n.Type = TypeFile
	case unix.S_IFDIR:
		n.Type = TypeDir
		n.Size = 0
	case unix.S_IFLNK:
		n.Type = TypeSymlink
		n.Mode = 0
	default:
		n.Type = TypeSpecial
	}
	return n
}

func modeFromUnix(m uint32) fs.FileMode {
	mode := fs.FileMode(m & 0o777)
	if m&unix.S_ISUID != 0 {
		mode |= fs.ModeSetuid
	}
	if m&unix.S_ISGID != 0 {
		mode |= fs.ModeSetgid
	}
	if m&unix.S_ISVTX != 0 {
		mode |= fs.ModeSticky
	}
	return mode
}

func modeToUnix(m fs.FileMode) uint32 {
	mode := uint32(m.Perm())
	if m&fs.ModeSetuid != 0 {
		mode |= unix.S_ISUID
	}
	if m&fs.ModeSetgid != 0 {
		mode |= unix.S_ISGID
	}
	if m&fs.ModeSticky != 0 {
		mode |= unix.S_ISVTX
	}
	return mode
}

func readlinkAt(dirfd int, name string) (string, error) {
	for size := 256; ; size *= 2 {
		buf := make([]byte, size)
		n, err := unix.Readlinkat(dirfd, name, buf)
		if err != nil {
			return "", err
		}
		if n < size {
			return string(buf[:n]), nil
		}
	}
}

func sortStrings(s []string) { sort.Strings(s) }
