package jailinit_test

import (
	"bytes"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/neonbox/neonbox-ns/internal/jailinit"
	"github.com/neonbox/neonbox-ns/internal/testutil"
)

// These tests start the test binary itself as "neonbox-init", without new
// namespaces: the init runs whatever program it gets, so steps that need
// no privilege show how it executes, reports and execs.

type reply struct {
	Ready    bool `json:"ready"`
	Prepared bool `json:"prepared"`
	Steps    []struct {
		Name string `json:"name"`
		At   int64  `json:"at"`
	} `json:"steps"`
	Error *failure `json:"error"`
}

type failure struct {
	Stage   string `json:"stage"`
	Op      string `json:"op"`
	Path    string `json:"path"`
	Errno   int    `json:"errno"`
	Message string `json:"message"`
}

// failed checks that the init reported one failure and exited 1.
func failed(t *testing.T, o outcome) *failure {
	t.Helper()
	require.Len(t, o.replies, 1)
	require.NotNil(t, o.replies[0].Error)
	assert.Equal(t, 1, o.exit)
	return o.replies[0].Error
}

type outcome struct {
	replies []reply
	stdout  string
	exit    int
}

// runInit starts the init, sends msgs and collects its replies until
// EOF.
func runInit(t *testing.T, msgs ...[]byte) outcome {
	t.Helper()
	pair, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	require.NoError(t, err)
	parent, child := os.NewFile(uintptr(pair[0]), "parent"), os.NewFile(uintptr(pair[1]), "child")
	defer parent.Close()
	var stdout bytes.Buffer
	cmd := &exec.Cmd{Path: "/proc/self/exe", Args: []string{jailinit.Name}, Env: []string{}, Stdout: &stdout, ExtraFiles: []*os.File{child}}
	require.NoError(t, cmd.Start())
	child.Close()
	for _, msg := range msgs {
		require.NoError(t, unix.Sendmsg(int(parent.Fd()), msg, nil, nil, 0))
	}
	var o outcome
	buf := make([]byte, 64<<10)
	for {
		n, err := parent.Read(buf)
		if n == 0 || err != nil {
			break
		}
		var r reply
		require.NoError(t, json.Unmarshal(buf[:n], &r), "reply %q", buf[:n])
		o.replies = append(o.replies, r)
	}
	err = cmd.Wait()
	var ee *exec.ExitError
	if err != nil {
		require.ErrorAs(t, err, &ee)
		o.exit = ee.ExitCode()
	}
	o.stdout = stdout.String()
	return o
}

func encode(t *testing.T, p *jailinit.Program) []byte {
	t.Helper()
	b, err := p.Encode()
	require.NoError(t, err)
	return b
}

// execTail ends a program the way the runtime does.
func execTail(p *jailinit.Program, argv, env []string, cwd string) {
	p.Argv(argv)
	p.Env(env)
	p.Cwd(cwd)
	p.Stage("cwd")
	p.Chdir()
	p.Stage("exec")
	p.LookPath("/usr/bin:/bin")
	p.Stage("done")
	p.Mark()
	p.Stage("sync")
	p.Ready()
	p.Stage("exec")
	p.Exec()
}

func TestInitExecsTheCommand(t *testing.T) {
	dir := t.TempDir()
	var p jailinit.Program
	p.Stage("setup")
	p.Mkdir(filepath.Join(dir, "made"), 0o700)
	p.Symlink("made", filepath.Join(dir, "link"))
	execTail(&p, []string{"sh", "-c", `echo "$X"; pwd; readlink link`}, []string{"X=from the program", "PATH=/nonexistent:/bin"}, dir)

	o := runInit(t, encode(t, &p))
	require.Len(t, o.replies, 1)
	assert.True(t, o.replies[0].Ready)
	var names []string
	for _, s := range o.replies[0].Steps {
		names = append(names, s.Name)
	}
	assert.Equal(t, []string{"started", "done"}, names)
	assert.Equal(t, 0, o.exit)
	assert.Equal(t, "from the program\n"+dir+"\nmade\n", o.stdout)
	st, err := os.Stat(filepath.Join(dir, "made"))
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o700), st.Mode().Perm()&^0o022)
}

