// Runs in neonbox-ns itself, on the host, not in a jail: before the Go
// runtime starts, `neonbox-ns exec` starts the jail's init, with its
// first program (the spawn program, which package nsjail builds: see
// prestart_program.h) already queued, and after it, where the state dir
// has one, the base of the jail's program as the last run wrote it. The
// init forks pid 1 in the jail's namespaces, maps its ids, reports its
// pid and builds the base of the jail's root, while the Go runtime starts
// and the command line and policy are read, which take longer than all
// of that.
//
// A binary opts in by defining neonbox_prestart_cmd (the neonbox-ns CLI:
// "exec"): the init is prestarted when argv[1] is that subcommand. Go
// takes the init with jailinit.TakePrestarted, or discards it (a
// prestarted init whose socket closes exits, as it does when this
// process exits: its parent-death signal is set).
//
// It is not prestarted on a host with a unified cgroup2 hierarchy, where
// the init is born in its run's cgroup (CLONE_INTO_CGROUP) and so cannot
// start before the cgroup exists.
//
// The init forks the teardown helper (teardown.c), which does the run's
// cleanup after neonbox-ns has exited, from its own small process: a
// fork of neonbox-ns would cost neonbox-ns's start the copy-on-write
// faults of every page its Go runtime then writes.
//
// For the same subcommand, prestarted or not, the constructor also sets
// how the Go runtime's threads are scheduled: their timer slack
// (widen_timer_slack), and, while the init execs, their CPUs
// (move_parent_away).
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/vfs.h>
#include <time.h>
#include <unistd.h>

#include "jailinit.h"
#include "prestart.h"
#include "prestart_program.h"
#include "teardown.h"

#ifndef CGROUP2_SUPER_MAGIC
#define CGROUP2_SUPER_MAGIC 0x63677270
#endif

extern const char neonbox_prestart_cmd[] __attribute__((weak));

const unsigned char *ji_spawn_program(int rootful, size_t *len)
{
	*len = rootful ? sizeof(ji_spawn_rootful) : sizeof(ji_spawn_rootless);
	return rootful ? ji_spawn_rootful : ji_spawn_rootless;
}

static struct ji_prestarted prestarted = {.pid = -1, .sock = -1};

// The base of the jail's program (nsjail's baseProgram) that an earlier
// run with the same state dir built (nsjail writes it to JI_BASE_FILE,
// after ji_base_header): queued right after the spawn program, the init
// builds the base of the jail while the Go runtime starts. Go checks
// that it is the base it would have sent, byte for byte, before it
// adopts the init.
static unsigned char base[JI_BASE_HEADER + JI_MAX_BASE];

static void put64(unsigned char *p, uint64_t v)
{
	for (int i = 0; i < 8; i++)
		p[i] = (unsigned char)(v >> (8 * i));
}

int ji_base_header(unsigned char out[JI_BASE_HEADER])
{
	struct stat st;
	if (stat("/proc/self/exe", &st) < 0)
		return -1;
	memcpy(out, JI_BASE_MAGIC, 4);
	put64(out + 4, (uint64_t)st.st_dev);
	put64(out + 12, (uint64_t)st.st_ino);
	put64(out + 20, (uint64_t)st.st_size);
	put64(out + 28, (uint64_t)st.st_mtim.tv_sec);
	put64(out + 36, (uint64_t)st.st_mtim.tv_nsec);
	return 0;
}

// state_dir is the state dir of exec's command line (argv[1] is exec):
// the value of its --state-dir flag before "--", else root's default.
// A guess that can only cost time: Go compares what the init ran.
static const char *state_dir(int argc, char **argv)
{
	const char *dir = JI_DEFAULT_STATE_DIR;
	for (int i = 2; i < argc && argv[i] && strcmp(argv[i], "--"); i++) {
		const char *a = argv[i];
		if (a[0] == '-' && a[1] == '-')
			a++;
		if (!strcmp(a, "-state-dir") && i + 1 < argc && argv[i + 1])
			dir = argv[++i];
		else if (!strncmp(a, "-state-dir=", 11))
			dir = a + 11;
	}
	return *dir ? dir : JI_DEFAULT_STATE_DIR; // Go's default for ""
}

