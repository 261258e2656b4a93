package nsjail

import (
	"os"
	"path/filepath"
	"sync"
)

// The host paths the jail sees, read-only. /bin, /lib and the like are
// symlinks into /usr on merged-/usr systems; they are recreated as
// symlinks rather than bound.
var systemPaths = []string{"/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc"}

// Files under /etc hidden behind /dev/null even though they are unreadable
// to the jail's ids anyway: defence in depth against a permissive host.
var maskedGlobs = []string{
	"/etc/shadow", "/etc/shadow-", "/etc/gshadow", "/etc/gshadow-",
	"/etc/security/opasswd", "/etc/ssh/ssh_host_*_key",
}

type systemView struct {
	readOnly []string
	symlinks []symlink
	masked   []string
	// procDirs are the masked /proc entries that are directories on
	// this kernel (the jail's procfs shows the same kernel).
	procDirs map[string]bool
}

var (
	viewOnce   sync.Once
	cachedView systemView
)

// hostView describes the host's system directories once per process.
func hostView() systemView {
	viewOnce.Do(func() {
		for _, p := range systemPaths {
			st, err := os.Lstat(p)
			switch {
			case err != nil:
			case st.Mode()&os.ModeSymlink != 0:
				if t, err := os.Readlink(p); err == nil {
					cachedView.symlinks = append(cachedView.symlinks, symlink{Path: p, Target: t})
				}
			case st.IsDir():
				cachedView.readOnly = append(cachedView.readOnly, p)
			}
		}
		cachedView.procDirs = map[string]bool{}
		for _, name := range procMasked {
			if st, err := os.Lstat(filepath.Join("/proc", name)); err == nil && st.IsDir() {
				cachedView.procDirs[name] = true
			}
		}
		for _, g := range maskedGlobs {
			matches, _ := filepath.Glob(g)
			for _, m := range matches {
				if st, err := os.Lstat(m); err == nil && st.Mode().IsRegular() {
					cachedView.masked = append(cachedView.masked, m)
				}
			}
		}
	})
	return cachedView
}
