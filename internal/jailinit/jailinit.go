// Package jailinit is the jail's init and the program it runs.
//
// The init is jailinit.c: C linked into every binary that imports this
// package, run as a constructor before the Go runtime starts, and only
// when the binary was started as "neonbox-init" (argv[0]); otherwise it
// returns at once and the program starts as usual. It receives a Program
// from the parent over fd 3, runs its steps in order and execs CMD.
//
// Why C: the init runs in every jail, and a Go runtime start with this
// binary's package inits costs about 3 ms here, then execve from a
// multi-threaded Go process costs more (the kernel ends the other threads
// and tears down a large address space). The C init starts in a fraction
// of that and execs from a single thread. It decides nothing: each path,
// flag and order is in the Program, which the parent builds and tests in
// Go (package nsjail). runc's nsexec starts its init the same way.
//
// The parent side, in Go, builds a Program with the methods below, each of
// which appends one step under the current stage (Stage); Encode gives
// the message. The init answers in JSON on the same socket (see package
// nsjail): {"error":{stage,op,path,errno,message}} for a failed step,
// {"prepared":true,...} and {"ready":true,...} with the Mark times.
package jailinit

/*
#include "jailinit.h"
*/
import "C"

import (
	"encoding/binary"
	"errors"
	"fmt"
	"strings"

	"golang.org/x/sys/unix"
)

// Name is the argv[0] under which the binary runs as a jail's init.
const Name = C.JI_NAME

// MaxReport is the longest message the init sends, in bytes.
const MaxReport = C.JI_MAX_REPORT

type code uint16

const (
	opMark         code = C.JI_MARK
	opMount        code = C.JI_MOUNT
	opUmount       code = C.JI_UMOUNT
	opMkdir        code = C.JI_MKDIR
	opMkdirAll     code = C.JI_MKDIR_ALL
	opSymlink      code = C.JI_SYMLINK
	opCreate       code = C.JI_CREATE
	opLchown       code = C.JI_LCHOWN
	opBind         code = C.JI_BIND
	opMoveFD       code = C.JI_MOVE_FD
	opSetAttrFD    code = C.JI_SETATTR_FD
	opPivot        code = C.JI_PIVOT
	opHostname     code = C.JI_HOSTNAME
	opLinkUp       code = C.JI_LINK_UP
	opCwd          code = C.JI_CWD
	opChdir        code = C.JI_CHDIR
	opJoinCgroup   code = C.JI_JOIN_CGROUP
	opRlimit       code = C.JI_RLIMIT
	opSecurebits   code = C.JI_SECUREBITS
	opCapbsetDrop  code = C.JI_CAPBSET_DROP
	opAmbientClear code = C.JI_AMBIENT_CLEAR
	opSetgroups    code = C.JI_SETGROUPS
	opSetresgid    code = C.JI_SETRESGID
	opSetresuid    code = C.JI_SETRESUID
	opCapsetZero   code = C.JI_CAPSET_ZERO
	opNoNewPrivs   code = C.JI_NO_NEW_PRIVS
	opSeccomp      code = C.JI_SECCOMP
	opPdeathsig    code = C.JI_PDEATHSIG
	opArgv         code = C.JI_ARGV
	opEnv          code = C.JI_ENV
	opAwaitCall    code = C.JI_AWAIT_CALL
	opLookPath     code = C.JI_LOOKPATH
	opReady        code = C.JI_READY
	opExec         code = C.JI_EXEC
	opRmdir        code = C.JI_RMDIR
	opContinue     code = C.JI_CONTINUE
	opCloneInit    code = C.JI_CLONE_INIT
	opAwaitIDMap   code = C.JI_AWAIT_IDMAP
	opJoinNetNS    code = C.JI_JOIN_NETNS
	opStdio        code = C.JI_STDIO
)

const (
	flagIfExists  = C.JI_IF_EXISTS
	flagRecursive = C.JI_RECURSIVE
)

// Program is a list of steps for the init. The zero value is empty and
// ready to use.
type Program struct {
	buf   []byte
	n     uint32
	stage string
	err   error
}