// owned_by_self reports whether fd is of this process's user and no one
// else may write it.
static int owned_by_self(int fd, struct stat *st)
{
	return fstat(fd, st) == 0 && st->st_uid == geteuid() && !(st->st_mode & 022);
}

// read_base reads the base of the state dir of argv and returns its
// length (from base + JI_BASE_HEADER), or 0: none, one written by another
// build of neonbox-ns (its header is not this binary's), or one that
// another user than this process's could have written or swapped in (the
// init runs it as root of its namespaces): the state dir and the file
// must be this user's and writable by no one else, the file a regular one
// (not a FIFO that would block this open).
static size_t read_base(int argc, char **argv)
{
	unsigned char want[JI_BASE_HEADER];
	struct stat st;
	int dir = open(state_dir(argc, argv), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (dir < 0)
		return 0;
	int fd = -1;
	if (owned_by_self(dir, &st))
		fd = openat(dir, JI_BASE_FILE, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
	close(dir);
	if (fd < 0)
		return 0;
	size_t len = 0;
	// The binary's header only once there is a base to check it in.
	if (owned_by_self(fd, &st) && S_ISREG(st.st_mode) && st.st_size > JI_BASE_HEADER &&
	    (size_t)st.st_size <= sizeof(base) && ji_base_header(want) == 0) {
		while (len < (size_t)st.st_size) {
			ssize_t r = read(fd, base + len, (size_t)st.st_size - len);
			if (r < 0 && errno == EINTR)
				continue;
			if (r <= 0)
				break;
			len += (size_t)r;
		}
		if (len != (size_t)st.st_size || memcmp(base, want, JI_BASE_HEADER) != 0)
			len = 0;
	}
	close(fd);
	return len > 0 ? len - JI_BASE_HEADER : 0;
}

int ji_take_prestarted(struct ji_prestarted *out)
{
	if (prestarted.pid <= 0)
		return 0;
	*out = prestarted;
	prestarted = (struct ji_prestarted){.pid = -1, .sock = -1};
	return 1;
}

// is_cmd reports whether the binary runs the subcommand that asks for a
// prestart.
static int is_cmd(int argc, char **argv)
{
	return argc >= 2 && argv[1] && strcmp(argv[1], neonbox_prestart_cmd) == 0;
}

// prestartable reports whether the init can start before its cgroup
// exists: not on a unified cgroup2 host (see above).
static int prestartable(void)
{
	struct statfs fs;
	return statfs("/sys/fs/cgroup", &fs) == 0 && fs.f_type != CGROUP2_SUPER_MAGIC;
}

// exec_failed is set by the child of vfork when it fails: vfork returns
// in the parent once the child has exec'd or exited, and the two share
// memory until then, so the parent knows.
static volatile int exec_failed;

// exec_fail reports the step of exec_init that failed, as the init
// reports a failed step, on the socket the parent reads, and exits. In
// the child of vfork: no allocation, no stdio, no library call that may
// need the dynamic linker.
static void exec_fail(int sock, const char *op, const char *path, int err)
{
	static const char head[] = "{\"error\":{\"stage\":\"spawn\",\"op\":\"";
	static const char mid[] = "\",\"path\":\"";
	static const char tail[] = "\",\"errno\":";
	char msg[160];
	size_t n = 0;
	for (size_t i = 0; i < sizeof(head) - 1; i++)
		msg[n++] = head[i];
	for (const char *p = op; *p && n < 64; p++)
		msg[n++] = *p;
	for (size_t i = 0; i < sizeof(mid) - 1; i++)
		msg[n++] = mid[i];
	for (const char *p = path; *p && n < 112; p++)
		msg[n++] = *p;
	for (size_t i = 0; i < sizeof(tail) - 1; i++)
		msg[n++] = tail[i];
	char digits[12];
	int k = 0;
	do {
		digits[k++] = (char)('0' + err % 10);
		err /= 10;
	} while (err > 0 && k < (int)sizeof(digits));
	while (k > 0)
		msg[n++] = digits[--k];
	msg[n++] = '}';
	msg[n++] = '}';
	exec_failed = 1;
	(void)!send(sock, msg, n, MSG_NOSIGNAL);
	_exit(127);
}

// parent_narrowed is set by the child of vfork once it has narrowed the
// parent's CPUs (move_parent_away), which the parent then puts back.
static volatile int parent_narrowed;

// move_parent_away, in the child of vfork, keeps the parent off the
// child's CPU when it wakes: vfork wakes the parent once the child's
// execve has let go of its memory, on the child's CPU as often as not,
// where it preempted the init mid-execve and ran the Go runtime's start
// while the init waited for the other vCPU, 0.8-1.3 ms in about half of
// back-to-back runs (perf sched). The init's own affinity stays the
// caller's: it was copied at the vfork. Raw system calls: glibc's
// sched_getcpu reads the parent's rseq area, which the kernel does not
// update for a child of vfork. cpus is the caller's affinity, NULL
// where it has fewer than two CPUs.
static void move_parent_away(pid_t parent, const cpu_set_t *cpus)
{
	unsigned cpu;
	if (!cpus || syscall(SYS_getcpu, &cpu, NULL, NULL) < 0 || cpu >= CPU_SETSIZE || !CPU_ISSET(cpu, cpus))
		return;
	cpu_set_t others = *cpus;
	CPU_CLR(cpu, &others);
	if (syscall(SYS_sched_setaffinity, parent, sizeof(others), &others) == 0)
		parent_narrowed = 1;
}

// The child of vfork shares this process's memory until its execve: it
// makes only system calls and sets no variable but exec_failed and
// parent_narrowed; on a failure it says which call and exits.
// With a teardown socket (td >= 0) the init forks the teardown helper
// first thing (teardown.c) and hands it td, as fd JT_INIT_FD.
static void exec_init(int sock, int td, pid_t parent, const cpu_set_t *cpus)
{
	static char *const argv[] = {JI_NAME, NULL};
	static char *const argv_td[] = {JI_NAME, JT_INIT_ARG, NULL};
	static char *const envp[] = {NULL};
	// A session of its own: the jail cannot reach the caller's
	// terminal through /dev/tty (as os/exec's Setsid for a fresh init).
	if (setsid() < 0)
		exec_fail(sock, "setsid", "", errno);
	if (prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0) < 0)
		exec_fail(sock, "prctl PR_SET_PDEATHSIG", "", errno);
	if (getppid() != parent)
		_exit(127); // neonbox-ns is gone: nobody to tell
	// td is 10 or above (prestart_init), out of the way of both targets.
	if (dup3(sock, JI_SYNC_FD, 0) < 0)
		exec_fail(sock, "dup3", "", errno);
	if (td >= 0 && dup3(td, JT_INIT_FD, 0) < 0)
		exec_fail(JI_SYNC_FD, "dup3", "", errno);
	move_parent_away(parent, cpus);
	execve("/proc/self/exe", td >= 0 ? argv_td : argv, envp);
	exec_fail(JI_SYNC_FD, "execve", "/proc/self/exe", errno);
}

// The teardown helper's socket: the end this process keeps for Go
// (ji_take_teardown); -1: none.
static int teardown = -1;

int ji_take_teardown(void)
{
	int sock = teardown;
	teardown = -1;
	return sock;
}

static void prestart_init(int argc, char **argv)
{
	int pair[2], tdp[2];
	if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, pair) < 0)
		return;
	// The teardown helper's socket: this process keeps one end, the init
	// gets the other (td; -1: no helper), moved to 10 or above, so that
	// the child of vfork, which must not change this process's
	// variables, can move the two sockets to fds 3 and 4 in any order.
	// With stdin, stdout or stderr closed, an end would take its number:
	// no helper then.
	int td = -1;
	if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, tdp) == 0) {
		if (tdp[0] > 2 && tdp[1] > 2)
			td = fcntl(tdp[1], F_DUPFD_CLOEXEC, 10);
		close(tdp[1]);
		if (td >= 0)
			teardown = tdp[0];
		else
			close(tdp[0]);
	}
	int rootful = geteuid() == 0;
	pid_t self = getpid(), pid = -1;
	struct timespec ts = {0};
	// With stdin, stdout or stderr closed, the socket would take its
	// number, and the init's stream would be the socket.
	// The init reads its spawn program first: queue it.
	size_t len, base_len = 0;
	const unsigned char *prog = ji_spawn_program(rootful, &len);
	if (pair[0] > 2 && pair[1] > 2 && send(pair[0], prog, len, MSG_NOSIGNAL) == (ssize_t)len) {
		if (rootful && (base_len = read_base(argc, argv)) > 0 &&
		    send(pair[0], base + JI_BASE_HEADER, base_len, MSG_NOSIGNAL) != (ssize_t)base_len)
			base_len = 0; // the init then fails on what it got: not adopted

		cpu_set_t cpus;
		int many = sched_getaffinity(0, sizeof(cpus), &cpus) == 0 && CPU_COUNT(&cpus) > 1;
		clock_gettime(CLOCK_MONOTONIC, &ts);
		pid = vfork();
		if (pid == 0)
			exec_init(pair[1], td, self, many ? &cpus : NULL);
		// Before the Go runtime makes a thread, which would inherit
		// what move_parent_away narrowed.
		if (parent_narrowed)
			(void)sched_setaffinity(0, sizeof(cpus), &cpus);
	}
	close(pair[1]);
	if (td >= 0)
		close(td);
	if ((pid < 0 || exec_failed) && teardown >= 0) {
		close(teardown); // no init, so no helper
		teardown = -1;
	}
	if (pid < 0) {
		close(pair[0]);
		return;
	}
	prestarted = (struct ji_prestarted){
		.pid = pid,
		.sock = pair[0],
		.rootful = rootful,
		.at = (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec,
		.base = base_len > 0 ? base + JI_BASE_HEADER : NULL,
		.base_len = base_len,
	};
}

