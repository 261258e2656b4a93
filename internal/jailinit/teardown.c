// The teardown helper (teardown.h). Runs on the host: forked by the init
// of `neonbox-ns exec` at its start, before it unshares anything, it waits
// for one job and does it after neonbox-ns has written the receipt and
// exited, so that the caller does not wait for the removal of the run's
// cgroup and run dir, nor for the RCU grace period of the jail's unmount.
//
//   neonbox-ns (constructor, then Go)    init's first process    helper
//   -----------------------------------  ----------------------  ------------------
//   socketpair; vfork+exec the init   -> fd JT_INIT_FD: fork  -> closes all but
//      with one end                      close it, go on          its socket;
//                                                                 sends its pid
//   reads the pid (owner file)        <-----------------------------'   recvmsg
//   run ... receipt written
//   sendmsg(job, mount ns fd), exit   ----------------------------> close the fd
//                                                                 (unmount), the
//                                                                 ops; exit
//   (or exit without a job)                                       EOF: exit
//
// Only system calls run here (a test forks it from a multi-threaded Go
// process): no allocation, no stdio.
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/openat2.h>
#include <signal.h>
#include <stdint.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "teardown.h"

#ifndef SYS_close_range
#define SYS_close_range 436
#endif
#ifndef SYS_renameat2
#define SYS_renameat2 316
#endif
#ifndef RENAME_NOREPLACE
#define RENAME_NOREPLACE 1
#endif
#ifndef SYS_openat2
#define SYS_openat2 437
#endif

// Deeper trees (a jail can make any) are left to a later run's sweep,
// in Go.
#define MAX_DEPTH 128
#define MAX_FDS 4

static int remove_at(int parent, const char *name, unsigned char type, int depth);

// rmdir_retry removes a cgroup directory. Right after its last task has
// exited a cgroup can be busy for a moment: EBUSY is retried for up to a
// second.
static int rmdir_retry(const char *path)
{
	struct timespec pause = {0, 1000000};
	long waited = 0;
	for (;;) {
		if (rmdir(path) == 0 || errno == ENOENT)
			return 0;
		if (errno != EBUSY || waited >= 1000000000L)
			return -1;
		while (nanosleep(&pause, NULL) < 0 && errno == EINTR)
			;
		waited += pause.tv_nsec;
		pause.tv_nsec = pause.tv_nsec * 2 > 100000000L ? 100000000L : pause.tv_nsec * 2;
	}
}

// open_below opens the directory name in parent for listing, refusing a
// symlink and a mount point.
static int open_below(int parent, const char *name)
{
	struct open_how how = {
		.flags = O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC,
		.resolve = RESOLVE_BENEATH | RESOLVE_NO_XDEV | RESOLVE_NO_SYMLINKS,
	};
	long fd;
	do
		fd = syscall(SYS_openat2, parent, name, &how, sizeof(how));
	while (fd < 0 && (errno == EINTR || errno == EAGAIN));
	return (int)fd;
}

// for_each_entry calls fn(ctx, fd, entry) for each entry of the
// directory fd but . and .., as getdents64 lists them from where fd's
// offset is, and goes on when fn fails: -1 if the listing or any fn
// failed.
static int for_each_entry(int fd, int (*fn)(void *ctx, int fd, struct dirent64 *d), void *ctx)
{
	char buf[4096] __attribute__((aligned(8)));
	int rc = 0;
	for (;;) {
		long n = syscall(SYS_getdents64, fd, buf, sizeof(buf));
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return -1;
		if (n == 0)
			return rc;
		for (long off = 0; off < n;) {
			struct dirent64 *d = (struct dirent64 *)(buf + off);
			off += d->d_reclen;
			if (strcmp(d->d_name, ".") && strcmp(d->d_name, "..") && fn(ctx, fd, d) < 0)
				rc = -1;
		}
	}
}

struct removal {
	int depth;
	const char *skip;
};

