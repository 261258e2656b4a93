package nsjail

import (
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/neonbox/neonbox-ns/cgroup"
	"github.com/neonbox/neonbox-ns/internal/linux"
	"github.com/neonbox/neonbox-ns/overlay"
)

// runDir is a run's directory under the state dir:
//
//	runs/<id>/owner       who runs it (writeOwner)
//	runs/<id>/upper       overlay upper dir: the run's changes
//	runs/<id>/work        overlay work dir
//	runs/<id>/committing  while a commit from it may be under way
//
// Nothing is ever mounted on these in the host's mount namespace (the
// jails' roots are mounted on the state dir's mnt, in their own). A run
// over, the teardown helper keeps its run dir, emptied, under spare/ for
// a later run to take (see spareDir).
type runDir struct {
	path    string
	claimed bool // a spare taken (claimSpare): upper and work are there, empty
}

func (d runDir) upper() string { return filepath.Join(d.path, "upper") }

// onFS reports whether the upper dir is on the filesystem dev.
func (d runDir) onFS(dev uint64) bool {
	var st unix.Stat_t
	return unix.Stat(d.upper(), &st) == nil && st.Dev == dev
}

// newRunID makes a run id: 16 hex digits from getrandom(2). (Not through
// crypto/rand, whose packages' initialisation every start paid.)
func newRunID() string {
	var b [8]byte
	if err := linux.Random(b[:]); err != nil {
		// As crypto/rand does: a run cannot go on without an id.
		panic(fmt.Sprintf("make a run id: %v", err))
	}
	return hex.EncodeToString(b[:])
}

// isRunID reports whether s is a run id as newRunID makes them. (Not a
// regexp, whose compilation a run would pay.)
func isRunID(s string) bool {
	return len(s) == 16 && strings.Trim(s, "0123456789abcdef") == ""
}

var spread sync.Map // runs dirs marked in this process

// spreadRunDirs marks runs as a top directory (chattr +T) once per
// process, where the filesystem has that attribute: ext4 then spreads
// the run dirs across block groups instead of packing them into one.
// Each run creates and deletes about ten inodes there (its dirs and
// overlay's work files), and on ext4 without a journal an allocation
// skips the inodes freed in the last minutes one by one
// (fs/ext4/ialloc.c, recently_deleted): packed into one group, a busy
// machine's runs made every mkdir, and overlay's mount, scan thousands
// (an overlay mount went from about 0.3 ms to 2.4-3.9 ms). Where the
// attribute is missing it is only slower, so failure is ignored.
func spreadRunDirs(runs string) {
	if _, done := spread.LoadOrStore(runs, true); !done {
		_, _ = linux.MarkTopDir(runs)
	}
}

// rootMount is the directory, in the state dir, on which every jail mounts
// its new root (a tmpfs) before it pivots into it. Each jail does so in
// its own mount namespace, so one directory serves them all, and a run
// makes no directory on disk for it (on some filesystems each costs a
// block to allocate and discard).
func rootMount(stateDir string) (string, error) {
	dir := filepath.Join(stateDir, "mnt")
	if err := os.Mkdir(dir, 0o711); err != nil && !errors.Is(err, fs.ErrExist) {
		return "", err
	}
	return dir, nil
}

// createRunDir makes the run's directories: reserveRunDir, its owner
// file, then fill.
func createRunDir(stateDir, id, workspace string, ids idPlan, ws *unix.Stat_t, disk int64) (runDir, error) {
	d, err := reserveRunDir(stateDir, id, disk == 0)
	if err != nil {
		return d, err
	}
	if err := d.writeOwner(); err != nil {
		return d, err
	}
	return d, d.fill(workspace, ids, ws, disk)
}