func TestInitRunsAProgramInTwoParts(t *testing.T) {
	dir := t.TempDir()
	var base jailinit.Program
	base.Stage("base")
	base.Mkdir(filepath.Join(dir, "first"), 0o755)
	base.Mark()
	base.Continue()
	var rest jailinit.Program
	rest.Stage("rest")
	rest.Mkdir(filepath.Join(dir, "first", "second"), 0o755)
	execTail(&rest, []string{"ls", "first"}, nil, dir)

	o := runInit(t, encode(t, &base), encode(t, &rest))
	require.Len(t, o.replies, 1)
	assert.Nil(t, o.replies[0].Error)
	var names []string
	for _, s := range o.replies[0].Steps {
		names = append(names, s.Name)
	}
	assert.Equal(t, []string{"started", "base", "done"}, names)
	assert.Equal(t, "second\n", o.stdout)
}

func TestInitReportsTheFailedStep(t *testing.T) {
	dir := t.TempDir()
	missing := filepath.Join(dir, "missing", "x")
	var p jailinit.Program
	p.Stage("rootfs")
	p.Mkdir(missing, 0o755)
	execTail(&p, []string{"true"}, nil, dir)

	e := failed(t, runInit(t, encode(t, &p)))
	assert.Equal(t, "rootfs", e.Stage)
	assert.Equal(t, "mkdir", e.Op)
	assert.Equal(t, missing, e.Path)
	assert.Equal(t, int(unix.ENOENT), e.Errno)
}

func TestInitReportsAMissingCommand(t *testing.T) {
	var p jailinit.Program
	execTail(&p, []string{"no-such-command-here"}, []string{"PATH=/bin"}, "/")
	e := failed(t, runInit(t, encode(t, &p)))
	assert.Equal(t, "exec", e.Stage)
	assert.Equal(t, "no-such-command-here", e.Path)
	assert.Equal(t, int(unix.ENOENT), e.Errno)
	assert.Contains(t, e.Message, "command not found")
}

func TestInitSkipsOptionalStepsOnMissingTargets(t *testing.T) {
	dir := t.TempDir()
	var p jailinit.Program
	p.Stage("proc")
	// Would fail (not root, and no such target) if it were not skipped.
	p.BindIfExists("/dev/null", filepath.Join(dir, "absent"), 0, true)
	p.Mkdir(filepath.Join(dir, "after"), 0o755)
	execTail(&p, []string{"true"}, nil, dir)
	o := runInit(t, encode(t, &p))
	require.Len(t, o.replies, 1)
	assert.Nil(t, o.replies[0].Error)
	assert.DirExists(t, filepath.Join(dir, "after"))
}

func TestInitLoadsSeccompPrograms(t *testing.T) {
	// One instruction: return SECCOMP_RET_ALLOW. Its bytes hold NULs.
	allow := []byte{0x06, 0, 0, 0, 0, 0, 0xff, 0x7f}
	var p jailinit.Program
	p.Stage("credentials")
	p.NoNewPrivs()
	p.Seccomp(allow)
	p.Seccomp(allow)
	execTail(&p, []string{"grep", "-E", "^(Seccomp|Seccomp_filters|NoNewPrivs):", "/proc/self/status"}, nil, "/")
	o := runInit(t, encode(t, &p))
	require.Len(t, o.replies, 1)
	assert.Nil(t, o.replies[0].Error)
	assert.Contains(t, o.stdout, "NoNewPrivs:\t1")
	assert.Contains(t, o.stdout, "Seccomp:\t2")
	assert.Contains(t, o.stdout, "Seccomp_filters:\t2")
}

func TestInitRefusesMalformedPrograms(t *testing.T) {
	var p jailinit.Program
	execTail(&p, []string{"true"}, nil, "/")
	good := encode(t, &p)
	for name, msg := range map[string][]byte{
		"bad magic": append([]byte("XXXX"), good[4:]...),
		"truncated": good[:len(good)-3],
		"trailing":  append(append([]byte{}, good...), 0),
		"no ops":    []byte("NBI1\x05\x00\x00\x00"),
	} {
		t.Run(name, func(t *testing.T) {
			e := failed(t, runInit(t, msg))
			assert.Equal(t, "config", e.Stage)
			assert.Contains(t, e.Message, "malformed program")
		})
	}
}

func TestEncodeRefusesNULsOutsideSeccomp(t *testing.T) {
	var p jailinit.Program
	p.Argv([]string{"sh", "a\x00b"})
	_, err := p.Encode()
	require.Error(t, err)
	assert.Contains(t, err.Error(), "NUL")
}

