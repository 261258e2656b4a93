package nsjail_test

import (
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"testing"

	libseccomp "github.com/seccomp/libseccomp-golang"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/neonbox/neonbox-ns/nsjail"
	"github.com/neonbox/neonbox-ns/seccomp"
)

// callScript makes each named system call with all-zero arguments and
// prints "name errno" for each; python's ctypes reaches any call number.
const callScript = `
import ctypes, sys
libc = ctypes.CDLL(None, use_errno=True)
for arg in sys.argv[1:]:
    name, nr = arg.split("=")
    extra = []
    r = libc.syscall(ctypes.c_long(int(nr)), *[ctypes.c_long(0)]*6)
    print(name, 0 if r >= 0 else ctypes.get_errno())
`

func syscallArgs(t *testing.T, names []string) []string {
	t.Helper()
	var args []string
	for _, n := range names {
		nr, err := libseccomp.GetSyscallFromName(n)
		require.NoError(t, err, n)
		if nr < 0 {
			continue // not a system call on this architecture
		}
		args = append(args, fmt.Sprintf("%s=%d", n, nr))
	}
	return args
}

// Every call on the deny list fails with EPERM inside the jail.
func TestSeccompDeniesListedCalls(t *testing.T) {
	e := newJailEnv(t)
	args := syscallArgs(t, seccomp.Denied())
	r, out, errOut := e.run(t, nil, append([]string{py, "-c", callScript}, args...)...)
	require.Equal(t, nsjail.StatusSuccess, r.Status, "%v %s", r.Error, errOut)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	require.Len(t, lines, len(args))
	for _, l := range lines {
		assert.Regexp(t, ` 1$`, l, "EPERM expected")
	}
}

// Argument checks: these calls would succeed or fail differently without
// the filter (the first column shows what the host says, for the record).
func TestSeccompArgumentRules(t *testing.T) {
	e := newJailEnv(t)
	script := `
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
def call(nr, *a):
    r = libc.syscall(ctypes.c_long(nr), *[ctypes.c_long(x) for x in a])
    return 0 if r >= 0 else ctypes.get_errno()
P = %d; U = %d; C3 = %d; CL = %d
print(call(P, 0x0040000), call(P, 0xffffffff) == 0 or 'query-denied', call(P, 0x80040000))
print(call(U, 0x10000000))
print(call(C3, 0, 0))
print(call(CL, 0x10000000 | 17, 0, 0, 0, 0))
`
	nr := func(n string) int {
		s, err := libseccomp.GetSyscallFromName(n)
		require.NoError(t, err)
		return int(s)
	}
	src := fmt.Sprintf(script, nr("personality"), nr("unshare"), nr("clone3"), nr("clone"))
	r, out, errOut := e.run(t, nil, py, "-c", src)
	require.Equal(t, nsjail.StatusSuccess, r.Status, "%v %s", r.Error, errOut)
	assert.Equal(t, "1 True 1\n1\n38\n1\n", out, "personality flags, unshare/clone with CLONE_NEWUSER: EPERM; clone3: ENOSYS")
}

// A 32-bit system call (int $0x80) from a 64-bit process is killed: the
// classic bypass of filters written for one architecture.
func TestSeccompKillsForeignArchitecture(t *testing.T) {
	e := newJailEnv(t)
	script := `
import ctypes, mmap
code = bytes([0xb8, 20, 0, 0, 0, 0xcd, 0x80, 0xc3])  # mov eax, 20 (getpid); int $0x80; ret
m = mmap.mmap(-1, 4096, prot=mmap.PROT_READ | mmap.PROT_WRITE | mmap.PROT_EXEC)
m.write(code)
f = ctypes.CFUNCTYPE(ctypes.c_int)(ctypes.addressof(ctypes.c_char.from_buffer(m)))
print(f())
`
	host, err := exec.Command(py, "-c", script).Output()
	if _, perr := strconv.Atoi(strings.TrimSpace(string(host))); err != nil || perr != nil {
		t.Skipf("this host cannot run 32-bit system calls (no IA32 emulation?): %v %q", err, host)
	}
	r, out, _ := e.run(t, nil, py, "-c", script)
	assert.Equal(t, nsjail.StatusSecurityViolation, r.Status, out)
	require.NotNil(t, r.Signal)
	assert.Equal(t, "SIGSYS", *r.Signal)
	assert.Equal(t, 128+31, r.ExitCode)
}