// reserveRunDir makes the run's directory: it comes before anything else
// the run makes, and goes last. With spare, it takes a spare run dir if
// there is one (not for a --disk run, whose tmpfs would hide it).
//
// The owner file (writeOwner), by which a later run tells that the run
// was abandoned and cleans up after it (the run dir and the run's
// cgroup), is the caller's to write, as soon as it likes: until then a
// sweep takes the run dir for one being made, for abandonedAfter (its
// mtime is now), so the caller must write it before anything that may
// take that long. A run killed before leaves the run dir for a sweep
// after abandonedAfter.
func reserveRunDir(stateDir, id string, spare bool) (runDir, error) {
	runs := filepath.Join(stateDir, "runs")
	d := runDir{path: filepath.Join(runs, id)}
	if spare {
		switch claimed, err := claimSpare(stateDir, d.path); {
		case err != nil:
			return runDir{}, err
		case claimed:
			d.claimed = true
			return d, nil
		}
	}
	if err := os.MkdirAll(runs, 0o711); err != nil {
		return runDir{}, err
	}
	spreadRunDirs(runs)
	// 0711: the jail's root (an unprivileged host id) must be able to
	// reach the mount points and layers, and nothing else.
	if err := os.Mkdir(d.path, 0o711); err != nil {
		return runDir{}, err
	}
	return d, os.Chmod(d.path, 0o711)
}

// Spare run dirs: the teardown helper of `neonbox-ns exec` empties a
// finished run's upper and work dirs, removes the rest of its run dir and
// moves it to spareDir (at most jailinit.MaxSpares of them), so that a
// later run takes it with one rename instead of making its directories:
// on ext4 a new directory under runs costs about 0.3 ms (Orlov spreads
// top directories), and each removal a discard.
const spareDir = "spare"

// spare is where the helper moves d when the run is over.
func (d runDir) spare() string {
	return filepath.Join(filepath.Dir(filepath.Dir(d.path)), spareDir, filepath.Base(d.path))
}

// claimSpare moves a spare run dir of stateDir to path, if there is one,
// and checks that it is as the helper leaves it and that fill will make
// it as good as new: path's upper and work dirs empty, nothing else in
// it, nothing on the upper dir's root that fill does not reset (owner,
// mode, times, the xattrs resetXattr names; security labels are the
// host's), and no inode flags or size that the work dir, which the jail
// never sees, does not have. A spare that is not is removed, and false
// returned: the run makes its run dir afresh. Without spares (or the
// spare dir) it returns false and makes the spare dir for the helper.
func claimSpare(stateDir, path string) (bool, error) {
	spares := filepath.Join(stateDir, spareDir)
	names, err := listDir(spares)
	if errors.Is(err, fs.ErrNotExist) {
		if err := os.MkdirAll(spares, 0o700); err != nil {
			return false, err
		}
	}
	if err != nil {
		return false, nil
	}
	for _, name := range names {
		spare := filepath.Join(spares, name)
		// Now as its mtime, which a rename leaves alone: a sweep
		// that meets it in runs/ before its owner file takes it for
		// one being made, not for one abandoned long ago.
		if unix.UtimesNanoAt(unix.AT_FDCWD, spare, nil, unix.AT_SYMLINK_NOFOLLOW) != nil {
			continue // gone: another run took it
		}
		if unix.Renameat2(unix.AT_FDCWD, spare, unix.AT_FDCWD, path, unix.RENAME_NOREPLACE) != nil {
			continue // another run took it
		}
		if checkSpare(path) != nil {
			if err := linux.RemoveAll(path); err != nil {
				return false, fmt.Errorf("remove spare run dir %s: %w", name, err)
			}
			return false, nil
		}
		return true, nil
	}
	return false, nil
}

