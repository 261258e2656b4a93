package overlay

import (
	"io"
	"io/fs"
	"maps"
)

// NodeType is the kind of a directory entry, as far as committing cares.
type NodeType uint8

// Entry kinds. Whiteout only occurs in an upper directory.
const (
	TypeFile NodeType = iota + 1
	TypeDir
	TypeSymlink
	TypeWhiteout
	// TypeSpecial is a FIFO, socket or device node other than a whiteout.
	TypeSpecial
)

func (t NodeType) String() string {
	switch t {
	case TypeFile:
		return "file"
	case TypeDir:
		return "dir"
	case TypeSymlink:
		return "symlink"
	case TypeWhiteout:
		return "whiteout"
	case TypeSpecial:
		return "special"
	}
	return "unknown"
}

// Node describes one directory entry.
type Node struct {
	Name string
	Type NodeType
	// Mode holds the permission bits plus setuid, setgid and sticky, in
	// io/fs form.
	Mode  fs.FileMode
	UID   uint32
	GID   uint32
	Size  int64
	MTime int64 // nanoseconds since the epoch
	// Target is a symlink's target.
	Target string
	// Opaque marks an upper directory that hides the lower one.
	Opaque bool
	// Xattrs are the user.* extended attributes that belong to the
	// content, with overlay's own markers left out and escaped names
	// restored.
	Xattrs map[string]string
	// Ino and Nlink identify hard links within one tree.
	Ino   uint64
	Nlink uint64
}

// sameMeta reports whether a and b agree on everything a commit would
// carry over except content and, for directories, mtime.
func sameMeta(a, b Node) bool {
	return a.Type == b.Type && a.Mode == b.Mode && a.UID == b.UID && a.GID == b.GID &&
		a.Target == b.Target && maps.Equal(a.Xattrs, b.Xattrs)
}

// Tree is read access to a directory tree by slash-separated paths relative
// to its root ("" is the root itself). Implementations never follow
// symlinks.
type Tree interface {
	// ReadDir lists the directory at rel, sorted by name.
	ReadDir(rel string) ([]Node, error)
	// Lstat describes the entry at rel; a missing entry gives an error
	// satisfying errors.Is(err, fs.ErrNotExist).
	Lstat(rel string) (Node, error)
	// Open opens the regular file at rel for reading.
	Open(rel string) (io.ReadCloser, error)
}