func TestNotAnInitStartsAsUsual(t *testing.T) {
	// This test binary links the init; started under its own name it
	// must run the tests, which is what is happening now. Started under
	// another name it must not wait for a program either.
	out, err := exec.Command("/proc/self/exe", "-test.run", "^$").CombinedOutput()
	require.NoError(t, err, "%s", out)
}

func TestInitReportsFailuresOnLongPaths(t *testing.T) {
	// A path whose escaped form does not fit the report: the step is
	// still reported, without the path.
	long := "/" + strings.Repeat("\x01", 4000)
	var p jailinit.Program
	p.Stage("rootfs")
	p.Mkdir(long, 0o755)
	execTail(&p, []string{"true"}, nil, "/")
	e := failed(t, runInit(t, encode(t, &p)))
	assert.Equal(t, "rootfs", e.Stage)
	assert.Equal(t, "mkdir", e.Op)
	assert.Empty(t, e.Path)
	assert.Contains(t, e.Message, "too long")
}

func TestInitTakesLongArgumentLists(t *testing.T) {
	argv := []string{"sh", "-c", `echo "$#"`, "sh"}
	for i := 0; i < 10000; i++ {
		argv = append(argv, "a")
	}
	var p jailinit.Program
	execTail(&p, argv, nil, "/")
	o := runInit(t, encode(t, &p))
	require.Len(t, o.replies, 1)
	assert.Nil(t, o.replies[0].Error)
	assert.Equal(t, "10000\n", o.stdout)
}

// spawned is an init started with a spawn program (see startSpawn).
type spawned struct {
	sock   *os.File // the parent's end
	cmd    *exec.Cmd
	stdout *bytes.Buffer
	init   *os.Process
}

// spawnProgram begins a program as the runtime's does: pid 1 forked in a
// new user namespace, with idMap (and with newNet a network namespace
// made for it), and the wait for the id maps.
func spawnProgram(t *testing.T, newNet bool, idMap string) *jailinit.Program {
	t.Helper()
	testutil.RequireUserNS(t)
	p := &jailinit.Program{}
	p.Stage("spawn")
	p.CloneInit(unix.CLONE_NEWUSER, newNet, idMap)
	p.AwaitIDMap()
	return p
}

// jailMap is the id map the runtime gives a jail: its root may not be
// root's own ids.
func jailMap() string {
	if os.Geteuid() == 0 {
		return "0 1879048192 65536\n"
	}
	return ""
}

// startSpawn starts the init with p and, with wantPid, reads pid 1's pid
// and the word that its ids are mapped from the process that forked it.
func startSpawn(t *testing.T, p *jailinit.Program, wantPid bool) *spawned {
	t.Helper()
	pair, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	require.NoError(t, err)
	s := &spawned{sock: os.NewFile(uintptr(pair[0]), "parent"), stdout: &bytes.Buffer{}}
	child := os.NewFile(uintptr(pair[1]), "child")
	t.Cleanup(func() { s.sock.Close() })
	require.NoError(t, unix.Sendmsg(pair[0], encode(t, p), nil, nil, 0))
	s.cmd = &exec.Cmd{Path: "/proc/self/exe", Args: []string{jailinit.Name}, Env: []string{}, Stdout: s.stdout, ExtraFiles: []*os.File{child}}
	require.NoError(t, s.cmd.Start())
	child.Close()
	if wantPid {
		s.init = s.readPid(t)
		var said struct{ Mapped bool }
		msg := s.read(t)
		require.NoError(t, json.Unmarshal(msg, &said), "%q", msg)
		require.True(t, said.Mapped, "%q", msg)
	}
	return s
}

func (s *spawned) readPid(t *testing.T) *os.Process {
	t.Helper()
	var said struct{ Pid int }
	msg := s.read(t)
	require.NoError(t, json.Unmarshal(msg, &said), "%q", msg)
	require.Positive(t, said.Pid, "%q", msg)
	require.NotEqual(t, s.cmd.Process.Pid, said.Pid)
	init, err := os.FindProcess(said.Pid)
	require.NoError(t, err)
	return init
}