// checkSpare checks a claimed spare run dir (claimSpare).
func checkSpare(path string) error {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return &fs.PathError{Op: "open", Path: path, Err: err}
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return &fs.PathError{Op: "fstat", Path: path, Err: err}
	}
	if st.Uid != uint32(os.Geteuid()) || st.Mode&0o7777 != 0o711 {
		return fmt.Errorf("owner %d, mode %o", st.Uid, st.Mode&0o7777)
	}
	names, err := listDirAt(fd, path)
	if err != nil {
		return err
	}
	slices.Sort(names)
	if !slices.Equal(names, []string{"upper", "work"}) {
		return fmt.Errorf("holds %q", names)
	}
	var flags [2]uint32
	var sizes [2]int64
	for i, sub := range names {
		subFD, err := unix.Openat(fd, sub, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != nil {
			return &fs.PathError{Op: "open", Path: filepath.Join(path, sub), Err: err}
		}
		left, err := listDirAt(subFD, filepath.Join(path, sub))
		var subSt unix.Stat_t
		if err == nil {
			err = unix.Fstat(subFD, &subSt)
		}
		if err == nil {
			// 0 where the filesystem has no flags (ENOTTY): equal.
			flags[i], _ = unix.IoctlGetUint32(subFD, unix.FS_IOC_GETFLAGS)
			sizes[i] = subSt.Size
		}
		unix.Close(subFD)
		switch {
		case err != nil:
			return &fs.PathError{Op: "read", Path: filepath.Join(path, sub), Err: err}
		case len(left) > 0:
			return fmt.Errorf("%s is not empty", sub)
		case subSt.Dev != st.Dev:
			return fmt.Errorf("%s is a mount point", sub)
		}
	}
	if flags[0] != flags[1] {
		return fmt.Errorf("upper has inode flags %#x, work %#x", flags[0], flags[1])
	}
	if sizes[0] != sizes[1] {
		// A directory does not shrink on ext4: one the last run filled
		// would show it.
		return fmt.Errorf("upper has size %d, work %d", sizes[0], sizes[1])
	}
	names, err = listNames(filepath.Join(path, "upper"))
	if err != nil {
		return err
	}
	for _, name := range names {
		if !resetXattr(name) && !strings.HasPrefix(name, "security.") {
			return fmt.Errorf("upper has xattr %s", name)
		}
	}
	return nil
}

// resetXattr reports whether setUpperRoot removes the xattr name from the
// upper dir's root (it then copies the workspace root's user.* ones): all
// that a jail can set there, which the next run must not see. Other
// security.* xattrs are the host's labels.
func resetXattr(name string) bool {
	switch name {
	case "system.posix_acl_access", "system.posix_acl_default", "security.capability":
		return true
	}
	return strings.HasPrefix(name, "user.")
}

// AwaitTeardowns waits, for up to within, until stateDir holds no run
// dir, and reports whether it does not. The teardown helper of
// `neonbox-ns exec` finishes a run's cleanup after neonbox-ns has exited,
// and may move the run dir into the state dir's spare dir: wait for it
// before removing a state dir, or the removal may fail (directory not
// empty) and leave the spare behind.
func AwaitTeardowns(stateDir string, within time.Duration) bool {
	runs := filepath.Join(stateDir, "runs")
	for deadline := time.Now().Add(within); ; time.Sleep(5 * time.Millisecond) {
		if names, _ := listDir(runs); len(names) == 0 {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
	}
}

// listDir lists the names in dir.
func listDir(dir string) ([]string, error) {
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: dir, Err: err}
	}
	defer unix.Close(fd)
	return listDirAt(fd, dir)
}

// listDirAt lists the names in the directory fd (named dir in errors).
func listDirAt(fd int, dir string) ([]string, error) {
	var names []string
	err := linux.ReadDirents(fd, dir, func(name string, _ uint8) { names = append(names, name) })
	return names, err
}

// writeOwner writes the owner file whole or not at all (a run killed
// half way through leaves a run dir without an owner, not one with a
// garbled owner, which would be taken for another run's): a line per
// owner, this process first.
func (d runDir) writeOwner() error {
	return linux.WriteFileAtomic(d.path, "owner", []byte(selfIdentity()))
}

