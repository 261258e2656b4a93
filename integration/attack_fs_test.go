package integration

// Containment tests: escaping the filesystem view, during the run and
// through the commit that follows it. See attack_test.go.

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/neonbox/neonbox-ns/internal/testutil"
)

// Writes anywhere but the workspace and the private /tmp fail, and none
// reaches the host.
func TestAttackWriteOutsideWorkspace(t *testing.T) {
	e := newEnv(t)
	name := "neonbox-attack-" + attackToken(t)
	dirs := []string{"/", "/etc", "/usr", "/usr/local/bin", "/bin", "/lib", "/home", "/root", "/var", "/run", "/dev", "/proc", "/proc/1"}
	r := e.attackPy(t, attackOpts{}, fmt.Sprintf(`
name = %q
for d in %s:
    attempt("create " + d, lambda: os.close(os.open(os.path.join(d, name), os.O_CREAT | os.O_WRONLY, 0o644)))
    attempt("mkdir " + d, lambda: os.mkdir(os.path.join(d, name + ".d")))
for d in ["/tmp", "/dev/shm"]:
    attempt("private " + d, lambda: open(os.path.join(d, name), "w").write("jail only"))
`, name, pyList(dirs)))
	for _, d := range dirs {
		assertDenied(t, r, "create "+d, "mkdir "+d)
		assertAbsent(t, filepath.Join(d, name))
		assertAbsent(t, filepath.Join(d, name+".d"))
	}
	// /tmp and /dev/shm are the jail's own: writable there, never on
	// the host.
	kv := r.kv()
	assert.Equal(t, "OK", kv["private /tmp"], "the jail's /tmp is writable")
	assertAbsent(t, filepath.Join("/tmp", name))
	assertAbsent(t, filepath.Join("/dev/shm", name))
	entries, err := os.ReadDir(e.ws)
	require.NoError(t, err)
	assert.Empty(t, entries)
}

// `..` from the workspace leads to the jail's own tmpfs (the workspace's
// ancestors are recreated there), never to the host's directories.
func TestAttackDotDotTraversal(t *testing.T) {
	e := newEnv(t)
	outside := e.outsideDir(t)
	base := filepath.Dir(e.ws)
	r := e.attackPy(t, attackOpts{}, fmt.Sprintf(`
attempt("parent_file", lambda: open("../escaped", "w").write("x"))
attempt("sibling_dir", lambda: open("../outside/escaped", "w").write("x"))
attempt("sibling_dir_mkdir", lambda: (os.makedirs("../outside", exist_ok=True), open("../outside/escaped", "w").write("x")))
attempt("deep_dotdot", lambda: open("../../../../../../../../../../.." + %q + "/deep", "w").write("x"))
attempt("proc_cwd", lambda: open("/proc/self/cwd/../escaped2", "w").write("x"))
attempt("proc_root", lambda: open("/proc/1/root/../../" + %q + "/rooted", "w").write("x"))
`, base, base))
	t.Logf("in-jail results (the jail's own tmpfs may accept some): %v", r.kv())
	assert.Equal(t, "SUCCESS", r.status())
	assertEmptyDir(t, outside)
	for _, p := range []string{"escaped", "escaped2", "deep", "rooted"} {
		assertAbsent(t, filepath.Join(base, p))
	}
	entries, err := os.ReadDir(e.ws)
	require.NoError(t, err)
	assert.Empty(t, entries, "nothing was committed into the workspace")
}