func (s *spawned) read(t *testing.T) []byte {
	t.Helper()
	buf := make([]byte, jailinit.MaxReport)
	n, err := s.sock.Read(buf)
	require.NoError(t, err)
	return buf[:n]
}

// ready checks that the init said "ready", and waits for it to end.
func (s *spawned) ready(t *testing.T) *os.ProcessState {
	t.Helper()
	var r reply
	msg := s.read(t)
	require.NoError(t, json.Unmarshal(msg, &r), "%q", msg)
	require.True(t, r.Ready, "%q", msg)
	return s.finish(t)
}

// finish waits for the init and the process that forked it.
func (s *spawned) finish(t *testing.T) *os.ProcessState {
	t.Helper()
	state, err := s.init.Wait()
	require.NoError(t, err)
	require.NoError(t, s.cmd.Wait())
	return state
}

// The first steps of every jail: pid 1 of new user and pid namespaces
// forked as the parent's child, its ids mapped by the process that forked
// it, which says the pid first and then that the ids are mapped.
func TestCloneInitForksPid1AsTheParentsChild(t *testing.T) {
	p := spawnProgram(t, false, jailMap())
	p.Stage("mapped")
	p.Mark()
	execTail(p, []string{"sh", "-c", `echo "pid $$"`}, []string{"PATH=/bin:/usr/bin"}, "/")
	s := startSpawn(t, p, true)

	// Its parent is this process, not the one that forked it.
	status, err := os.ReadFile("/proc/" + strconv.Itoa(s.init.Pid) + "/status")
	require.NoError(t, err)
	assert.Contains(t, string(status), "\nPPid:\t"+strconv.Itoa(os.Getpid())+"\n")
	// Its ids are mapped once that is said.
	uidMap, err := os.ReadFile("/proc/" + strconv.Itoa(s.init.Pid) + "/uid_map")
	require.NoError(t, err)
	assert.NotEmpty(t, strings.Fields(string(uidMap)))

	assert.True(t, s.ready(t).Success())
	assert.Equal(t, "pid 1\n", s.stdout.String())
}

// Without a map, the jail's root is the caller's own ids, with setgroups
// denied as the kernel requires; never root's: that is refused.
func TestCloneInitMapsTheCallersOwnIDs(t *testing.T) {
	p := spawnProgram(t, false, "")
	execTail(p, []string{"sh", "-c", "cat /proc/self/uid_map /proc/self/gid_map /proc/self/setgroups"}, []string{"PATH=/bin:/usr/bin"}, "/")
	if os.Geteuid() == 0 {
		s := startSpawn(t, p, false)
		var r reply
		msg := s.read(t)
		require.NoError(t, json.Unmarshal(msg, &r), "%q", msg)
		require.NotNil(t, r.Error, "%q", msg)
		assert.Contains(t, r.Error.Message, "refusing to map the jail's root to host root")
		require.Error(t, s.cmd.Wait())
		return
	}
	s := startSpawn(t, p, true)
	require.True(t, s.ready(t).Success())
	own := func(id int) string { return "0 " + strconv.Itoa(id) + " 1" }
	lines := strings.Split(strings.TrimSpace(s.stdout.String()), "\n")
	require.Len(t, lines, 3, s.stdout.String())
	assert.Equal(t, own(os.Geteuid()), strings.Join(strings.Fields(lines[0]), " "))
	assert.Equal(t, own(os.Getegid()), strings.Join(strings.Fields(lines[1]), " "))
	assert.Equal(t, "deny", lines[2])
}

// A map given is written for uids and gids alike, setgroups left allowed.
func TestCloneInitWritesTheMapGiven(t *testing.T) {
	testutil.RequireRoot(t) // a range of host ids
	p := spawnProgram(t, false, "0 1879048192 65536\n")
	execTail(p, []string{"sh", "-c", "cat /proc/self/uid_map /proc/self/gid_map /proc/self/setgroups"}, []string{"PATH=/bin:/usr/bin"}, "/")
	s := startSpawn(t, p, true)
	require.True(t, s.ready(t).Success())
	lines := strings.Split(strings.TrimSpace(s.stdout.String()), "\n")
	require.Len(t, lines, 3, s.stdout.String())
	assert.Equal(t, "0 1879048192 65536", strings.Join(strings.Fields(lines[0]), " "))
	assert.Equal(t, "0 1879048192 65536", strings.Join(strings.Fields(lines[1]), " "))
	assert.Equal(t, "allow", lines[2])
}