// fill makes the overlay's upper and work dirs in the reserved run dir.
// ws is the workspace root's stat: the upper dir's root copies its mode
// and times, because overlay shows the upper root's attributes for the
// merged root. With disk, they are on a tmpfs of that size.
func (d runDir) fill(workspace string, ids idPlan, ws *unix.Stat_t, disk int64) error {
	if disk > 0 {
		// The run's changes live on a filesystem of their own, as big
		// as --disk: filling it fails the run, never the host's disk.
		// Inodes are capped too (one per KiB), so that millions of
		// empty files hit the limit as well.
		opts := fmt.Sprintf("size=%d,nr_inodes=%d,mode=0711", disk, max(disk>>10, 1024))
		if err := linux.Mount("tmpfs", d.path, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, opts); err != nil {
			return err
		}
		// Over the one the tmpfs hides.
		if err := d.writeOwner(); err != nil {
			return err
		}
	}
	if !d.claimed { // a spare has both
		for _, sub := range []string{"upper", "work"} {
			if err := os.Mkdir(filepath.Join(d.path, sub), 0o700); err != nil {
				return err
			}
		}
	}
	uid, gid := ids.mounterOwner()
	if err := os.Lchown(filepath.Join(d.path, "work"), uid, gid); err != nil {
		return err
	}
	return setUpperRoot(d.upper(), workspace, ids, ws)
}

// setUpperRoot gives the upper dir's root the workspace root's owner (as
// the jail sees it), mode, user xattrs and times: overlay shows the upper
// root's attributes for the merged root.
func setUpperRoot(upper, workspace string, ids idPlan, ws *unix.Stat_t) error {
	uid, gid := ids.upperOwner(ws.Uid, ws.Gid)
	if err := os.Lchown(upper, uid, gid); err != nil {
		return err
	}
	// What a spare's last run left (claimSpare), before the mode, which
	// removing an ACL leaves as it is.
	names, err := listNames(upper)
	if err != nil {
		return err
	}
	for _, name := range names {
		if resetXattr(name) {
			if err := unix.Removexattr(upper, name); err != nil && !errors.Is(err, unix.ENODATA) {
				return &fs.PathError{Op: "removexattr " + name, Path: upper, Err: err}
			}
		}
	}
	if err := unix.Chmod(upper, ws.Mode&0o7777); err != nil {
		return &fs.PathError{Op: "chmod", Path: upper, Err: err}
	}
	if err := copyRootXattrs(workspace, upper); err != nil {
		return err
	}
	if err := unix.UtimesNano(upper, []unix.Timespec{ws.Atim, ws.Mtim}); err != nil {
		return &fs.PathError{Op: "utimes", Path: upper, Err: err}
	}
	return nil
}

// copyRootXattrs gives the upper root the workspace root's user.*
// xattrs, which overlay shows for the merged root, escaping those in
// overlay's own namespace as overlay itself does; otherwise every commit
// would clear them.
func copyRootXattrs(workspace, upper string) error {
	names, err := listNames(workspace)
	if err != nil {
		return err
	}
	for _, name := range names {
		if !strings.HasPrefix(name, "user.") {
			continue
		}
		val, err := getxattr(workspace, name)
		if err != nil {
			return &fs.PathError{Op: "getxattr " + name, Path: workspace, Err: err}
		}
		dst := name
		if strings.HasPrefix(name, "user.overlay.") {
			dst = "user.overlay.overlay." + strings.TrimPrefix(name, "user.overlay.")
		}
		if err := unix.Setxattr(upper, dst, val, 0); err != nil {
			return &fs.PathError{Op: "setxattr " + dst, Path: upper, Err: err}
		}
	}
	return nil
}

// listNames lists the xattr names of p: none where its filesystem has no
// xattrs, and an error where they cannot be listed (more than listxattr
// returns, say), rather than a list that may miss some.
func listNames(p string) ([]string, error) {
	buf, err := sized(func(b []byte) (int, error) { return unix.Listxattr(p, b) })
	switch {
	case errors.Is(err, unix.ENOTSUP):
		return nil, nil
	case err != nil:
		return nil, &fs.PathError{Op: "listxattr", Path: p, Err: err}
	case len(buf) == 0:
		return nil, nil
	}
	return strings.Split(strings.TrimRight(string(buf), "\x00"), "\x00"), nil
}