// caller_slack is the timer slack (ns) this process had before
// widen_timer_slack, 0 if it is unchanged.
static unsigned long caller_slack;

// WIDENED_SLACK is the timer slack of `neonbox-ns exec`'s own threads.
#define WIDENED_SLACK 1000000UL

// widen_timer_slack lets the kernel put off this process's timer
// wake-ups by up to 1 ms (PR_SET_TIMERSLACK), for the Go runtime's
// threads, made after this and inheriting it. The runtime's sysmon
// sleeps 20 us at a time for a process's first milliseconds: some 100
// wake-ups in a run of `neonbox-ns exec`, each one taking a CPU from
// main or from the jail's init for a few microseconds. A timer of exec's
// own (its --timeout) may fire up to 1 ms late. The init, started before
// this, keeps the caller's slack for the jail; an init that Go starts
// (a unified cgroup2 host, or a run that cannot take the prestarted one)
// gets it back from the thread that starts it (ji_caller_slack).
static void widen_timer_slack(void)
{
	int old = prctl(PR_GET_TIMERSLACK, 0, 0, 0, 0);
	if (old > 0 && (unsigned long)old < WIDENED_SLACK && prctl(PR_SET_TIMERSLACK, WIDENED_SLACK, 0, 0, 0) == 0)
		caller_slack = (unsigned long)old;
}

unsigned long ji_caller_slack(void)
{
	return caller_slack;
}

// glibc passes argc, argv and envp to constructors; under musl, ji_args
// reads them (only in a binary that asks for a prestart).
#ifdef __GLIBC__
__attribute__((constructor)) static void neonbox_prestart(int argc, char **argv, char **envp)
{
	(void)envp;
	if (!neonbox_prestart_cmd)
		return;
#else
__attribute__((constructor)) static void neonbox_prestart(void)
{
	if (!neonbox_prestart_cmd)
		return;
	char **argv;
	int argc = ji_args(&argv);
#endif
	if (!is_cmd(argc, argv))
		return;
	if (prestartable())
		prestart_init(argc, argv);
	widen_timer_slack();
}