static int remove_entry(void *ctx, int fd, struct dirent64 *d)
{
	struct removal *r = ctx;
	if (r->skip && !strcmp(d->d_name, r->skip))
		return 0;
	return remove_at(fd, d->d_name, d->d_type, r->depth + 1);
}

// empty_dir removes every entry of the directory fd but skip (if any).
static int empty_dir(int fd, int depth, const char *skip)
{
	struct removal r = {depth, skip};
	return for_each_entry(fd, remove_entry, &r);
}

static int count_entry(void *ctx, int fd, struct dirent64 *d)
{
	(void)fd;
	(void)d;
	(*(int *)ctx)++;
	return 0;
}

// entries counts the entries of the directory fd from its start, or
// returns -1.
static int entries(int fd)
{
	int n = 0;
	if (lseek(fd, 0, SEEK_SET) < 0 || for_each_entry(fd, count_entry, &n) < 0)
		return -1;
	return n;
}

// remove_at removes name in parent and everything below it, as
// linux.RemoveAll does: an empty directory is one rmdir; a mount point
// (rmdir says EBUSY; openat2 EXDEV) and what is below it stay.
static int remove_at(int parent, const char *name, unsigned char type, int depth)
{
	if (type != DT_DIR && type != DT_UNKNOWN)
		return unlinkat(parent, name, 0) == 0 || errno == ENOENT ? 0 : -1;
	if (unlinkat(parent, name, AT_REMOVEDIR) == 0 || errno == ENOENT)
		return 0;
	if (errno == ENOTDIR)
		return unlinkat(parent, name, 0) == 0 || errno == ENOENT ? 0 : -1;
	if ((errno != ENOTEMPTY && errno != EEXIST) || depth >= MAX_DEPTH)
		return -1;
	int fd = open_below(parent, name);
	// Overlay leaves work/work with mode 0: its owner makes it listable.
	if (fd < 0 && errno == EACCES && fchmodat(parent, name, 0700, 0) == 0)
		fd = open_below(parent, name);
	if (fd < 0)
		return errno == ENOENT ? 0 : -1;
	int rc = -1;
	// Entries removed while the directory is read may make the listing
	// skip others: then it is read again.
	for (int pass = 0; pass < 3; pass++) {
		if (empty_dir(fd, depth, NULL) < 0)
			break;
		if (unlinkat(parent, name, AT_REMOVEDIR) == 0 || errno == ENOENT) {
			rc = 0;
			break;
		}
		if (errno != ENOTEMPTY || lseek(fd, 0, SEEK_SET) < 0)
			break;
	}
	close(fd);
	return rc;
}

// remove_rundir empties the run dir but for its owner file, then, if
// cgroups_gone, removes the owner file and the directory.
static int remove_rundir(const char *path, int cgroups_gone)
{
	int fd = open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0)
		return errno == ENOENT ? 0 : -1;
	int rc = empty_dir(fd, 0, "owner");
	if (rc == 0 && cgroups_gone && unlinkat(fd, "owner", 0) < 0 && errno != ENOENT)
		rc = -1;
	close(fd);
	if (rc < 0 || !cgroups_gone)
		return -1;
	return rmdir(path) == 0 || errno == ENOENT ? 0 : -1;
}

// spares_full reports whether the directory that is to hold spare (a
// path in it) holds JT_MAX_SPARES entries or more, or cannot be read.
static int spares_full(const char *spare)
{
	char dir[4096];
	const char *slash = strrchr(spare, '/');
	size_t len = slash ? (size_t)(slash - spare) : 0;
	if (len == 0 || len >= sizeof(dir))
		return 1;
	memcpy(dir, spare, len);
	dir[len] = '\0';
	int fd = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0)
		return 1;
	int n = entries(fd);
	close(fd);
	return n < 0 || n >= JT_MAX_SPARES;
}

