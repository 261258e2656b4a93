package integration

// Containment tests: escaping the process tree, the terminal and the
// network namespace. See attack_test.go.

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// ptrace and its relatives fail, on the jail's own processes too.
func TestAttackPtrace(t *testing.T) {
	e := newEnv(t)
	const (
		ptraceTraceme = 0
		ptraceAttach  = 16
		ptraceSeize   = 0x4206
	)
	r := e.attackPy(t, attackOpts{}, fmt.Sprintf(`
import time
report("traceme", sc(%[1]d, %[3]d, 0, 0, 0))
pid = os.fork()
if pid == 0:
    time.sleep(30)
    os._exit(0)
report("attach_child", sc(%[1]d, %[4]d, pid, 0, 0))
report("seize_child", sc(%[1]d, %[5]d, pid, 0, 0))
report("attach_pid1", sc(%[1]d, %[4]d, 1, 0, 0))
buf = ctypes.create_string_buffer(16)
iov = (ctypes.c_void_p * 2)(ctypes.addressof(buf), 16)
report("process_vm_readv", sc(%[2]d, pid, ctypes.addressof(iov), 1, ctypes.addressof(iov), 1, 0))
attempt("proc_mem_write", lambda: open("/proc/%%d/mem" %% pid, "r+b").write(b"x"))
os.kill(pid, 9)
`, unix.SYS_PTRACE, unix.SYS_PROCESS_VM_READV, ptraceTraceme, ptraceAttach, ptraceSeize))
	assertDenied(t, r, "traceme", "attach_child", "seize_child", "attach_pid1", "process_vm_readv")
	t.Logf("proc_mem_write (the jail's own process, harmless either way): %s", r.kv()["proc_mem_write"])
}

// A host process is out of reach: its pid means nothing in the jail's
// pid namespace, and kill -1 reaches only the jail.
func TestAttackKillHostProcess(t *testing.T) {
	e := newEnv(t)
	victim := exec.Command("sleep", "60")
	require.NoError(t, victim.Start())
	done := make(chan error, 1)
	go func() { done <- victim.Wait() }()
	t.Cleanup(func() {
		_ = victim.Process.Kill()
		<-done
	})
	pid := victim.Process.Pid
	r := e.attack(t, attackOpts{}, "sh", "-c", fmt.Sprintf(`
kill -9 %[1]d 2>&1; echo "kill_pid=$?"
python3 -c 'import os; os.kill(%[1]d, 9)' 2>/dev/null; echo "py_kill_pid=$?"
python3 -c 'import os; os.kill(-1, 9)' 2>/dev/null; echo "kill_all=$?"
kill -9 -1; echo "kill_minus_one=$?"
ls /proc/%[1]d >/dev/null 2>&1; echo "proc_visible=$?"
`, pid))
	select {
	case err := <-done:
		done <- err
		t.Fatalf("the host process %d died during the run: %v", pid, err)
	case <-time.After(200 * time.Millisecond):
	}
	assert.NotEqual(t, "0", r.kv()["kill_pid"], "kill of the host pid reported success")
	assert.NotEqual(t, "0", r.kv()["proc_visible"], "the host pid is visible in the jail's /proc")
}