// Fail makes Encode return err: the program could not be built.
func (p *Program) Fail(err error) {
	if p.err == nil {
		p.err = err
	}
}

// Stage names the stage of the steps that follow, for error reports
// ("rootfs", "dev", "credentials", ...).
func (p *Program) Stage(name string) { p.stage = name }

// Encode returns the program as the init reads it, or the first error
// met while building it (a string with a NUL byte).
func (p *Program) Encode() ([]byte, error) {
	if p.err != nil {
		return nil, p.err
	}
	out := make([]byte, 8, 8+len(p.buf))
	copy(out, C.JI_MAGIC)
	binary.LittleEndian.PutUint32(out[4:], p.n)
	return append(out, p.buf...), nil
}

// add appends one step: op and path name it in an error report, args
// are its arguments.
func (p *Program) add(c code, flags uint16, a, b uint64, op, path string, args ...string) {
	p.addRaw(c, flags, a, b, op, path, args, false)
}

func (p *Program) addRaw(c code, flags uint16, a, b uint64, op, path string, args []string, binaryArgs bool) {
	strs := append([]string{p.stage, op, path}, args...)
	var hdr [24]byte
	binary.LittleEndian.PutUint16(hdr[0:], uint16(c))
	binary.LittleEndian.PutUint16(hdr[2:], flags)
	binary.LittleEndian.PutUint32(hdr[4:], uint32(len(strs)))
	binary.LittleEndian.PutUint64(hdr[8:], a)
	binary.LittleEndian.PutUint64(hdr[16:], b)
	p.buf = append(p.buf, hdr[:]...)
	for i, s := range strs {
		if strings.IndexByte(s, 0) >= 0 && !(binaryArgs && i >= len(strs)-len(args)) {
			if p.err == nil {
				p.err = fmt.Errorf("jail program: %s %q: contains a NUL byte", op, s)
			}
		}
		var l [4]byte
		binary.LittleEndian.PutUint32(l[:], uint32(len(s)))
		p.buf = append(p.buf, l[:]...)
		p.buf = append(p.buf, s...)
		p.buf = append(p.buf, 0)
	}
	p.n++
}

// Mark records the time, reported with "prepared" and "ready" under the
// name of the current stage.
func (p *Program) Mark() { p.add(opMark, 0, 0, 0, "", "") }

// MarkAs is Mark under name, whatever the current stage.
func (p *Program) MarkAs(name string) {
	stage := p.stage
	p.stage = name
	p.Mark()
	p.stage = stage
}

// Mount is mount(2); empty source, fstype or data are passed as NULL.
func (p *Program) Mount(source, target, fstype string, flags uintptr, data string) {
	p.add(opMount, 0, uint64(flags), 0, "mount "+fstype, target, source, target, fstype, data)
}

// MountIfExists is Mount, skipped when target does not exist.
func (p *Program) MountIfExists(source, target, fstype string, flags uintptr, data string) {
	p.add(opMount, flagIfExists, uint64(flags), 0, "mount "+fstype, target, source, target, fstype, data)
}

// Unmount is umount2(2).
func (p *Program) Unmount(target string, flags int) {
	p.add(opUmount, 0, uint64(flags), 0, "umount", target, target)
}

// Mkdir is mkdir(2).
func (p *Program) Mkdir(path string, mode uint32) {
	p.add(opMkdir, 0, uint64(mode), 0, "mkdir", path, path)
}

// Rmdir is rmdir(2).
func (p *Program) Rmdir(path string) { p.add(opRmdir, 0, 0, 0, "rmdir", path, path) }

// MkdirAll makes path and its missing parents, mode 0755.
func (p *Program) MkdirAll(path string) { p.add(opMkdirAll, 0, 0, 0, "mkdir", path, path) }

// Symlink is symlink(2).
func (p *Program) Symlink(target, path string) {
	p.add(opSymlink, 0, 0, 0, "symlink", path, target, path)
}

// Create makes the empty file path (O_EXCL), for a file bind's mount point.
func (p *Program) Create(path string, mode uint32) {
	p.add(opCreate, 0, uint64(mode), 0, "open", path, path)
}