// Symlinks in the workspace, planted before the run or made by it, only
// redirect within the jail's view; the commit never writes through them.
func TestAttackSymlinkOutOfWorkspace(t *testing.T) {
	e := newEnv(t)
	outside := e.outsideDir(t)
	require.NoError(t, os.Symlink("../outside", filepath.Join(e.ws, "planted-rel")))
	require.NoError(t, os.Symlink(outside, filepath.Join(e.ws, "planted-abs")))
	require.NoError(t, os.Symlink("/etc", filepath.Join(e.ws, "planted-etc")))
	name := "pwn-" + attackToken(t)
	r := e.attackPy(t, attackOpts{}, fmt.Sprintf(`
name = %q
os.makedirs(%q, exist_ok=True)  # the jail's view of the sibling dir
attempt("planted_rel", lambda: open("planted-rel/" + name, "w").write("x"))
attempt("planted_abs", lambda: open("planted-abs/" + name, "w").write("x"))
attempt("planted_etc", lambda: open("planted-etc/" + name, "w").write("x"))
os.symlink("../outside", "made-rel")
os.symlink(%q, "made-abs")
os.symlink("/etc/" + name, "made-dangling")
attempt("made_rel", lambda: open("made-rel/" + name, "w").write("x"))
attempt("made_abs_sub", lambda: (os.makedirs("made-abs/sub", exist_ok=True), open("made-abs/sub/" + name, "w").write("x")))
attempt("made_dangling", lambda: open("made-dangling", "w").write("x"))
`, name, outside, outside))
	assert.Equal(t, "SUCCESS", r.status(), r.stdout)
	assertDenied(t, r, "planted_etc", "made_dangling")
	assert.Equal(t, true, r.rec["committed"])
	assertEmptyDir(t, outside)
	assertAbsent(t, filepath.Join("/etc", name))
	for link, target := range map[string]string{
		"planted-rel": "../outside", "planted-abs": outside, "planted-etc": "/etc",
		"made-rel": "../outside", "made-abs": outside, "made-dangling": "/etc/" + name,
	} {
		got, err := os.Readlink(filepath.Join(e.ws, link))
		if assert.NoError(t, err, "%s is committed as a symlink", link) {
			assert.Equal(t, target, got)
		}
	}
}

