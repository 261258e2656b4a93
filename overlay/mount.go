package overlay

import (
	"fmt"
	"strings"
)

// MountData returns the mount(2) data string for an overlay of upper on
// lower, with work as overlay's work directory.
//
// The options are fixed by what a jailed, rollback-able workspace needs:
//   - userxattr: the mount is made inside a user namespace, where overlay
//     must keep its markers in user.overlay.* (trusted.* is unavailable);
//   - redirect_dir=nofollow, metacopy=off: every change is self-contained in
//     upper, which a commit can apply without reading lower again
//     (userxattr refuses redirect_dir=on anyway, so renaming a lower
//     directory gives EXDEV and tools fall back to copying);
//   - index=off, xino=off: no cross-layer inode bookkeeping to carry over;
//   - uuid=off, where lower and upper are on one filesystem (oneFS): no
//     persistent uuid, which overlay (6.6+, uuid=auto) would otherwise
//     write into each fresh upper dir's root as an xattr at mount, for
//     file handles that index=off without NFS export never uses (5.11+
//     take the option; over two filesystems the kernel ignores it, with
//     a warning in its log at every mount);
//   - volatile: overlay skips syncing the upper directory; a rollback
//     throws it away and a commit makes its own changes durable.
func MountData(lower, upper, work string, oneFS bool) (string, error) {
	for _, p := range []string{lower, upper, work} {
		if err := CheckOptionPath(p); err != nil {
			return "", err
		}
	}
	uuid := ""
	if oneFS {
		uuid = ",uuid=off"
	}
	return "lowerdir=" + lower + ",upperdir=" + upper + ",workdir=" + work +
		",userxattr,redirect_dir=nofollow,metacopy=off,index=off,xino=off" + uuid + ",volatile", nil
}

// CheckOptionPath refuses paths that overlay's option parser would split
// or unescape.
func CheckOptionPath(p string) error {
	if p == "" || p[0] != '/' {
		return fmt.Errorf("overlay layer path %q is not absolute", p)
	}
	if strings.ContainsAny(p, ",:\\\n") {
		return fmt.Errorf("overlay layer path %q contains one of , : \\ or a newline", p)
	}
	return nil
}