func getxattr(p, name string) ([]byte, error) {
	return sized(func(b []byte) (int, error) { return unix.Getxattr(p, name, b) })
}

// sized calls get, which fills b as listxattr(2) and getxattr(2) do,
// first for the size, then with a buffer of that size (again if the
// value grew in between).
func sized(get func(b []byte) (int, error)) ([]byte, error) {
	for {
		n, err := get(nil)
		if err != nil || n == 0 {
			return nil, err
		}
		b := make([]byte, n)
		n, err = get(b)
		if errors.Is(err, unix.ERANGE) {
			continue
		}
		if err != nil {
			return nil, err
		}
		return b[:n], nil
	}
}

// selfIdentity is this process's identity, read once.
var selfIdentity = sync.OnceValue(func() string { return processIdentity(os.Getpid()) })

// processIdentity names a live process so that a recycled pid is not
// mistaken for it: "pid starttime" (/proc/<pid>/stat, field 22); "" for
// a process that has exited, zombies included (a teardown helper outlives
// its parent, and its new one may be slow to reap it).
func processIdentity(pid int) string {
	b, err := linux.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return ""
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return ""
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 20 || f[0] == "Z" || f[0] == "X" {
		return ""
	}
	return fmt.Sprintf("%d %s", pid, f[19])
}

// committingMarker in a run dir says a commit from it may be under way:
// only the recovery of its workspace may remove it (it needs the upper
// dir to roll the commit back).
const committingMarker = "committing"

// abandonedAfter is how old a run dir without an owner file must be to
// be taken for abandoned.
const abandonedAfter = time.Minute

// sweepAbandoned removes the run dirs (and cgroups) of neonbox-ns
// processes that died (kill -9) before cleaning up, except those whose
// commit the workspace's recovery must finish. It returns a note per
// removed run.
func sweepAbandoned(stateDir string) []string {
	runs := filepath.Join(stateDir, "runs")
	entries, err := os.ReadDir(runs)
	if err != nil {
		return nil
	}
	var notes []string
	for _, e := range entries {
		d := runDir{path: filepath.Join(runs, e.Name())}
		owner, err := os.ReadFile(filepath.Join(d.path, "owner"))
		switch {
		case errors.Is(err, fs.ErrNotExist):
			// Being made (its owner file follows before anything
			// that may take long: reserveRunDir), or its maker died
			// in between.
			if info, err := e.Info(); err != nil || time.Since(info.ModTime()) < abandonedAfter {
				continue
			}
		case err != nil:
			continue // not ours to read
		default:
			if !abandoned(d, string(owner)) {
				continue
			}
		}
		if txn, err := os.ReadFile(filepath.Join(d.path, committingMarker)); err == nil {
			if j, err := overlay.ReadJournal(string(txn)); err == nil && j.State == overlay.StateApplying {
				continue // the workspace's recovery needs this upper dir
			}
		}
		err = d.removeAbandoned()
		if err != nil {
			notes = append(notes, fmt.Sprintf("could not clean up abandoned run %s: %v", e.Name(), err))
		} else {
			notes = append(notes, fmt.Sprintf("cleaned up run %s, abandoned by a neonbox-ns (or its teardown helper) that died", e.Name()))
		}
	}
	return notes
}

// addOwner adds the identity of another owner, the teardown helper that
// takes over the run's cleanup from this process, to the owner file. One
// small append: a reader sees the file before or after it, and this
// process, alive until it returns, is an owner either way.
func (d runDir) addOwner(identity string) error {
	return linux.WriteFile(filepath.Join(d.path, "owner"), []byte("\n"+identity), unix.O_APPEND|unix.O_NOFOLLOW, 0)
}