// Lchown is lchown(2).
func (p *Program) Lchown(path string, uid, gid uint32) {
	p.add(opLchown, 0, uint64(uid), uint64(gid), "lchown", path, path)
}

// Bind mounts a copy of the mount at src (the whole tree if recursive)
// at dst, with the mount attributes attrs (MOUNT_ATTR_RDONLY, ...).
func (p *Program) Bind(src, dst string, attrs uint64, recursive bool) {
	p.bind(src, dst, attrs, recursive, 0)
}

// BindIfExists is Bind, skipped when dst does not exist.
func (p *Program) BindIfExists(src, dst string, attrs uint64, recursive bool) {
	p.bind(src, dst, attrs, recursive, flagIfExists)
}

func (p *Program) bind(src, dst string, attrs uint64, recursive bool, flags uint16) {
	if recursive {
		flags |= flagRecursive
	}
	p.add(opBind, flags, attrs, 0, "bind", dst, src, dst)
}

// MoveFD attaches the detached mount in descriptor slot (the order in
// which descriptors came with the program) at target, and closes it.
func (p *Program) MoveFD(slot int, target string) {
	p.add(opMoveFD, 0, uint64(slot), 0, "move_mount", target, target)
}

// SetAttrFD sets mount attributes on the detached mount in slot.
func (p *Program) SetAttrFD(slot int, attrs uint64, path string) {
	p.add(opSetAttrFD, 0, uint64(slot), attrs, "mount_setattr", path)
}

// Pivot makes root the root and detaches the old one.
func (p *Program) Pivot(root string) { p.add(opPivot, 0, 0, 0, "pivot_root", root, root) }

// Hostname is sethostname(2).
func (p *Program) Hostname(name string) { p.add(opHostname, 0, 0, 0, "sethostname", "", name) }

// LinkUp brings up the network interface name.
func (p *Program) LinkUp(name string) { p.add(opLinkUp, 0, 0, 0, "ioctl SIOCSIFFLAGS", name, name) }

// Cwd sets the directory CMD starts in; Chdir goes there.
func (p *Program) Cwd(dir string) { p.add(opCwd, 0, 0, 0, "chdir", dir, dir) }

// Chdir changes to the directory Cwd set.
func (p *Program) Chdir() { p.add(opChdir, 0, 0, 0, "chdir", "") }

// JoinCgroup writes "0" to the n tasks files in descriptor slots first
// and on, moving the init's thread into a v1 cgroup (cgroup.OpenTasks).
func (p *Program) JoinCgroup(first, n int) {
	p.add(opJoinCgroup, 0, uint64(first), uint64(n), "write tasks", "")
}

// Rlimit lowers resource's soft and hard limits to at most max.
func (p *Program) Rlimit(resource int, max uint64) {
	p.add(opRlimit, 0, uint64(resource), max, fmt.Sprintf("setrlimit %d", resource), "")
}

// Securebits is prctl(PR_SET_SECUREBITS, bits).
func (p *Program) Securebits(bits uint64) {
	p.add(opSecurebits, 0, bits, 0, "prctl PR_SET_SECUREBITS", "")
}

// CapbsetDrop drops capabilities 0 to last from the bounding set.
func (p *Program) CapbsetDrop(last int) {
	p.add(opCapbsetDrop, 0, uint64(last), 0, "prctl PR_CAPBSET_DROP", "")
}

// AmbientClear empties the ambient capability set.
func (p *Program) AmbientClear() { p.add(opAmbientClear, 0, 0, 0, "prctl PR_CAP_AMBIENT", "") }

// Setgroups clears the supplementary groups.
func (p *Program) Setgroups() { p.add(opSetgroups, 0, 0, 0, "setgroups", "") }

// Setresgid sets the real, effective and saved gid.
func (p *Program) Setresgid(gid uint32) { p.add(opSetresgid, 0, uint64(gid), 0, "setresgid", "") }

// Setresuid sets the real, effective and saved uid.
func (p *Program) Setresuid(uid uint32) { p.add(opSetresuid, 0, uint64(uid), 0, "setresuid", "") }