// TIOCSTI pushes input into a terminal: into the caller's terminal it
// would run commands as the host user. Denied on the inherited terminal,
// on a fresh pty, with the high bits of the request set, and after setsid.
func TestAttackTIOCSTI(t *testing.T) {
	e := newEnv(t)
	master, slave := openPTY(t)
	defer master.Close()
	defer slave.Close()
	r := e.attackPy(t, attackOpts{stdin: slave}, fmt.Sprintf(`
import fcntl, termios
def sti(fd, req=termios.TIOCSTI):
    fcntl.ioctl(fd, req, b"X")
report("stdin_is_tty", os.isatty(0))
attempt("stdin", lambda: sti(0))
report("stdin_high_bits", sc(%[1]d, 0, (1 << 32) | termios.TIOCSTI, b"X"))
report("tioclinux", sc(%[1]d, 0, 0x541C, b"\x02"))
attempt("dev_tty", lambda: sti(os.open("/dev/tty", os.O_RDWR)))
m, s = os.openpty()
attempt("openpty_slave", lambda: sti(s))
attempt("openpty_master", lambda: sti(m))
r, w = os.pipe()
pid = os.fork()
if pid == 0:
    os.close(r)
    os.setsid()
    res = "OK"
    try:
        fd = os.open(os.ttyname(s), os.O_RDWR)  # becomes the controlling tty
        sti(fd)
    except OSError as e:
        res = en(e.errno)
    os.write(w, res.encode())
    os._exit(0)
os.close(w)
os.waitpid(pid, 0)
report("setsid_ctty", os.read(r, 100).decode())
`, unix.SYS_IOCTL))
	assert.Equal(t, "True", r.kv()["stdin_is_tty"], "the attack ran on a terminal")
	assertDenied(t, r, "stdin", "stdin_high_bits", "tioclinux", "dev_tty", "openpty_slave", "openpty_master", "setsid_ctty")
	// Nothing was queued on the caller's terminal.
	require.NoError(t, unix.SetNonblock(int(slave.Fd()), true))
	buf := make([]byte, 64)
	n, err := unix.Read(int(slave.Fd()), buf)
	assert.True(t, n <= 0, "input injected into the caller's terminal: %q (%v)", buf[:max(n, 0)], err)
}

// With its stdio redirected (and --json capturing the output), the jail
// must not reach the caller's terminal through /dev/tty: neither write to
// it nor read what the user types ahead for the shell.
func TestAttackControllingTerminal(t *testing.T) {
	e := newEnv(t)
	master, slave := openPTY(t)
	defer master.Close()
	defer slave.Close()
	typeahead := "typed-ahead-" + attackToken(t)
	_, err := master.WriteString(typeahead)
	require.NoError(t, err)
	r := e.attackPy(t, attackOpts{ctty: slave}, `
report("stdin_is_tty", os.isatty(0))
fd = -1
def open_tty():
    global fd
    fd = os.open("/dev/tty", os.O_RDWR | os.O_NONBLOCK)
attempt("open_dev_tty", open_tty)
if fd >= 0:
    attempt("write_tty", lambda: os.write(fd, b"INJECTED-BY-JAIL\x1b]0;pwned\x07"))
    attempt("read_tty", lambda: report("typeahead", os.read(fd, 100)))
`)
	assert.Equal(t, "False", r.kv()["stdin_is_tty"])
	assertDenied(t, r, "open_dev_tty")
	assert.NotContains(t, r.out(), typeahead, "the jail read the user's type-ahead")
	require.NoError(t, unix.SetNonblock(int(master.Fd()), true))
	buf := make([]byte, 256)
	n, _ := unix.Read(int(master.Fd()), buf)
	assert.NotContains(t, string(buf[:max(n, 0)]), "INJECTED", "the jail wrote to the caller's terminal")
}