// empty_layer empties the run dir's upper or work dir, name, and checks
// that it is empty: the next run sees what it holds.
static int empty_layer(int rundir, const char *name)
{
	int fd = open_below(rundir, name);
	if (fd < 0)
		return -1;
	int rc = -1;
	for (int pass = 0; pass < 3 && rc < 0; pass++)
		if (lseek(fd, 0, SEEK_SET) == 0 && empty_dir(fd, 1, NULL) == 0 && entries(fd) == 0)
			rc = 0;
	close(fd);
	return rc;
}

static int clear_rundir_entry(void *ctx, int fd, struct dirent64 *d)
{
	(void)ctx;
	if (!strcmp(d->d_name, "owner") || !strcmp(d->d_name, "upper") || !strcmp(d->d_name, "work"))
		return 0;
	return remove_at(fd, d->d_name, d->d_type, 1);
}

// recycle_rundir empties the run dir path for a later run and moves it
// to spare: its upper and work dirs are emptied but kept, everything
// else goes, the owner file last (only once every cgroup is gone, as
// remove_rundir). -1: not recycled; remove_rundir finishes.
static int recycle_rundir(const char *path, const char *spare, int cgroups_gone)
{
	if (!cgroups_gone || spares_full(spare))
		return -1;
	int fd = open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0)
		return -1;
	int rc = -1;
	// Only owner, upper and work left, the last two empty.
	if (for_each_entry(fd, clear_rundir_entry, NULL) == 0 && entries(fd) == 3 &&
	    empty_layer(fd, "upper") == 0 && empty_layer(fd, "work") == 0 && unlinkat(fd, "owner", 0) == 0 &&
	    syscall(SYS_renameat2, AT_FDCWD, path, AT_FDCWD, spare, RENAME_NOREPLACE) == 0)
		rc = 0;
	close(fd);
	return rc;
}

// run_job does the job in msg (n bytes): see teardown.h. *rundir is the
// run dir it names, if any.
static int run_job(const char *msg, size_t n, const char **rundir)
{
	static const char magic[] = JT_MAGIC;
	if (n < sizeof(magic) || memcmp(msg, magic, sizeof(magic)) != 0 || msg[n - 1] != '\0')
		return -1;
	int cgroups_gone = 1, rc = 0;
	const char *spare = NULL;
	for (const char *p = msg + sizeof(magic), *end = msg + n; p < end;) {
		const char *op = p;
		p += strlen(p) + 1;
		if (p >= end)
			return -1;
		const char *path = p;
		p += strlen(p) + 1;
		if (!strcmp(op, "cgroup")) {
			if (rmdir_retry(path) < 0)
				cgroups_gone = 0;
		} else if (!strcmp(op, "shared")) {
			(void)rmdir(path);
		} else if (!strcmp(op, "spare")) {
			spare = path;
		} else if (!strcmp(op, "rundir")) {
			*rundir = path;
			if ((!spare || recycle_rundir(path, spare, cgroups_gone) < 0) &&
			    remove_rundir(path, cgroups_gone) < 0)
				rc = -1;
		} else {
			return -1;
		}
	}
	return cgroups_gone && rc == 0 ? 0 : -1;
}

// close_entry closes the descriptor an entry of /proc/self/fd names, if
// it is above stderr and neither *keep nor the listing's own.
static int close_entry(void *keep, int dir, struct dirent64 *d)
{
	int fd = 0, digits = 0;
	for (const char *c = d->d_name; *c >= '0' && *c <= '9'; c++, digits++)
		fd = fd * 10 + (*c - '0');
	if (digits > 0 && fd > 2 && fd != *(int *)keep && fd != dir)
		close(fd);
	return 0;
}