// CapsetZero empties the effective, permitted and inheritable sets.
func (p *Program) CapsetZero() { p.add(opCapsetZero, 0, 0, 0, "capset", "") }

// NoNewPrivs sets no_new_privs.
func (p *Program) NoNewPrivs() { p.add(opNoNewPrivs, 0, 0, 0, "prctl PR_SET_NO_NEW_PRIVS", "") }

// Seccomp loads the classic BPF program bpf (seccomp(2),
// SECCOMP_SET_MODE_FILTER).
func (p *Program) Seccomp(bpf []byte) {
	p.addRaw(opSeccomp, 0, 0, 0, "seccomp", "", []string{string(bpf)}, true)
}

// Pdeathsig is prctl(PR_SET_PDEATHSIG, sig).
func (p *Program) Pdeathsig(sig int) {
	p.add(opPdeathsig, 0, uint64(sig), 0, "prctl PR_SET_PDEATHSIG", "")
}

// Argv sets CMD's arguments; Env its environment.
func (p *Program) Argv(argv []string) { p.add(opArgv, 0, 0, 0, "argv", "", argv...) }

// Env sets CMD's environment.
func (p *Program) Env(env []string) { p.add(opEnv, 0, 0, 0, "env", "", env...) }

// AwaitCall says "prepared" and waits for a call: a Program of Argv, Env
// and Cwd steps only, sent with stdin, stdout and stderr.
func (p *Program) AwaitCall() { p.add(opAwaitCall, 0, 0, 0, "call", "") }

// LookPath finds CMD's executable along the PATH in its environment, or
// defaultPath.
func (p *Program) LookPath(defaultPath string) { p.add(opLookPath, 0, 0, 0, "exec", "", defaultPath) }

// Continue receives the rest of the program, with descriptors of its
// own, and runs it.
func (p *Program) Continue() { p.add(opContinue, 0, 0, 0, "recvmsg", "") }

// Ready reports "ready" with the marks so far.
func (p *Program) Ready() { p.add(opReady, 0, 0, 0, "sync", "") }

// Exec execs CMD.
func (p *Program) Exec() { p.add(opExec, 0, 0, 0, "execve", "") }

// CloneInit forks the jail's init proper: pid 1 of a new pid namespace
// and of the namespaces in flags (clone(2) flags, which must hold
// CLONE_NEWUSER), a child of the parent (CLONE_PARENT), which runs the
// rest of the program. The process that ran the program so far reports
// {"pid":N} (pid 1's pid as the parent sees it), writes the id maps of
// pid 1's user namespace (idMap for both uids and gids, or, if empty,
// the jail's root as that process's own ids, setgroups denied; refused
// to root) and reports {"mapped":true}; with newNet, it then makes a
// network namespace owned by pid 1's user namespace, while pid 1 goes
// on, for pid 1 to join (JoinNetNS); then it exits.
func (p *Program) CloneInit(flags uintptr, newNet bool, idMap string) {
	if flags&unix.CLONE_NEWUSER == 0 {
		p.Fail(errors.New("CloneInit without CLONE_NEWUSER: no ids to map"))
		return
	}
	var b uint64
	if newNet {
		b = 1
	}
	p.add(opCloneInit, 0, uint64(flags), b, "clone", "", idMap)
}

// AwaitIDMap waits until the process that ran CloneInit has written the
// user namespace's id maps.
func (p *Program) AwaitIDMap() { p.add(opAwaitIDMap, 0, 0, 0, "read", "id map") }

// JoinNetNS joins the network namespace CloneInit(true) made.
func (p *Program) JoinNetNS() { p.add(opJoinNetNS, 0, 0, 0, "setns", "") }

// Stdio makes the descriptors in slots slot, slot+1 and slot+2 the
// process's stdin, stdout and stderr (for an init that was started before
// its streams were known: see TakePrestarted).
func (p *Program) Stdio(slot int) { p.add(opStdio, 0, uint64(slot), 0, "dup3", "stdio") }