// abandoned reports whether the run dir d, whose owner file read owner,
// was left by owners that died: none of them is alive, and neither is
// any the file names when read again now. An owner may have added one
// (neonbox-ns adds its teardown helper) between the first read and its
// death; owners remove the file before they exit, so one gone by now
// was the last owner's cleanup, not an abandoned run.
func abandoned(d runDir, owner string) bool {
	if ownerAlive(owner) {
		return false
	}
	now, err := os.ReadFile(filepath.Join(d.path, "owner"))
	return err == nil && !ownerAlive(string(now))
}

// ownerAlive reports whether any process named in an owner file (a line
// each, see writeOwner) is alive. An unreadable owner counts as alive:
// the run dir is not known to be abandoned.
func ownerAlive(owner string) bool {
	self := selfIdentity()
	for _, line := range strings.Split(owner, "\n") {
		var pid int
		if line == self {
			return true // this process (a sweep meets its own run dir), without a read of /proc
		}
		if _, err := fmt.Sscanf(line, "%d", &pid); err != nil || processIdentity(pid) == line {
			return true
		}
	}
	return false
}

// discardUpper throws the run's changes away: that is the rollback.
func (d runDir) discardUpper() error {
	return linux.RemoveAll(d.upper())
}

// removeAbandoned removes the cgroup and then the run dir of a run whose
// neonbox-ns died.
func (d runDir) removeAbandoned() error {
	return d.removeAfterCgroup(cgroup.RemoveStale("run-" + filepath.Base(d.path)))
}

// removeAfterCgroup removes the run dir once the run's cgroup is gone
// (cgErr is nil), and returns both errors.
func (d runDir) removeAfterCgroup(cgErr error) error {
	return errors.Join(cgErr, d.removeAfter(func() error { return cgErr }))
}

// remove deletes the run directory. It never removes through a mount
// point (linux.RemoveAll): that would delete what is mounted there.
func (d runDir) remove() error { return d.removeAfter(nil) }

// removeAfter is remove, but for the owner file (the mark by which a
// later run cleans up what this one left): that goes with the directory
// itself once others (the removal of the run's cgroup) has returned nil.
// After an error the run dir stays, for a later run to try again.
func (d runDir) removeAfter(others func() error) error {
	if d.path == "" {
		return nil
	}
	// A --disk run dir is a tmpfs of its own: unmount it first (its
	// contents go with it).
	if mountRoot(d.path) {
		if err := linux.Unmount(d.path, 0); err != nil {
			return err
		}
	}
	entries, err := os.ReadDir(d.path)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	for _, e := range entries {
		if e.Name() != "owner" {
			if err := linux.RemoveAll(filepath.Join(d.path, e.Name())); err != nil {
				return err
			}
		}
	}
	if others != nil && others() != nil {
		return nil // others reports its own error
	}
	// Only the owner file is left, normally: two unlinks, not a walk.
	err = os.Remove(filepath.Join(d.path, "owner"))
	if err == nil || errors.Is(err, fs.ErrNotExist) {
		if err = unix.Rmdir(d.path); err == nil || err == unix.ENOENT {
			return nil
		}
	}
	return linux.RemoveAll(d.path)
}

// mountRoot reports whether p is the root of a mount.
func mountRoot(p string) bool {
	var st unix.Statx_t
	err := unix.Statx(unix.AT_FDCWD, p, unix.AT_SYMLINK_NOFOLLOW, 0, &st)
	return err == nil && st.Attributes_mask&unix.STATX_ATTR_MOUNT_ROOT != 0 && st.Attributes&unix.STATX_ATTR_MOUNT_ROOT != 0
}

// full reports whether the run dir's filesystem (a --disk tmpfs) has no
// room or no inodes left.
func (d runDir) full() bool {
	var st unix.Statfs_t
	return unix.Statfs(d.path, &st) == nil && (st.Bavail == 0 || st.Ffree == 0)
}