// close_all_but closes every descriptor above stderr but keep, as
// /proc/self/fd lists them (without close_range: a kernel before 5.9,
// or a seccomp profile that denies it).
static void close_all_but(int keep)
{
	int dir = open("/proc/self/fd", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (dir < 0)
		return;
	(void)for_each_entry(dir, close_entry, &keep);
	close(dir);
}

// settle detaches the helper from everything it was forked with but
// sock: it must not keep the caller's pipes open (a caller reading
// neonbox-ns's output to its end would wait for it), nor the init's
// sync socket.
static void settle(int sock, int from_go)
{
	// Its own session: a signal for neonbox-ns's process group (^C, a
	// hangup) is not for it. (The init's is its own already.)
	(void)setsid();
	if (from_go) {
		// A test forked it from Go, whose handlers cannot run here.
		for (int sig = 1; sig < NSIG; sig++)
			(void)signal(sig, SIG_DFL);
		sigset_t none;
		sigemptyset(&none);
		sigprocmask(SIG_SETMASK, &none, NULL);
	}
	int null = open("/dev/null", O_RDWR | O_CLOEXEC);
	for (int fd = 0; fd < 3; fd++)
		if (fd != sock)
			(void)(null >= 0 ? dup2(null, fd) : close(fd));
	if (null > 2 && null != sock)
		close(null);
	if ((sock > 3 && syscall(SYS_close_range, 3, sock - 1, 0) < 0) ||
	    syscall(SYS_close_range, sock + 1, ~0U, 0) < 0)
		close_all_but(sock);
}

// helper_main is the helper: it says its pid, then waits for its job.
static void __attribute__((noreturn)) helper_main(int sock, int from_go)
{
	settle(sock, from_go);
	int32_t pid = getpid();
	if (send(sock, &pid, sizeof(pid), MSG_NOSIGNAL) != sizeof(pid))
		_exit(0);
	static char msg[JT_MAX_JOB];
	union {
		char buf[CMSG_SPACE(MAX_FDS * sizeof(int))];
		struct cmsghdr align;
	} cbuf;
	struct iovec iov = {msg, sizeof(msg)};
	struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = cbuf.buf, .msg_controllen = sizeof(cbuf.buf)};
	ssize_t n;
	while ((n = recvmsg(sock, &mh, MSG_CMSG_CLOEXEC)) < 0 && errno == EINTR)
		;
	// neonbox-ns closes its own descriptor of the jail's mount namespace
	// before the socket: once the socket ends, the helper's is the last
	// reference, and closing it unmounts the jail's tree (and waits for
	// an RCU grace period) here.
	for (char b; n > 0;) {
		ssize_t r = recv(sock, &b, 1, 0);
		if (r == 0 || (r < 0 && errno != EINTR))
			break;
	}
	close(sock);
	for (struct cmsghdr *c = CMSG_FIRSTHDR(&mh); c; c = CMSG_NXTHDR(&mh, c)) {
		if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS) {
			int fds[MAX_FDS];
			size_t k = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
			memcpy(fds, CMSG_DATA(c), k * sizeof(int));
			for (size_t i = 0; i < k && i < MAX_FDS; i++)
				close(fds[i]);
		}
	}
	if (n <= 0 || (mh.msg_flags & MSG_TRUNC))
		_exit(0);
	const char *rundir = NULL;
	if (run_job(msg, (size_t)n, &rundir) == 0)
		_exit(0);
	// Go finishes what is left (not from a test: that binary is no
	// neonbox-ns).
	if (rundir && !from_go) {
		char *const argv[] = {JT_FALLBACK_NAME, (char *)rundir, NULL};
		static char *const envp[] = {NULL};
		execve("/proc/self/exe", argv, envp);
	}
	_exit(1);
}

int jt_start(void)
{
	int pair[2];
	if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, pair) < 0)
		return -1;
	pid_t pid = fork();
	if (pid == 0)
		helper_main(pair[1], 1); // settle closes pair[0]
	int err = errno;
	close(pair[1]);
	if (pid < 0) {
		close(pair[0]);
		errno = err;
		return -1;
	}
	return pair[0];
}

void jt_fork_from_init(int sock)
{
	// On a failure there is no helper: neonbox-ns reads EOF and cleans
	// up itself.
	if (fork() == 0)
		helper_main(sock, 0);
	close(sock);
}