// A directory replaced by a symlink to outside, with files written
// "below" it: the commit must not write through the symlink.
func TestAttackDirectorySwap(t *testing.T) {
	e := newEnv(t)
	outside := e.outsideDir(t)
	require.NoError(t, os.MkdirAll(filepath.Join(e.ws, "d", "sub"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(e.ws, "d", "sub", "f"), []byte("old\n"), 0o644))
	r := e.attack(t, attackOpts{}, "sh", "-c", fmt.Sprintf(`
mkdir -p %[1]q
# A directory that existed before the run.
rm -rf d && ln -s ../outside d && mkdir -p d/sub && echo pwn > d/sub/f && echo pwn > d/new
# A directory made, filled and swapped during the run.
mkdir n && echo a > n/a && mv n n.old && ln -s %[1]q n && echo pwn > n/a && mkdir n/deeper && echo pwn > n/deeper/x
ls -la %[1]q >&2
true`, outside))
	require.Equal(t, "SUCCESS", r.status(), r.stdout)
	assert.Equal(t, true, r.rec["committed"])
	assertEmptyDir(t, outside)
	for link, target := range map[string]string{"d": "../outside", "n": outside} {
		got, err := os.Readlink(filepath.Join(e.ws, link))
		if assert.NoError(t, err, "%s is committed as a symlink", link) {
			assert.Equal(t, target, got)
		}
	}
	b, err := os.ReadFile(filepath.Join(e.ws, "n.old", "a"))
	require.NoError(t, err)
	assert.Equal(t, "a\n", string(b))
}

// link(2) from the read-only system binds or the private /tmp into the
// workspace fails (EXDEV); a workspace file hard-linked to a host file
// outside is replaced by the commit, never written through.
func TestAttackHardLinks(t *testing.T) {
	e := newEnv(t)
	outside := e.outsideDir(t)
	target := filepath.Join(outside, "target")
	require.NoError(t, os.WriteFile(target, []byte("host data\n"), 0o644))
	require.NoError(t, os.Link(target, filepath.Join(e.ws, "hl")))
	r := e.attackPy(t, attackOpts{}, fmt.Sprintf(`
attempt("link_etc_passwd", lambda: os.link("/etc/passwd", "passwd"))
attempt("link_usr_bin", lambda: os.link(os.path.realpath("/usr/bin/python3"), "py"))
open("/tmp/t", "w").write("t")
attempt("link_tmp", lambda: os.link("/tmp/t", "t"))
fd = os.open("/etc/passwd", os.O_PATH)
report("linkat_empty_path", sc(%d, fd, b"", -100, b"passwd2", 0x1000))
attempt("linkat_proc_fd", lambda: os.link("/proc/self/fd/%%d" %% fd, "passwd3", follow_symlinks=True))
with open("hl", "a") as f:
    f.write("written in the jail\n")
`, unix.SYS_LINKAT))
	require.Equal(t, "SUCCESS", r.status(), r.stdout)
	assertDenied(t, r, "link_etc_passwd", "link_usr_bin", "link_tmp", "linkat_empty_path", "linkat_proc_fd")
	for _, n := range []string{"passwd", "passwd2", "passwd3", "py", "t"} {
		assertAbsent(t, filepath.Join(e.ws, n))
	}
	b, err := os.ReadFile(target)
	require.NoError(t, err)
	assert.Equal(t, "host data\n", string(b), "the host file linked from the workspace is untouched")
	b, err = os.ReadFile(filepath.Join(e.ws, "hl"))
	require.NoError(t, err)
	assert.Equal(t, "host data\nwritten in the jail\n", string(b))
}

// Device nodes cannot be made; FIFOs and sockets can, but a run that
// leaves one is refused at commit and rolled back whole.
func TestAttackSpecialFiles(t *testing.T) {
	t.Run("mknod", func(t *testing.T) {
		e := newEnv(t)
		r := e.attackPy(t, attackOpts{}, `
attempt("char_mem", lambda: os.mknod("mem", 0o20666, os.makedev(1, 1)))
attempt("char_null", lambda: os.mknod("null", 0o20666, os.makedev(1, 3)))
attempt("block_vda", lambda: os.mknod("vda", 0o60666, os.makedev(254, 0)))
attempt("whiteout", lambda: os.mknod("whiteout", 0o20000, os.makedev(0, 0)))
attempt("char_in_tmp", lambda: os.mknod("/tmp/mem", 0o20666, os.makedev(1, 1)))
`)
		assertDenied(t, r, "char_mem", "char_null", "block_vda", "whiteout", "char_in_tmp")
		entries, err := os.ReadDir(e.ws)
		require.NoError(t, err)
		assert.Empty(t, entries)
	})
	for name, script := range map[string]string{
		"fifo":   `os.mkfifo("pipe")`,
		"socket": `import socket; s = socket.socket(socket.AF_UNIX); s.bind("sock")`,
		"nested": `os.makedirs("a/b"); os.mkfifo("a/b/pipe")`,
	} {
		t.Run(name, func(t *testing.T) {
			e := newEnv(t)
			require.NoError(t, os.WriteFile(filepath.Join(e.ws, "keep"), []byte("keep\n"), 0o644))
			before := testutil.Snapshot(t, e.ws)
			r := e.attackPy(t, attackOpts{}, `
open("legit", "w").write("legit")
os.remove("keep")
`+script)
			assert.Equal(t, 123, r.code)
			assert.Equal(t, "SECURITY_VIOLATION", r.status())
			assert.Equal(t, false, r.rec["committed"])
			assert.Equal(t, true, r.rec["rollback_performed"])
			assert.Equal(t, before, testutil.Snapshot(t, e.ws), "the workspace is unchanged")
		})
	}
}

// mount, umount, pivot_root, chroot and the new mount API all fail, and
// the masks stay in place.
func TestAttackMountFamily(t *testing.T) {
	e := newEnv(t)
	r := e.attackPy(t, attackOpts{}, fmt.Sprintf(`
os.makedirs("/tmp/m", exist_ok=True)
report("mount_tmpfs", sc(%[1]d, b"none", b"/tmp/m", b"tmpfs", 0, None))
report("mount_proc", sc(%[1]d, b"proc", b"/tmp/m", b"proc", 0, None))
report("bind_root", sc(%[1]d, b"/", b"/tmp/m", None, 0x1000 | 0x4000, None))
report("remount_usr_rw", sc(%[1]d, None, b"/usr", None, 0x20 | 0x1000, None))
report("umount_shadow", sc(%[2]d, b"/etc/shadow", 2))
report("umount_proc_keys", sc(%[2]d, b"/proc/keys", 2))
report("umount_proc_sys", sc(%[2]d, b"/proc/sys", 2))
report("pivot_root", sc(%[3]d, b"/tmp", b"/tmp/m"))
report("chroot", sc(%[4]d, b"/tmp"))
report("open_tree", sc(%[5]d, -100, b"/", 1))
report("fsopen", sc(%[6]d, b"tmpfs", 0))
report("fspick", sc(%[7]d, -100, b"/usr", 0))
report("move_mount", sc(%[8]d, -100, b"/tmp", -100, b"/tmp/m", 0))
report("mount_setattr", sc(%[9]d, -100, b"/usr", 0, None, 0))
report("unshare_mount", sc(%[10]d, 0x20000))
report("umount_cmd", "OK" if os.system("umount /proc/keys 2>/dev/null") == 0 else "FAILED")
report("keys_still_masked", "OK" if open("/proc/keys").read() == "" else "UNMASKED")
`, unix.SYS_MOUNT, unix.SYS_UMOUNT2, unix.SYS_PIVOT_ROOT, unix.SYS_CHROOT, unix.SYS_OPEN_TREE, unix.SYS_FSOPEN,
		unix.SYS_FSPICK, unix.SYS_MOVE_MOUNT, unix.SYS_MOUNT_SETATTR, unix.SYS_UNSHARE))
	assertDenied(t, r, "mount_tmpfs", "mount_proc", "bind_root", "remount_usr_rw", "umount_shadow", "umount_proc_keys",
		"umount_proc_sys", "pivot_root", "chroot", "open_tree", "fsopen", "fspick", "move_mount", "mount_setattr", "unshare_mount", "umount_cmd")
	assert.Equal(t, "OK", r.kv()["keys_still_masked"])
}

// CVE-2019-5736 class: the jail must not reach the neonbox-ns binary (or
// any host binary it runs) for writing.
func TestAttackOverwriteHostBinary(t *testing.T) {
	e := newEnv(t)
	python, err := filepath.EvalSymlinks("/usr/bin/python3")
	require.NoError(t, err)
	before := map[string]string{binary: sha256File(t, binary), python: sha256File(t, python)}
	r := e.attackPy(t, attackOpts{}, fmt.Sprintf(`
import glob
attempt("self_exe_wronly", lambda: os.open("/proc/self/exe", os.O_WRONLY))
attempt("self_exe_rdwr", lambda: os.open("/proc/self/exe", os.O_RDWR))
attempt("pid1_exe_trunc", lambda: os.open("/proc/1/exe", os.O_WRONLY | os.O_TRUNC))
attempt("python_rdwr", lambda: os.open(os.path.realpath("/usr/bin/python3"), os.O_RDWR))
attempt("neonbox_path", lambda: os.open(%q, os.O_WRONLY))
attempt("reopen_via_fd", lambda: os.open("/proc/self/fd/%%d" %% os.open("/proc/self/exe", os.O_RDONLY), os.O_WRONLY))
report("pid1_exe", os.readlink("/proc/1/exe"))
links = glob.glob("/proc/[0-9]*/exe") + glob.glob("/proc/[0-9]*/map_files/*")
report("links_seen", len(links))
for p in links:
    try:
        if "neonbox" in os.readlink(p):
            report("neonbox_link " + p, os.readlink(p))
    except OSError:
        pass
`, binary))
	assertDenied(t, r, "self_exe_wronly", "self_exe_rdwr", "pid1_exe_trunc", "python_rdwr", "neonbox_path", "reopen_via_fd")
	kv := r.kv()
	assert.Equal(t, python, kv["pid1_exe"], "the jail's pid 1 is CMD")
	assert.NotEqual(t, "0", kv["links_seen"])
	for k, v := range kv {
		assert.False(t, strings.HasPrefix(k, "neonbox_link "), "%s -> %s: the neonbox-ns binary is reachable from the jail", k, v)
	}
	for p, sum := range before {
		assert.Equal(t, sum, sha256File(t, p), "%s changed", p)
	}
}

// A file descriptor the caller of neonbox-ns left open without
// close-on-exec must not reach CMD: a directory fd is a way out of the
// mount namespace (openat relative to it, "..", up to the host's root),
// as runc's CVE-2024-21626 showed with a leaked cgroup fd.
func TestAttackInheritedDescriptor(t *testing.T) {
	e := newEnv(t)
	outside := e.outsideDir(t)
	hostMarker := "host-only-" + attackToken(t)
	require.NoError(t, os.WriteFile(filepath.Join(filepath.Dir(e.ws), hostMarker), nil, 0o644))
	dirFD, err := unix.Open(outside, unix.O_RDONLY|unix.O_DIRECTORY, 0) // no O_CLOEXEC: as a careless caller would
	require.NoError(t, err)
	dir := os.NewFile(uintptr(dirFD), outside)
	defer dir.Close()
	secretPath := filepath.Join(outside, "caller-log")
	require.NoError(t, os.WriteFile(secretPath, []byte("caller's private log\n"), 0o600))
	file, err := os.OpenFile(secretPath, os.O_RDWR, 0)
	require.NoError(t, err)
	defer file.Close()
	// nil entries are closed in neonbox-ns, so the leaked fds land
	// above the ones neonbox-ns hands its own child (3).
	o := attackOpts{extraFiles: []*os.File{nil, nil, nil, nil, dir, file}}
	r := e.attackPy(t, o, fmt.Sprintf(`
import stat
fds = sorted(int(f) for f in os.listdir("/proc/self/fd"))
for fd in fds:
    try:
        report("fd%%d" %% fd, os.readlink("/proc/self/fd/%%d" %% fd))
    except OSError as e:
        report("fd%%d" %% fd, en(e.errno))
for fd in fds:
    if fd < 3:
        continue
    try:
        st = os.fstat(fd)
    except OSError:
        continue
    if stat.S_ISDIR(st.st_mode):
        attempt("escape_write_fd%%d" %% fd, lambda: os.close(os.open("pwned", os.O_CREAT | os.O_WRONLY, 0o644, dir_fd=fd)))
        attempt("escape_up_fd%%d" %% fd, lambda: report("host_listing", os.listdir(os.open("..", os.O_RDONLY, dir_fd=fd))))
    elif stat.S_ISREG(st.st_mode):
        attempt("escape_file_fd%%d" %% fd, lambda: report("file_content", repr(os.pread(fd, 100, 0))))
`))
	fds := []string{}
	for k, v := range r.kv() {
		open := strings.HasPrefix(v, "/") || strings.Contains(v, ":[")
		if strings.HasPrefix(k, "fd") && k != "fd0" && k != "fd1" && k != "fd2" && open && !strings.HasPrefix(v, "/proc/") {
			fds = append(fds, k+" -> "+v)
		}
	}
	assert.Empty(t, fds, "descriptors beyond stdio reached CMD")
	assert.NotContains(t, r.out(), hostMarker, "the jail listed a host directory")
	assert.NotContains(t, r.out(), "caller's private log", "the jail read a host file through a leaked fd")
	assertAbsent(t, filepath.Join(outside, "pwned"))
}

// setuid/setgid bits and file capabilities never reach the workspace: a
// jailed root must not plant a setuid-root binary for the host.
func TestAttackSetuidCommit(t *testing.T) {
	e := newEnv(t)
	r := e.attackPy(t, attackOpts{}, `
import shutil
shutil.copy("/usr/bin/id", "suid")
os.chmod("suid", 0o6755)
report("mode_in_jail", oct(os.stat("suid").st_mode & 0o7777))
# vfs_cap_data revision 2, effective: every capability permitted.
cap = b"\x01\x00\x00\x02" + (b"\xff\xff\xff\xff" + b"\x00" * 4) * 2
attempt("set_file_caps", lambda: os.setxattr("suid", "security.capability", cap))
attempt("set_trusted_xattr", lambda: os.setxattr("suid", "trusted.overlay.redirect", b"/etc"))
attempt("chown_host_root_ids", lambda: os.chown("suid", 65536, 65536))
`)
	require.Equal(t, "SUCCESS", r.status(), r.stdout)
	assert.Equal(t, "0o6755", r.kv()["mode_in_jail"], "the attack could set the bits in the jail")
	assertDenied(t, r, "set_file_caps", "set_trusted_xattr", "chown_host_root_ids")
	st, err := os.Stat(filepath.Join(e.ws, "suid"))
	require.NoError(t, err)
	assert.Zero(t, st.Mode()&(os.ModeSetuid|os.ModeSetgid), "committed with mode %v", st.Mode())
	caps, err := unix.Lgetxattr(filepath.Join(e.ws, "suid"), "security.capability", make([]byte, 64))
	assert.True(t, err != nil || caps == 0, "file capabilities were committed")
}

// Overlay markers a run sets on workspace entries (stored escaped in the
// upper dir, restored by the commit) do not redirect the next run's view.
func TestAttackPlantedOverlayMarkers(t *testing.T) {
	e := newEnv(t)
	require.NoError(t, os.MkdirAll(filepath.Join(e.ws, "d"), 0o755))
	require.NoError(t, os.MkdirAll(filepath.Join(e.ws, "e"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(e.ws, "d", "f"), []byte("d's file\n"), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(e.ws, "e", "g"), []byte("e's file\n"), 0o644))
	r := e.attackPy(t, attackOpts{}, `
for k, v in [("user.overlay.redirect", b"/e"), ("user.overlay.opaque", b"y"), ("user.overlay.metacopy", b""), ("user.overlay.origin", b"\x00\xfb")]:
    attempt("set " + k, lambda: os.setxattr("d", k, v))
os.mkdir("w")
open("w/x", "w").write("x")
attempt("opaque_x", lambda: os.setxattr("w", "user.overlay.opaque", b"x"))
attempt("whiteout", lambda: os.setxattr("w/x", "user.overlay.whiteout", b""))
`)
	require.Equal(t, "SUCCESS", r.status(), r.stdout)
	r = e.attack(t, attackOpts{}, "sh", "-c", "cat d/f; ls d; ls w; cat d/g 2>/dev/null || echo no-g")
	require.Equal(t, "SUCCESS", r.status(), r.stdout)
	assert.Equal(t, "d's file\nf\nx\nno-g\n", r.out(), "the next run sees the workspace as it is")
}

// pyList renders strings as a Python list literal.
func pyList(items []string) string {
	q := make([]string, len(items))
	for i, s := range items {
		q[i] = fmt.Sprintf("%q", s)
	}
	return "[" + strings.Join(q, ", ") + "]"
}

// The commit gate protects .git/hooks and .git/config so that a run
// cannot make the host's next git command run code of its choosing. Git
// also takes config and hooks from the directory named in .git/commondir:
// planting that file must be caught as well.
func TestAttackProtectedGitBypass(t *testing.T) {
	git, err := exec.LookPath("git")
	if err != nil {
		t.Skip("git is not installed")
	}
	setup := func(t *testing.T) (env, string) {
		e := newEnv(t)
		outside := e.outsideDir(t)
		hostGit(t, git, e.ws, "init", "-q", ".")
		hostGit(t, git, e.ws, "-c", "user.email=a@b", "-c", "user.name=n", "commit", "-q", "--allow-empty", "-m", "init")
		return e, outside
	}
	evilConfig := func(outside string) string {
		return fmt.Sprintf(`[core]\n\trepositoryformatversion = 0\n\tfsmonitor = "touch %s/pwned; false"\n`, outside)
	}

	t.Run("config-is-protected", func(t *testing.T) {
		e, outside := setup(t)
		r := e.attack(t, attackOpts{}, "sh", "-c", fmt.Sprintf(`printf '%s' >> .git/config`, evilConfig(outside)))
		assert.Equal(t, "SECURITY_VIOLATION", r.status())
		hostGit(t, git, e.ws, "status")
		assertEmptyDir(t, outside)
	})

	t.Run("commondir", func(t *testing.T) {
		e, outside := setup(t)
		r := e.attack(t, attackOpts{}, "sh", "-c", fmt.Sprintf(`set -e
mkdir evil
cp -r .git/objects .git/refs .git/HEAD evil/
printf '%s' > evil/config
echo ../evil > .git/commondir`, evilConfig(outside)))
		t.Logf("status %s, protected_paths_touched %v", r.status(), r.rec["protected_paths_touched"])
		hostGit(t, git, e.ws, "status")
		assertEmptyDir(t, outside)
		assert.Equal(t, "SECURITY_VIOLATION", r.status(), "a run redirected the repository's config and hooks and was committed")
	})
}

// hostGit runs git on the host in dir, as the user would after a run.
func hostGit(t *testing.T, git, dir string, args ...string) {
	t.Helper()
	cmd := exec.Command(git, args...)
	cmd.Dir = dir
	cmd.Env = []string{"PATH=/usr/bin:/bin", "HOME=" + t.TempDir(), "GIT_CONFIG_NOSYSTEM=1"}
	out, err := cmd.CombinedOutput()
	t.Logf("git %s: %v %s", strings.Join(args, " "), err, out)
}