// openPTY returns a new pseudo-terminal pair in raw mode.
func openPTY(t *testing.T) (master, slave *os.File) {
	t.Helper()
	mfd, err := unix.Open("/dev/ptmx", unix.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	require.NoError(t, err)
	require.NoError(t, unix.IoctlSetPointerInt(mfd, unix.TIOCSPTLCK, 0))
	n, err := unix.IoctlGetInt(mfd, unix.TIOCGPTN)
	require.NoError(t, err)
	sfd, err := unix.Open(fmt.Sprintf("/dev/pts/%d", n), unix.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	require.NoError(t, err)
	tio, err := unix.IoctlGetTermios(sfd, unix.TCGETS)
	require.NoError(t, err)
	// cfmakeraw: whatever is injected is readable at once.
	tio.Iflag &^= unix.IGNBRK | unix.BRKINT | unix.PARMRK | unix.ISTRIP | unix.INLCR | unix.IGNCR | unix.ICRNL | unix.IXON
	tio.Oflag &^= unix.OPOST
	tio.Lflag &^= unix.ECHO | unix.ECHONL | unix.ICANON | unix.ISIG | unix.IEXTEN
	tio.Cflag &^= unix.CSIZE | unix.PARENB
	tio.Cflag |= unix.CS8
	tio.Cc[unix.VMIN], tio.Cc[unix.VTIME] = 1, 0
	require.NoError(t, unix.IoctlSetTermios(sfd, unix.TCSETS, tio))
	return os.NewFile(uintptr(mfd), "ptmx"), os.NewFile(uintptr(sfd), "pts")
}

// New user namespaces (the usual way back to capabilities) are denied,
// and nothing regains a capability.
func TestAttackRegainCapabilities(t *testing.T) {
	e := newEnv(t)
	const (
		cloneNewUser = 0x10000000
		cloneNewNS   = 0x00020000
		cloneNewPID  = 0x20000000
		sigchld      = 17
	)
	r := e.attackPy(t, attackOpts{}, fmt.Sprintf(`
import subprocess
report("unshare_user", sc(%[1]d, %[4]d))
report("unshare_user_mount", sc(%[1]d, %[4]d | %[5]d))
report("unshare_pid", sc(%[1]d, %[6]d))
ctypes.set_errno(0)
pid = libc.syscall(ctypes.c_long(%[2]d), ctypes.c_long(%[4]d | %[7]d), ctypes.c_long(0), ctypes.c_long(0), ctypes.c_long(0), ctypes.c_long(0))
if pid == 0:
    os._exit(0)  # the clone worked: this is the child
if pid > 0:
    os.waitpid(pid, 0)
report("clone_newuser", "OK" if pid > 0 else en(ctypes.get_errno()))
report("clone3", sc(%[3]d, 0, 0))
for name, argv in [("unshare_U", ["unshare", "-U", "true"]), ("unshare_r", ["unshare", "-r", "id"]), ("unshare_Urm", ["unshare", "-Urm", "true"])]:
    report(name, "OK" if subprocess.run(argv, stderr=subprocess.DEVNULL, stdout=subprocess.DEVNULL).returncode == 0 else "FAILED")
for line in open("/proc/self/status"):
    if line.startswith(("Cap", "NoNewPrivs", "Seccomp:")):
        k, v = line.split(":", 1)
        report(k, v.strip())
`, unix.SYS_UNSHARE, unix.SYS_CLONE, unix.SYS_CLONE3, cloneNewUser, cloneNewNS, cloneNewPID, sigchld))
	assertDenied(t, r, "unshare_user", "unshare_user_mount", "unshare_pid", "clone_newuser", "clone3", "unshare_U", "unshare_r", "unshare_Urm")
	kv := r.kv()
	for _, set := range []string{"CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"} {
		assert.Equal(t, "0000000000000000", kv[set], set)
	}
	assert.Equal(t, "1", kv["NoNewPrivs"])
	assert.Equal(t, "2", kv["Seccomp"])
}

// prctl tricks: no_new_privs cannot be cleared, nothing can be raised
// into the ambient set, securebits and the bounding set stay locked.
func TestAttackPrctl(t *testing.T) {
	e := newEnv(t)
	const (
		prCapbsetRead     = 23
		prSetSecurebits   = 28
		prSetNoNewPrivs   = 38
		prGetNoNewPrivs   = 39
		prCapAmbient      = 47
		prCapAmbientRaise = 2
		capSysAdmin       = 21
		capSetuid         = 7
	)
	r := e.attackPy(t, attackOpts{}, fmt.Sprintf(`
report("clear_nnp", sc(%[1]d, %[4]d, 0, 0, 0, 0))
report("nnp_after", libc.prctl(%[5]d, 0, 0, 0, 0))
report("ambient_raise_sys_admin", sc(%[1]d, %[6]d, %[7]d, %[8]d, 0, 0))
report("ambient_raise_setuid", sc(%[1]d, %[6]d, %[7]d, %[9]d, 0, 0))
report("clear_securebits", sc(%[1]d, %[3]d, 0, 0, 0, 0))
report("bounding_sys_admin", libc.prctl(%[2]d, %[8]d, 0, 0, 0))
class hdr(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]
class data(ctypes.Structure):
    _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32), ("inheritable", ctypes.c_uint32)]
h = hdr(0x20080522, 0)
d = (data * 2)(data(0xffffffff, 0xffffffff, 0xffffffff), data(0xffffffff, 0xffffffff, 0xffffffff))
report("capset_all", sc(%[10]d, ctypes.addressof(h), ctypes.addressof(d)))
report("setuid_0", sc(%[11]d, 0))
report("sethostname", sc(%[12]d, b"pwned", 5))
report("personality_no_aslr", sc(%[13]d, 0x0040000))
`, unix.SYS_PRCTL, prCapbsetRead, prSetSecurebits, prSetNoNewPrivs, prGetNoNewPrivs, prCapAmbient, prCapAmbientRaise,
		capSysAdmin, capSetuid, unix.SYS_CAPSET, unix.SYS_SETUID, unix.SYS_SETHOSTNAME, unix.SYS_PERSONALITY))
	assertDenied(t, r, "clear_nnp", "ambient_raise_sys_admin", "ambient_raise_setuid", "clear_securebits", "capset_all", "sethostname", "personality_no_aslr")
	kv := r.kv()
	assert.Equal(t, "1", kv["nnp_after"], "no_new_privs was cleared")
	assert.Equal(t, "0", kv["bounding_sys_admin"], "CAP_SYS_ADMIN is in the bounding set")
	t.Logf("setuid(0) as the jail's root (a no-op): %s", kv["setuid_0"])
	host, err := os.Hostname()
	require.NoError(t, err)
	assert.NotEqual(t, "pwned", host)
}

// System calls of another ABI must not slip past the filter: an i386
// int $0x80 and an x32 call both kill the process (SIGSYS).
func TestAttackForeignSyscallABI(t *testing.T) {
	if runtime.GOARCH != "amd64" {
		t.Skip("x86-64 only")
	}
	t.Run("i386", func(t *testing.T) {
		e := newEnv(t)
		r := e.attackPy(t, attackOpts{}, `
import mmap
# mov eax, 288 (i386 keyctl); int 0x80; ret
code = bytes([0xb8, 0x20, 0x01, 0, 0, 0xcd, 0x80, 0xc3])
m = mmap.mmap(-1, 4096, prot=mmap.PROT_READ | mmap.PROT_WRITE | mmap.PROT_EXEC)
m.write(code)
f = ctypes.CFUNCTYPE(ctypes.c_int)(ctypes.addressof(ctypes.c_char.from_buffer(m)))
report("i386_keyctl", f())
`)
		assert.Equal(t, "SECURITY_VIOLATION", r.status())
		assert.Equal(t, "SIGSYS", r.rec["signal"])
		assert.NotContains(t, r.out(), "i386_keyctl")
	})
	t.Run("x32", func(t *testing.T) {
		e := newEnv(t)
		const x32 = 0x40000000
		r := e.attackPy(t, attackOpts{}, fmt.Sprintf(`report("x32_keyctl", sc(%d, 0, -3, 0))`, x32|unix.SYS_KEYCTL))
		assert.Equal(t, "SECURITY_VIOLATION", r.status())
		assert.Equal(t, "SIGSYS", r.rec["signal"])
		assert.NotContains(t, r.out(), "x32_keyctl")
	})
}

// Processes that double-fork, setsid and ignore signals die with the
// run: none is left on the host, after a normal exit or a timeout.
func TestAttackOrphanSurvives(t *testing.T) {
	for _, c := range []struct {
		name  string
		flags []string
		tail  string
	}{
		{"exit", nil, "exit 0"},
		{"timeout", []string{"--timeout", "3s"}, "sleep 30"},
	} {
		t.Run(c.name, func(t *testing.T) {
			e := newEnv(t)
			marker := fmt.Sprintf("3600.%d", time.Now().UnixNano()%1000000007)
			start := time.Now()
			r := e.attack(t, attackOpts{flags: c.flags}, "sh", "-c", fmt.Sprintf(`
echo "pidns=$(readlink /proc/self/ns/pid)"
setsid sh -c 'trap "" HUP TERM INT; sleep %[1]s' </dev/null >/dev/null 2>&1 &
( ( setsid nohup sleep %[1]s </dev/null >/dev/null 2>&1 & ) & )
python3 -c '
import os, signal, time
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        for s in (signal.SIGHUP, signal.SIGTERM, signal.SIGINT):
            signal.signal(s, signal.SIG_IGN)
        os.execvp("sleep", ["sleep", "%[1]s"])
    os._exit(0)
os.wait()
'
sleep 0.2
echo "sleepers=$(pgrep -c -x sleep)"
%[2]s`, marker, c.tail))
			assert.Less(t, time.Since(start), 10*time.Second)
			kv := r.kv()
			ns := kv["pidns"]
			require.True(t, strings.HasPrefix(ns, "pid:["), "jail pid namespace: %q", r.out())
			assert.Equal(t, "3", kv["sleepers"], "the daemons were running in the jail")
			assert.Empty(t, hostProcsIn(ns), "processes of the jail's pid namespace survive on the host")
			assert.Empty(t, hostProcsWithMarker(marker), "the jail's daemons survive on the host")
			// Runs of other test processes on this host may hold jail
			// ids right now: those must at least not be this run's.
			for _, p := range hostJailUIDProcs() {
				t.Logf("a process with a jail uid (another run's?): %s", p)
			}
		})
	}
}

// The jail's network namespace has only its own loopback: host services
// on 127.0.0.1 and abstract unix sockets (CVE-2020-15257 class) are out
// of reach.
func TestAttackReachHostNetwork(t *testing.T) {
	e := newEnv(t)
	tcp, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer tcp.Close()
	abstract := "neonbox-attack-" + attackToken(t)
	unixL, err := net.Listen("unix", "@"+abstract)
	require.NoError(t, err)
	defer unixL.Close()
	accepted := make(chan string, 2)
	for _, l := range []net.Listener{tcp, unixL} {
		go func(l net.Listener) {
			if c, err := l.Accept(); err == nil {
				accepted <- l.Addr().String()
				c.Close()
			}
		}(l)
	}
	port := tcp.Addr().(*net.TCPAddr).Port
	r := e.attackPy(t, attackOpts{}, fmt.Sprintf(`
import socket
def tcp():
    socket.create_connection(("127.0.0.1", %d), timeout=2).close()
def abstract():
    s = socket.socket(socket.AF_UNIX)
    s.settimeout(2)
    s.connect("\0" + %q)
def outbound():
    socket.create_connection(("1.1.1.1", 53), timeout=2).close()
attempt("host_tcp", tcp)
attempt("host_abstract_unix", abstract)
attempt("outbound", outbound)
report("interfaces", ",".join(sorted(os.listdir("/sys/class/net"))) if os.path.exists("/sys/class/net") else ",".join(l.split(":")[0].strip() for l in open("/proc/net/dev").readlines()[2:]))
`, port, abstract))
	assertDenied(t, r, "host_tcp", "host_abstract_unix", "outbound")
	assert.Equal(t, "lo", r.kv()["interfaces"])
	select {
	case a := <-accepted:
		t.Errorf("the jail connected to the host listener %s", a)
	case <-time.After(100 * time.Millisecond):
	}
}
