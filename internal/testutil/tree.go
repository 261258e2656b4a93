package testutil

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// FixtureTime is the mtime fixtures give their entries. Snapshots compare
// mtimes that are this old exactly and ignore newer ones, which depend on
// when an operation ran.
var FixtureTime = time.Date(2001, 9, 9, 1, 46, 40, 0, time.UTC)

// Snapshot describes every entry below dir, keyed by relative path: type,
// mode, owner, content hash or link target, user xattrs, hard-link group
// and, where it is not later than the fixtures', the mtime.
func Snapshot(t testing.TB, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	inodes := map[uint64][]string{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		var st unix.Stat_t
		if err := unix.Lstat(p, &st); err != nil {
			return err
		}
		desc := fmt.Sprintf("mode=%o uid=%d gid=%d", st.Mode, st.Uid, st.Gid)
		switch st.Mode & unix.S_IFMT {
		case unix.S_IFREG:
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			sum := sha256.Sum256(b)
			desc += " sha=" + hex.EncodeToString(sum[:8])
			if st.Nlink > 1 {
				inodes[st.Ino] = append(inodes[st.Ino], rel)
			}
		case unix.S_IFLNK:
			target, err := os.Readlink(p)
			if err != nil {
				return err
			}
			desc += " -> " + target
		case unix.S_IFCHR, unix.S_IFBLK:
			desc += fmt.Sprintf(" rdev=%d", st.Rdev)
		}
		if mt := time.Unix(st.Mtim.Unix()); mt.Before(FixtureTime.Add(24 * time.Hour)) {
			desc += " mtime=" + mt.UTC().Format(time.RFC3339Nano)
		}
		desc += xattrDesc(p)
		out[rel] = desc
		return nil
	})
	if err != nil {
		t.Fatalf("snapshot %s: %v", dir, err)
	}
	for _, paths := range inodes {
		if len(paths) < 2 {
			continue // linked only from outside the tree (e.g. undo history)
		}
		sort.Strings(paths)
		for _, p := range paths {
			out[p] += " links=" + strings.Join(paths, ",")
		}
	}
	return out
}

func xattrDesc(p string) string {
	size, err := unix.Llistxattr(p, nil)
	if err != nil || size == 0 {
		return ""
	}
	buf := make([]byte, size)
	size, err = unix.Llistxattr(p, buf)
	if err != nil {
		return ""
	}
	var parts []string
	for _, name := range strings.Split(strings.TrimRight(string(buf[:size]), "\x00"), "\x00") {
		if !strings.HasPrefix(name, "user.") {
			continue
		}
		val := make([]byte, 4096)
		n, err := unix.Lgetxattr(p, name, val)
		if err != nil {
			continue
		}
		parts = append(parts, name+"="+string(val[:n]))
	}
	sort.Strings(parts)
	if len(parts) == 0 {
		return ""
	}
	return " xattrs=" + strings.Join(parts, ";")
}

// CopyTree copies src to dst (which must not exist) with cp -a, keeping
// modes, owners, times, xattrs and hard links.
func CopyTree(t testing.TB, src, dst string) {
	t.Helper()
	if out, err := exec.Command("cp", "-a", src, dst).CombinedOutput(); err != nil {
		t.Fatalf("cp -a %s %s: %v: %s", src, dst, err, out)
	}
}

// SetTreeTimes gives every entry below dir FixtureTime as atime and mtime.
func SetTreeTimes(t testing.TB, dir string) {
	t.Helper()
	ts := []unix.Timespec{unix.NsecToTimespec(FixtureTime.UnixNano()), unix.NsecToTimespec(FixtureTime.UnixNano())}
	var paths []string
	_ = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err == nil {
			paths = append(paths, p)
		}
		return nil
	})
	// Children first, so setting a directory's time is not undone.
	for i := len(paths) - 1; i >= 0; i-- {
		if err := unix.UtimesNanoAt(unix.AT_FDCWD, paths[i], ts, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			t.Fatalf("utimes %s: %v", paths[i], err)
		}
	}
}

// WorldTraversableTempDir is t.TempDir with every ancestor made o+x, so the
// jail's unprivileged ids can reach state dirs created below it.
func WorldTraversableTempDir(t testing.TB) string {
	t.Helper()
	d := t.TempDir()
	for p := d; p != "/" && p != "."; p = filepath.Dir(p) {
		st, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		if st.Mode().Perm()&0o001 == 0 {
			if err := os.Chmod(p, st.Mode().Perm()|0o011); err != nil {
				t.Fatal(err)
			}
		}
	}
	return d
}
