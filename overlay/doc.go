// Package overlay turns what a run wrote through overlayfs into changes to
// the workspace.
//
// A run sees the workspace through an overlay mount: the workspace is the
// lower layer, writes land in an upper directory. When the run ends the
// upper directory holds the whole change set in overlayfs's own format
// (Documentation/filesystems/overlayfs.rst in the kernel tree):
//
//   - a new or changed file, directory or symlink is a plain entry;
//   - a deletion is a whiteout: a character device 0/0;
//   - a directory that replaces a lower one is opaque: it carries the
//     user.overlay.opaque=y xattr (mounts use userxattr, so overlay's
//     markers live in the user.overlay. namespace, and xattrs the run itself
//     set in that namespace are stored escaped as user.overlay.overlay.*).
//
// Committing is two steps. Plan walks the upper directory against the
// workspace and returns the operations and the change list, touching
// nothing; it needs no privilege, so it is tested on fixture trees. Apply
// then carries the plan out on the real directories, resolving every path
// beneath its root without following symlinks, moving entries with
// rename(2) where both sides share a filesystem. Rolling back is throwing
// the upper directory away.
package overlay
