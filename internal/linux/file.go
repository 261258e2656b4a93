package linux

import (
	"cmp"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// ReadFile reads the small file at path whole, as os.ReadFile does, with
// plain system calls: os.Open offers every file to Go's netpoller (five
// system calls more for a /proc file, three and a removal at close for a
// cgroup file, which can be polled), which adds up on the way to a
// jail's start.
func ReadFile(path string) ([]byte, error) {
	fd, err := Open(path, unix.O_RDONLY, 0)
	if err != nil {
		return nil, err
	}
	defer unix.Close(fd)
	buf := make([]byte, 0, 4096)
	for {
		if len(buf) == cap(buf) {
			buf = append(buf, 0)[:len(buf)]
		}
		var n int
		err := retry(func() (err error) { n, err = unix.Read(fd, buf[len(buf):cap(buf)]); return err })
		if err != nil {
			return nil, &fs.PathError{Op: "read", Path: path, Err: err}
		}
		if n == 0 {
			return buf, nil
		}
		buf = buf[:len(buf)+n]
	}
}

// WriteFile opens path for writing with flags (O_CREAT, O_TRUNC, ...; perm
// for a file it creates) and writes data in one write(2), as a cgroup
// control file takes a value, with plain system calls (see ReadFile).
func WriteFile(path string, data []byte, flags int, perm uint32) error {
	fd, err := Open(path, unix.O_WRONLY|flags, perm)
	if err != nil {
		return err
	}
	var n int
	err = retry(func() (err error) { n, err = unix.Write(fd, data); return err })
	if err == nil && n < len(data) {
		err = io.ErrShortWrite
	}
	if err != nil {
		unix.Close(fd)
		return &fs.PathError{Op: "write", Path: path, Err: err}
	}
	if err := unix.Close(fd); err != nil {
		return &fs.PathError{Op: "close", Path: path, Err: err}
	}
	return nil
}

// Open wraps open(2), O_CLOEXEC added and EINTR retried, with plain
// system calls (see ReadFile).
func Open(path string, flags int, perm uint32) (int, error) {
	var fd int
	err := retry(func() (err error) { fd, err = unix.Open(path, flags|unix.O_CLOEXEC, perm); return err })
	if err != nil {
		return -1, &fs.PathError{Op: "open", Path: path, Err: err}
	}
	return fd, nil
}

// ReadOwnFile reads the regular file at path, of 1 to max bytes, if
// this process's user owns it and nobody else may write it (for files a
// process keeps for its later runs, in a directory of its own), without
// following a symlink at path.
func ReadOwnFile(path string, max int64) ([]byte, error) {
	// Not blocked by a FIFO planted there.
	fd, err := Open(path, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_NOCTTY, 0)
	if err != nil {
		return nil, err
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, &fs.PathError{Op: "fstat", Path: path, Err: err}
	}
	if st.Uid != uint32(os.Geteuid()) || st.Mode&0o022 != 0 || st.Mode&unix.S_IFMT != unix.S_IFREG {
		return nil, &fs.PathError{Op: "open", Path: path, Err: errNotOwn}
	}
	if st.Size <= 0 || st.Size > max {
		return nil, &fs.PathError{Op: "read", Path: path, Err: fmt.Errorf("size %d, not 1 to %d bytes", st.Size, max)}
	}
	b := make([]byte, st.Size)
	if n, err := Pread(fd, b, 0); err != nil || n != len(b) {
		return nil, &fs.PathError{Op: "read", Path: path, Err: cmp.Or(err, io.ErrUnexpectedEOF)}
	}
	return b, nil
}

// errNotOwn says that a file is not this user's alone (ReadOwnFile).
var errNotOwn = errors.New("not owned by us, or writable by others, or not a regular file")

// Pread wraps pread(2), EINTR retried.
func Pread(fd int, b []byte, off int64) (int, error) {
	var n int
	err := retry(func() (err error) { n, err = unix.Pread(fd, b, off); return err })
	return n, err
}

// WriteFileAtomic writes data to dir/name whole or not at all: a reader
// sees the old file or the new one. The file is this user's, mode 0600.
// Plain system calls (see ReadFile): a run writes its owner file this
// way on its way to the jail.
func WriteFileAtomic(dir, name string, data []byte) error {
	var r [8]byte
	if err := Random(r[:]); err != nil {
		return err
	}
	tmp := filepath.Join(dir, ".tmp-"+hex.EncodeToString(r[:]))
	if err := WriteFile(tmp, data, unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW, 0o600); err != nil {
		_ = unix.Unlink(tmp)
		return err
	}
	path := filepath.Join(dir, name)
	if err := retry(func() error { return unix.Rename(tmp, path) }); err != nil {
		_ = unix.Unlink(tmp)
		return &fs.PathError{Op: "rename", Path: path, Err: err}
	}
	return nil
}