// With a network namespace asked for, the process that forked the init
// makes it, owned by the init's user namespace, and the init joins it.
func TestCloneInitMakesTheNetworkNamespace(t *testing.T) {
	p := spawnProgram(t, true, jailMap())
	p.Stage("network")
	p.JoinNetNS()
	// Needs CAP_NET_ADMIN over the namespace's owning user namespace:
	// the jail's, not neonbox-ns's, as this shows when the jail's ids
	// are not root's.
	p.LinkUp("lo")
	execTail(p, []string{"readlink", "/proc/self/ns/net"}, []string{"PATH=/bin:/usr/bin"}, "/")
	s := startSpawn(t, p, true)
	require.True(t, s.ready(t).Success())
	own, err := os.Readlink("/proc/self/ns/net")
	require.NoError(t, err)
	assert.Regexp(t, `^net:\[\d+\]\n$`, s.stdout.String())
	assert.NotEqual(t, own+"\n", s.stdout.String())
}

// Should the ids fail to map, the process that forked the init says why
// after the pid, instead of that they are mapped; the init, never told its
// ids are mapped, does not go on but says so and exits.
func TestCloneInitReportsAFailedIDMap(t *testing.T) {
	p := spawnProgram(t, false, "not a map\n")
	execTail(p, []string{"true"}, nil, "/")
	s := startSpawn(t, p, false)
	s.init = s.readPid(t)

	var r reply
	msg := s.read(t)
	require.NoError(t, json.Unmarshal(msg, &r), "%q", msg)
	require.NotNil(t, r.Error, "%q", msg)
	assert.Equal(t, "spawn", r.Error.Stage)
	assert.Regexp(t, `^/proc/\d+/uid_map$`, r.Error.Path)
	assert.Equal(t, int(unix.EINVAL), r.Error.Errno)

	msg = s.read(t)
	r = reply{}
	require.NoError(t, json.Unmarshal(msg, &r), "%q", msg)
	require.NotNil(t, r.Error, "%q", msg)
	assert.Contains(t, r.Error.Message, "not mapped")
	state, err := s.init.Wait()
	require.NoError(t, err)
	assert.Equal(t, 1, state.ExitCode())
	assert.Error(t, s.cmd.Wait(), "the process that forked the init failed too")
}

func TestStdioTakesTheStreamsThatCome(t *testing.T) {
	inR, inW, err := os.Pipe()
	require.NoError(t, err)
	outR, outW, err := os.Pipe()
	require.NoError(t, err)
	_, err = inW.WriteString("from stdin")
	require.NoError(t, err)
	inW.Close()

	var p jailinit.Program
	p.Stage("config")
	p.Stdio(0)
	execTail(&p, []string{"sh", "-c", "cat; echo ' to stdout'; echo ' to stderr' >&2"}, []string{"PATH=/usr/bin:/bin"}, "/")
	pair, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	require.NoError(t, err)
	parent, child := os.NewFile(uintptr(pair[0]), "parent"), os.NewFile(uintptr(pair[1]), "child")
	defer parent.Close()
	require.NoError(t, unix.Sendmsg(pair[0], encode(t, &p), unix.UnixRights(int(inR.Fd()), int(outW.Fd()), int(outW.Fd())), nil, 0))
	inR.Close()
	outW.Close()
	// The init's own streams are not the ones it is sent.
	var own bytes.Buffer
	cmd := &exec.Cmd{Path: "/proc/self/exe", Args: []string{jailinit.Name}, Env: []string{}, Stdout: &own, Stderr: &own, ExtraFiles: []*os.File{child}}
	require.NoError(t, cmd.Start())
	child.Close()
	got, err := io.ReadAll(outR)
	require.NoError(t, err)
	require.NoError(t, cmd.Wait())
	assert.Equal(t, "from stdin to stdout\n to stderr\n", string(got))
	assert.Empty(t, own.String())
}

func TestStdioRefusesMissingDescriptors(t *testing.T) {
	var p jailinit.Program
	p.Stage("config")
	p.Stdio(0)
	execTail(&p, []string{"true"}, nil, "/")
	e := failed(t, runInit(t, encode(t, &p)))
	assert.Equal(t, "config", e.Stage)
	assert.Contains(t, e.Message, "no such descriptor")
}
