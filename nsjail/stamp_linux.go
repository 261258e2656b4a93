package nsjail

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"time"

	"golang.org/x/sys/unix"

	"github.com/neonbox/neonbox-ns/internal/jailinit"
	"github.com/neonbox/neonbox-ns/internal/linux"
)

// The base of a jail's program (baseProgram) depends on the state dir, on
// whether the jail has network, and on the host: its system directories
// and masked files (hostView's survey) and its kernel's /proc. A run that
// surveyed, built the base and compared it with the one the prestart
// queued (jailinit.BaseFile) paid 0.3 ms of a cold start for it. So the
// run whose base the state dir holds (written by it, or queued and equal
// to its own) also records, in baseStampFile, the base's
// hash and a stamp of what the survey looks at (hostStamp); a later run
// whose host stamps the same, with that very base queued, takes the base
// as its own without surveying.
const baseStampFile = "prestart-base.stamp"

// stampedDirs are the directories whose entries the survey looks at:
// those of systemPaths and maskedGlobs ("/", "/etc", "/etc/security",
// "/etc/ssh"). A directory's mtime and ctime change when an entry is
// added, removed or replaced (renamed over), and its ctime cannot be set
// back.
var stampedDirs = parentDirs(slices.Concat(systemPaths, maskedGlobs))

// parentDirs lists the directories of paths, each once, in order.
func parentDirs(paths []string) []string {
	var dirs []string
	for _, p := range paths {
		if d := filepath.Dir(p); !slices.Contains(dirs, d) {
			dirs = append(dirs, d)
		}
	}
	return dirs
}

// racyWindow: the kernel's file times are coarse, so a directory that
// changed this recently may change again without its times changing.
// hostStamp gives no stamp then.
var racyWindow = 2 * time.Second

// hostStamp stamps what the survey looks at: the binary (the base's
// header names it too), the kernel's boot id, the type of each masked
// /proc entry (a module loaded since boot adds /proc/scsi or
// /proc/asound), and the device, inode, mtime and ctime of each of
// stampedDirs (or that it is absent). ok is false where one of those
// directories changed within racyWindow, or something cannot be read.
func hostStamp() (stamp [sha256.Size]byte, ok bool) {
	h := sha256.New()
	h.Write([]byte("neonbox-host-stamp-2\x00"))
	self, err := jailinit.BaseHeader()
	if err != nil {
		return stamp, false
	}
	h.Write(self)
	boot, err := linux.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		return stamp, false
	}
	h.Write(boot)
	for _, name := range procMasked {
		var st unix.Stat_t
		switch err := unix.Lstat("/proc/"+name, &st); {
		case errors.Is(err, unix.ENOENT):
			fmt.Fprintf(h, "%s\x00absent\x00", name)
		case err != nil:
			return stamp, false
		default:
			fmt.Fprintf(h, "%s\x00%o\x00", name, st.Mode&unix.S_IFMT)
		}
	}
	recent := time.Now().Add(-racyWindow).UnixNano()
	for _, d := range stampedDirs {
		var st unix.Stat_t
		err := unix.Stat(d, &st)
		switch {
		case errors.Is(err, unix.ENOENT):
			fmt.Fprintf(h, "%s\x00absent\x00", d)
			continue
		case err != nil:
			return stamp, false
		case st.Mtim.Nano() >= recent || st.Ctim.Nano() >= recent:
			return stamp, false
		}
		fmt.Fprintf(h, "%s\x00%d:%d:%d:%d\x00", d, st.Dev, st.Ino, st.Mtim.Nano(), st.Ctim.Nano())
	}
	copy(stamp[:], h.Sum(nil))
	return stamp, true
}

// stampedBase reports whether the state dir's baseStampFile names base
// for a host stamped host (the file read only if this user owns it and
// nobody else may write it).
func stampedBase(stateDir string, base []byte, host [sha256.Size]byte) bool {
	b, err := linux.ReadOwnFile(filepath.Join(stateDir, baseStampFile), 2*sha256.Size)
	if err != nil || len(b) != 2*sha256.Size {
		return false
	}
	sum := sha256.Sum256(base)
	return bytes.Equal(b[:sha256.Size], sum[:]) && bytes.Equal(b[sha256.Size:], host[:])
}

// writeBaseStamp records that base was built on a host stamped host,
// whole or not at all.
func writeBaseStamp(stateDir string, base []byte, host [sha256.Size]byte) error {
	sum := sha256.Sum256(base)
	return linux.WriteFileAtomic(stateDir, baseStampFile, append(sum[:], host[:]...))
}
