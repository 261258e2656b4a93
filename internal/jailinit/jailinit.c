// Runs in the jail's init: the neonbox-ns binary re-executed as
// "neonbox-init". It runs as a constructor, before the Go runtime starts,
// executes the program the parent sent (see jailinit.h) and execs CMD.
// The program's first steps make the jail: the re-executed process forks
// pid 1 in new namespaces (the init proper), maps the ids of its user
// namespace, makes its network namespace and exits; the init builds the
// jail and execs CMD. The
// parent starts it with vfork: no copy of its own large address space.
// It decides nothing: each path, flag and order comes from the parent.
// Any failed step is reported, as the JSON
// {"error":{stage,op,path,errno,message}}, and ends the process.

#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <linux/capability.h>
#include <linux/filter.h>
#include <linux/mount.h>
#include <linux/seccomp.h>
#include <net/if.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "jailinit.h"
#include "teardown.h"

#define MAX_MSG (1 << 20)
#define MAX_MARKS 32
// Each string takes at least 5 bytes (length and NUL): a message cannot
// hold more.
#define MAX_STRS (MAX_MSG / 5)

#ifndef CLOSE_RANGE_CLOEXEC
#define CLOSE_RANGE_CLOEXEC (1U << 2)
#endif
#ifndef SYS_close_range
#define SYS_close_range 436
#endif
#ifndef SYS_pidfd_open
#define SYS_pidfd_open 434
#endif
#ifndef SYS_open_tree
#define SYS_open_tree 428
#endif
#ifndef SYS_move_mount
#define SYS_move_mount 429
#endif
#ifndef SYS_mount_setattr
#define SYS_mount_setattr 442
#endif
#ifndef OPEN_TREE_CLONE
#define OPEN_TREE_CLONE 1
#endif
#ifndef AT_RECURSIVE
#define AT_RECURSIVE 0x8000
#endif
#ifndef MOVE_MOUNT_F_EMPTY_PATH
#define MOVE_MOUNT_F_EMPTY_PATH 0x00000004
#endif

struct ji_mount_attr {
	uint64_t attr_set, attr_clr, propagation, userns_fd;
};

struct op {
	uint16_t code, flags;
	uint32_t nstr;
	uint64_t a, b;
	char **s;      // nstr strings: stage, op, path, then the arguments
	uint32_t *len; // their lengths (a seccomp program may hold NULs)
};

struct prog {
	struct op *ops;
	uint32_t n;
	int fds[JI_MAX_FDS];
	int nfds;
};

// The state the ops build up for execve.
static struct {
	char **argv, **envp;
	const char *cwd, *path;
	struct {
		const char *name;
		int64_t at;
	} marks[MAX_MARKS];
	int nmarks;
	int parent;     // pidfd of neonbox-ns, once clone_init made the init; else -1
	int netns_from; // where the network namespace comes from (clone_init); else -1
	int idmap_from; // where the word that the ids are mapped comes from (clone_init); else -1
} st = {.parent = -1, .netns_from = -1, .idmap_from = -1};

// ---- reporting -------------------------------------------------------

// put writes one message to the parent; it reports whether it could.
static int put(const char *b, size_t n)
{
	ssize_t w;
	while ((w = write(JI_SYNC_FD, b, n)) < 0 && errno == EINTR)
		;
	return w >= 0;
}

// json_str appends s to out as a JSON string.
static size_t json_str(char *out, size_t cap, size_t at, const char *s)
{
	static const char hex[] = "0123456789abcdef";
	if (at < cap)
		out[at] = '"';
	at++;
	for (; s && *s; s++) {
		unsigned char c = (unsigned char)*s;
		char esc[7];
		size_t n = 0;
		if (c == '"' || c == '\\') {
			esc[n++] = '\\';
			esc[n++] = (char)c;
		} else if (c < 0x20) {
			esc[n++] = '\\';
			esc[n++] = 'u';
			esc[n++] = '0';
			esc[n++] = '0';
			esc[n++] = hex[c >> 4];
			esc[n++] = hex[c & 15];
		} else {
			esc[n++] = (char)c;
		}
		for (size_t i = 0; i < n; i++, at++)
			if (at < cap)
				out[at] = esc[i];
	}
	if (at < cap)
		out[at] = '"';
	return at + 1;
}

static size_t append(char *out, size_t cap, size_t at, const char *s)
{
	for (; *s; s++, at++)
		if (at < cap)
			out[at] = *s;
	return at;
}

static const char too_long[] = "(the error report was too long)";
static const char too_long_report[] =
	"{\"error\":{\"stage\":\"init\",\"message\":\"(the error report was too long)\"}}";

// fail_at reports that op failed on path with err (an errno; the parent
// words it when msg is NULL) or with msg, and ends the init.
static void fail_at(const struct op *op, const char *path, int err, const char *msg)
{
	static char out[JI_MAX_REPORT];
	char num[32];
	size_t cap = sizeof(out), at = 0;
	const char *stage = op ? op->s[0] : "config", *name = op ? op->s[1] : "";
	if (!msg)
		msg = "";
	at = append(out, cap, at, "{\"error\":{\"stage\":");
	at = json_str(out, cap, at, stage);
	at = append(out, cap, at, ",\"op\":");
	at = json_str(out, cap, at, name);
	at = append(out, cap, at, ",\"path\":");
	at = json_str(out, cap, at, path);
	snprintf(num, sizeof(num), ",\"errno\":%d", err);
	at = append(out, cap, at, num);
	at = append(out, cap, at, ",\"message\":");
	at = json_str(out, cap, at, msg);
	at = append(out, cap, at, "}}");
	if (at <= cap)
		put(out, at);
	else if (msg != too_long) // too long to report whole: say what fits
		fail_at(op, "", err, too_long);
	else
		put(too_long_report, sizeof(too_long_report) - 1);
	_exit(1);
}

static void fail(const struct op *op, int err, const char *msg)
{
	fail_at(op, op ? op->s[2] : "", err, msg);
}

static int64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static void mark(const char *name)
{
	if (st.nmarks < MAX_MARKS) {
		st.marks[st.nmarks].name = name;
		st.marks[st.nmarks].at = now_ns();
		st.nmarks++;
	}
}

// report sends {"<key>":true,"steps":[...]}: the marks since the last
// report.
static void report(const struct op *op, const char *key)
{
	static char out[JI_MAX_REPORT];
	char num[64];
	size_t cap = sizeof(out), at = 0;
	at = append(out, cap, at, "{\"");
	at = append(out, cap, at, key);
	at = append(out, cap, at, "\":true,\"steps\":[");
	for (int i = 0; i < st.nmarks; i++) {
		at = append(out, cap, at, i ? ",{\"name\":" : "{\"name\":");
		at = json_str(out, cap, at, st.marks[i].name);
		snprintf(num, sizeof(num), ",\"at\":%lld}", (long long)st.marks[i].at);
		at = append(out, cap, at, num);
	}
	at = append(out, cap, at, "]}");
	if (at > cap)
		fail(op, 0, "report too long");
	if (!put(out, at))
		fail(op, errno, NULL);
	st.nmarks = 0; // the next report has the marks made after this one
}

// ---- decoding --------------------------------------------------------

static uint64_t le(const unsigned char *p, int n)
{
	uint64_t v = 0;
	for (int i = n - 1; i >= 0; i--)
		v = v << 8 | p[i];
	return v;
}

// receive reads one message and its descriptors, and decodes it.
static void receive(struct prog *p)
{
	unsigned char *buf = malloc(MAX_MSG);
	union {
		char buf[CMSG_SPACE(JI_MAX_FDS * sizeof(int))];
		struct cmsghdr align;
	} cbuf;
	struct iovec iov = {buf, MAX_MSG};
	struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = cbuf.buf, .msg_controllen = sizeof(cbuf.buf)};
	ssize_t n;
	if (!buf)
		fail(NULL, ENOMEM, NULL);
	do
		n = recvmsg(JI_SYNC_FD, &mh, MSG_CMSG_CLOEXEC);
	while (n < 0 && errno == EINTR);
	if (n < 0)
		fail(NULL, errno, NULL);
	if (n == 0)
		fail(NULL, 0, "the parent closed the socket before sending a message");
	if (mh.msg_flags & (MSG_TRUNC | MSG_CTRUNC))
		fail(NULL, 0, "message from the parent truncated");
	p->nfds = 0;
	for (struct cmsghdr *c = CMSG_FIRSTHDR(&mh); c; c = CMSG_NXTHDR(&mh, c)) {
		if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS)
			continue;
		int k = (int)((c->cmsg_len - CMSG_LEN(0)) / sizeof(int));
		for (int i = 0; i < k && p->nfds < JI_MAX_FDS; i++)
			memcpy(&p->fds[p->nfds++], CMSG_DATA(c) + i * sizeof(int), sizeof(int));
	}

	const unsigned char *q = buf, *end = buf + n;
#define NEED(k)                                                        \
	do {                                                           \
		if ((size_t)(end - q) < (size_t)(k))                   \
			fail(NULL, 0, "malformed program: truncated"); \
	} while (0)
	NEED(8);
	if (memcmp(q, JI_MAGIC, 4) != 0)
		fail(NULL, 0, "malformed program: bad magic");
	p->n = (uint32_t)le(q + 4, 4);
	q += 8;
	if (p->n > 65536)
		fail(NULL, 0, "malformed program: too many ops");
	p->ops = calloc(p->n ? p->n : 1, sizeof(struct op));
	if (!p->ops)
		fail(NULL, ENOMEM, NULL);
	for (uint32_t i = 0; i < p->n; i++) {
		struct op *op = &p->ops[i];
		NEED(24);
		op->code = (uint16_t)le(q, 2);
		op->flags = (uint16_t)le(q + 2, 2);
		op->nstr = (uint32_t)le(q + 4, 4);
		op->a = le(q + 8, 8);
		op->b = le(q + 16, 8);
		q += 24;
		if (op->code == 0 || op->code >= JI_CODE_END || op->nstr < JI_META || op->nstr > MAX_STRS)
			fail(NULL, 0, "malformed program: bad op");
		op->s = calloc(op->nstr + 1, sizeof(char *));
		op->len = calloc(op->nstr, sizeof(uint32_t));
		if (!op->s || !op->len)
			fail(NULL, ENOMEM, NULL);
		for (uint32_t j = 0; j < op->nstr; j++) {
			NEED(4);
			uint32_t len = (uint32_t)le(q, 4);
			q += 4;
			if ((size_t)len >= (size_t)(end - q))
				fail(NULL, 0, "malformed program: truncated");
			if (q[len] != 0 || (op->code != JI_SECCOMP && memchr(q, 0, len)))
				fail(NULL, 0, "malformed program: bad string");
			op->s[j] = (char *)q;
			op->len[j] = len;
			q += len + 1;
		}
	}
	if (q != end)
		fail(NULL, 0, "malformed program: trailing bytes");
#undef NEED
}

// arg returns op's i-th argument (after the stage, op and path).
static const char *arg(const struct op *op, uint32_t i)
{
	if (JI_META + i >= op->nstr)
		fail(op, 0, "malformed program: missing argument");
	return op->s[JI_META + i];
}

static int slot(const struct prog *p, const struct op *op, uint64_t i)
{
	if (i >= (uint64_t)p->nfds)
		fail(op, 0, "malformed program: no such descriptor");
	return p->fds[i];
}

// ---- steps -----------------------------------------------------------

static int mkdir_all(char *path)
{
	struct stat sb;
	if (path[0] != '/') {
		errno = EINVAL;
		return -1;
	}
	for (char *s = path + 1; *s; s++) {
		if (*s != '/')
			continue;
		*s = 0;
		int r = mkdir(path, 0755);
		*s = '/';
		if (r < 0 && errno != EEXIST)
			return -1;
	}
	if (mkdir(path, 0755) == 0)
		return 0;
	if (errno != EEXIST)
		return -1;
	if (stat(path, &sb) < 0)
		return -1;
	if (!S_ISDIR(sb.st_mode)) {
		errno = ENOTDIR;
		return -1;
	}
	return 0;
}

static int bind_tree(const char *src, const char *dst, uint64_t attrs, int recursive)
{
	unsigned flags = OPEN_TREE_CLONE | O_CLOEXEC | (recursive ? AT_RECURSIVE : 0);
	int fd = (int)syscall(SYS_open_tree, AT_FDCWD, src, flags);
	if (fd < 0)
		return -1;
	if (attrs) {
		struct ji_mount_attr ma = {.attr_set = attrs};
		if (syscall(SYS_mount_setattr, fd, "", AT_EMPTY_PATH | (recursive ? AT_RECURSIVE : 0), &ma, sizeof(ma)) < 0) {
			int e = errno;
			close(fd);
			errno = e;
			return -1;
		}
	}
	int r = (int)syscall(SYS_move_mount, fd, "", AT_FDCWD, dst, MOVE_MOUNT_F_EMPTY_PATH);
	int e = errno;
	close(fd);
	errno = e;
	return r;
}

static int link_up(const char *name)
{
	struct ifreq ifr;
	int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0), r = -1;
	if (fd < 0)
		return -1;
	memset(&ifr, 0, sizeof(ifr));
	strncpy(ifr.ifr_name, name, IFNAMSIZ - 1);
	if (ioctl(fd, SIOCGIFFLAGS, &ifr) == 0) {
		ifr.ifr_flags |= IFF_UP;
		r = ioctl(fd, SIOCSIFFLAGS, &ifr);
	}
	int e = errno;
	close(fd);
	errno = e;
	return r;
}

static int pivot(const char *root)
{
	if (chdir(root) < 0)
		return -1;
	// pivot_root(".", ".") stacks the old root on the new one; detaching
	// "." then removes it (pivot_root(2), NOTES).
	if (syscall(SYS_pivot_root, ".", ".") < 0)
		return -1;
	if (umount2(".", MNT_DETACH) < 0)
		return -1;
	return chdir("/");
}

static int lower_rlimit(int resource, uint64_t max)
{
	struct rlimit rl;
	if (getrlimit(resource, &rl) < 0)
		return -1;
	if (rl.rlim_max != RLIM_INFINITY && rl.rlim_max <= max)
		return 0;
	rl.rlim_max = max;
	if (rl.rlim_cur == RLIM_INFINITY || rl.rlim_cur > max)
		rl.rlim_cur = max;
	return setrlimit(resource, &rl);
}

static int capset_zero(void)
{
	struct __user_cap_header_struct h = {.version = _LINUX_CAPABILITY_VERSION_3};
	struct __user_cap_data_struct d[2];
	memset(d, 0, sizeof(d));
	return (int)syscall(SYS_capset, &h, d);
}

static int load_seccomp(const struct op *op, const char *bpf, size_t len)
{
	if (len == 0 || len % sizeof(struct sock_filter) != 0 || len / sizeof(struct sock_filter) > BPF_MAXINSNS)
		fail(op, 0, "empty or malformed seccomp program");
	struct sock_fprog prog = {.len = (unsigned short)(len / sizeof(struct sock_filter)), .filter = (struct sock_filter *)bpf};
	return (int)syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, 0, &prog);
}

// lookpath finds file along the directories of path, as execvp(3) would,
// accepting only regular files with an execute bit.
static const char *lookpath(const char *file, const char *path)
{
	static char buf[4096];
	if (strchr(file, '/'))
		return file;
	if (!*path) // PATH= searches nothing
		return NULL;
	for (const char *p = path;; p++) {
		const char *e = strchrnul(p, ':');
		int n = (int)(e - p), w;
		if (n == 0)
			w = snprintf(buf, sizeof(buf), "./%s", file);
		else
			w = snprintf(buf, sizeof(buf), "%.*s/%s", n, p, file);
		struct stat sb;
		if (w > 0 && (size_t)w < sizeof(buf) && stat(buf, &sb) == 0 && S_ISREG(sb.st_mode) && (sb.st_mode & 0111))
			return buf;
		if (!*e)
			return NULL;
		p = e;
	}
}

static const char *getenv_in(char **envp, const char *key)
{
	size_t k = strlen(key);
	const char *v = NULL;
	for (char **e = envp; e && *e; e++)
		if (strncmp(*e, key, k) == 0 && (*e)[k] == '=')
			v = *e + k + 1; // the last one wins, as in Go's lookPath
	return v;
}

static void run(struct prog *p, int in_call);

// take_stdio makes fds[0..2] the process's stdin, stdout and stderr.
static void take_stdio(const struct op *op, const int *fds)
{
	for (int i = 0; i < 3; i++) {
		if (dup3(fds[i], i, 0) < 0)
			fail(op, errno, NULL);
		close(fds[i]);
	}
}

// await_call says the jail is prepared, then takes the call: a program
// of JI_ARGV, JI_ENV and JI_CWD ops, with stdin, stdout and stderr.
static void await_call(const struct op *op)
{
	struct prog call;
	report(op, "prepared");
	receive(&call);
	if (call.nfds != 3)
		fail(op, 0, "want a command and 3 descriptors");
	take_stdio(op, call.fds);
	run(&call, 1);
	if (!st.argv || !st.argv[0])
		fail(op, 0, "the call has no command");
}

// set_pdeathsig asks for sig when the thread of neonbox-ns that started
// the jail exits. If neonbox-ns has already exited, no signal would come:
// the init exits now.
static int set_pdeathsig(int sig)
{
	if (prctl(PR_SET_PDEATHSIG, (unsigned long)sig, 0, 0, 0) < 0)
		return -1;
	struct pollfd pfd = {.fd = st.parent, .events = POLLIN};
	if (st.parent >= 0 && poll(&pfd, 1, 0) != 0)
		_exit(1);
	return 0;
}

// send_fd sends len bytes of buf and fd over the unix socket sock
// (see jailinit.h).
static int send_fd(int sock, const void *buf, size_t len, int fd)
{
	union {
		char buf[CMSG_SPACE(sizeof(int))];
		struct cmsghdr align;
	} cbuf;
	struct iovec iov = {(void *)buf, len};
	struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = cbuf.buf, .msg_controllen = sizeof(cbuf.buf)};
	struct cmsghdr *c = CMSG_FIRSTHDR(&mh);
	c->cmsg_level = SOL_SOCKET;
	c->cmsg_type = SCM_RIGHTS;
	c->cmsg_len = CMSG_LEN(sizeof(int));
	memcpy(CMSG_DATA(c), &fd, sizeof(int));
	return sendmsg(sock, &mh, MSG_NOSIGNAL) == (ssize_t)len ? 0 : -1;
}

// recv_fd receives a one-byte message with a descriptor (send_fd): the descriptor (close-on-exec),
// -1 with errno set, or -2 if the message held none (or there was none).
static int recv_fd(int sock)
{
	char b;
	union {
		char buf[CMSG_SPACE(sizeof(int))];
		struct cmsghdr align;
	} cbuf;
	struct iovec iov = {&b, 1};
	struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = cbuf.buf, .msg_controllen = sizeof(cbuf.buf)};
	ssize_t n;
	int fd;
	while ((n = recvmsg(sock, &mh, MSG_CMSG_CLOEXEC)) < 0 && errno == EINTR)
		;
	if (n < 0)
		return -1;
	struct cmsghdr *c = CMSG_FIRSTHDR(&mh);
	if (n != 1 || !c || c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS || c->cmsg_len != CMSG_LEN(sizeof(int)))
		return -2;
	memcpy(&fd, CMSG_DATA(c), sizeof(int));
	return fd;
}

// write_map writes text to pid's /proc file name, or fails the init.
static void write_map(const struct op *op, pid_t pid, const char *name, const char *text)
{
	char path[64];
	snprintf(path, sizeof(path), "/proc/%d/%s", (int)pid, name);
	int fd = open(path, O_WRONLY | O_CLOEXEC);
	if (fd < 0)
		fail_at(op, path, errno, NULL);
	size_t n = strlen(text);
	ssize_t w = write(fd, text, n);
	if (w < 0 || (size_t)w != n)
		fail_at(op, path, w < 0 ? errno : EIO, NULL);
	close(fd);
}

// map_ids writes the id maps of pid's user namespace: map for both uids
// and gids, or, if empty, the jail's root as this process's own ids,
// with setgroups denied first, as the kernel then requires
// (user_namespaces(7)). A failure ends this process, reported.
static void map_ids(const struct op *op, pid_t pid, const char *map)
{
	if (map[0]) {
		write_map(op, pid, "uid_map", map); // setgroups stays allowed
		write_map(op, pid, "gid_map", map);
		return;
	}
	char own[64];
	snprintf(own, sizeof(own), "0 %u 1\n", (unsigned)geteuid());
	write_map(op, pid, "uid_map", own);
	write_map(op, pid, "setgroups", "deny");
	snprintf(own, sizeof(own), "0 %u 1\n", (unsigned)getegid());
	write_map(op, pid, "gid_map", own);
}

// clone_init forks pid 1 in new namespaces (op->a: the user namespace
// and the others, and always a pid namespace). CLONE_PARENT makes it the
// child of neonbox-ns, which waits for it; this process reports its pid
// first of all, so that whatever happens next neonbox-ns knows its
// child. Then, still in neonbox-ns's user namespace, it maps pid 1's ids
// (map_ids, with the map in the op's argument; an empty map is refused
// to root, whose own ids it would give the jail's root) and reports
// {"mapped":true}, on which neonbox-ns may rely on the maps (an idmapped
// mount needs them); a failure to map is reported instead. Pid 1 waits
// for its maps (JI_AWAIT_IDMAP).
//
// With a network namespace (op->b), this process then joins pid 1's user
// namespace and makes it there (the costliest namespace to make) while
// pid 1 goes on, and sends it to pid 1, which joins it later
// (JI_JOIN_NETNS); if this process dies first, pid 1 finds no network
// namespace and fails. This process then exits.
static void clone_init(const struct op *op)
{
	int net = op->b != 0;
	const char *map = arg(op, 0);
	if (!map[0] && geteuid() == 0)
		fail(op, 0, "refusing to map the jail's root to host root");
	int go[2] = {-1, -1}, mapped[2];
	if (pipe2(mapped, O_CLOEXEC) < 0)
		fail(op, errno, NULL);
	if (net && socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, go) < 0)
		fail(op, errno, NULL);
	// pid 1's parent will be neonbox-ns (getppid() would say 0 in the
	// new pid namespace): keep a pidfd of it to check it is alive.
	st.parent = (int)syscall(SYS_pidfd_open, getppid(), 0);
	if (st.parent < 0)
		fail(op, errno, NULL);
	unsigned long flags = CLONE_PARENT | CLONE_NEWPID | (unsigned long)op->a | SIGCHLD;
	pid_t pid = (pid_t)syscall(SYS_clone, flags, 0, NULL, NULL, 0);
	if (pid < 0)
		fail(op, errno, NULL);
	if (pid == 0) {
		close(mapped[1]);
		st.idmap_from = mapped[0];
		if (net)
			close(go[1]);
		st.netns_from = go[0];
		// Dies with the thread of neonbox-ns that started the jail,
		// as that thread's own child would.
		if (set_pdeathsig(SIGKILL) < 0)
			fail(op, errno, NULL);
		return;
	}
	close(mapped[0]);
	if (net)
		close(go[0]);
	// clone returns the pid neonbox-ns knows pid 1 by: this process is
	// in neonbox-ns's pid namespace.
	char msg[64], path[64];
	int n = snprintf(msg, sizeof(msg), "{\"pid\":%d}", (int)pid);
	if (!put(msg, (size_t)n))
		_exit(1); // neonbox-ns is gone; pid 1 reads EOF and fails too
	// Opened while pid 1 still waits with this process's credentials
	// (once it is the jail's root, /proc may refuse it to others).
	int userns = -1;
	snprintf(path, sizeof(path), "/proc/%d/ns/user", (int)pid);
	if (net && (userns = open(path, O_RDONLY | O_CLOEXEC)) < 0)
		fail_at(op, path, errno, NULL);
	map_ids(op, pid, map); // a failure: pid 1 reads EOF and fails too
	// Said before pid 1 goes on, so that it comes before anything pid 1
	// says.
	static const char done[] = "{\"mapped\":true}";
	if (!put(done, sizeof(done) - 1))
		_exit(1);
	if (write(mapped[1], "", 1) != 1)
		fail(op, errno, NULL);
	close(mapped[1]);
	if (net) {
		// A failure is reported as this process's; pid 1, sent
		// nothing, fails too.
		if (setns(userns, CLONE_NEWUSER) < 0)
			fail_at(op, path, errno, NULL);
		close(userns);
		if (unshare(CLONE_NEWNET) < 0)
			fail_at(op, "unshare CLONE_NEWNET", errno, NULL);
		int ns = open("/proc/self/ns/net", O_RDONLY | O_CLOEXEC);
		if (ns < 0)
			fail_at(op, "/proc/self/ns/net", errno, NULL);
		if (send_fd(go[1], "", 1, ns) < 0)
			fail_at(op, "sendmsg", errno, NULL);
	}
	_exit(0);
}

// join_netns joins the network namespace clone_init's other process made.
static void join_netns(const struct op *op)
{
	if (st.netns_from < 0)
		fail(op, 0, "no network namespace is coming");
	int ns = recv_fd(st.netns_from);
	if (ns == -1)
		fail(op, errno, NULL);
	if (ns < 0)
		fail(op, 0, "no network namespace came");
	if (setns(ns, CLONE_NEWNET) < 0)
		fail(op, errno, NULL);
	close(ns);
	close(st.netns_from);
	st.netns_from = -1;
}

// await_idmap waits until the process that forked this one has written
// the user namespace's id maps (clone_init). EOF means it could not.
static void await_idmap(const struct op *op)
{
	char b;
	ssize_t n;
	if (st.idmap_from < 0)
		fail(op, 0, "no id maps are coming");
	while ((n = read(st.idmap_from, &b, 1)) < 0 && errno == EINTR)
		;
	if (n < 0)
		fail(op, errno, NULL);
	if (n == 0)
		fail(op, 0, "the jail's ids were not mapped");
	close(st.idmap_from);
	st.idmap_from = -1;
}

static char **strings(const struct op *op)
{
	return op->s + JI_META;
}

static void run(struct prog *p, int in_call)
{
	for (uint32_t i = 0; i < p->n; i++) {
		struct op *op = &p->ops[i];
		int r = 0;
		if (in_call && op->code != JI_ARGV && op->code != JI_ENV && op->code != JI_CWD)
			fail(op, 0, "malformed call: op not allowed");
		if ((op->flags & JI_IF_EXISTS) && op->s[2][0]) {
			struct stat sb;
			if (lstat(op->s[2], &sb) < 0 && errno == ENOENT)
				continue;
		}
		switch (op->code) {
		case JI_MARK:
			mark(op->s[0]);
			break;
		case JI_MOUNT:
			r = mount(arg(op, 0)[0] ? arg(op, 0) : NULL, arg(op, 1), arg(op, 2)[0] ? arg(op, 2) : NULL,
				  (unsigned long)op->a, arg(op, 3)[0] ? arg(op, 3) : NULL);
			break;
		case JI_UMOUNT:
			r = umount2(arg(op, 0), (int)op->a);
			break;
		case JI_MKDIR:
			r = mkdir(arg(op, 0), (mode_t)op->a);
			break;
		case JI_RMDIR:
			r = rmdir(arg(op, 0));
			break;
		case JI_MKDIR_ALL:
			r = mkdir_all((char *)arg(op, 0));
			break;
		case JI_SYMLINK:
			r = symlink(arg(op, 0), arg(op, 1));
			break;
		case JI_CREATE:
			r = open(arg(op, 0), O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC, (mode_t)op->a);
			if (r >= 0)
				r = close(r);
			break;
		case JI_LCHOWN:
			r = lchown(arg(op, 0), (uid_t)op->a, (gid_t)op->b);
			break;
		case JI_BIND:
			r = bind_tree(arg(op, 0), arg(op, 1), op->a, op->flags & JI_RECURSIVE);
			break;
		case JI_MOVE_FD: {
			int fd = slot(p, op, op->a);
			r = (int)syscall(SYS_move_mount, fd, "", AT_FDCWD, arg(op, 0), MOVE_MOUNT_F_EMPTY_PATH);
			int e = errno;
			close(fd);
			errno = e;
			break;
		}
		case JI_SETATTR_FD: {
			struct ji_mount_attr ma = {.attr_set = op->b};
			r = (int)syscall(SYS_mount_setattr, slot(p, op, op->a), "", AT_EMPTY_PATH, &ma, sizeof(ma));
			break;
		}
		case JI_PIVOT:
			r = pivot(arg(op, 0));
			break;
		case JI_HOSTNAME:
			r = sethostname(arg(op, 0), strlen(arg(op, 0)));
			break;
		case JI_LINK_UP:
			r = link_up(arg(op, 0));
			break;
		case JI_CWD:
			st.cwd = arg(op, 0);
			break;
		case JI_CHDIR:
			if (!st.cwd)
				fail(op, 0, "no working directory");
			r = chdir(st.cwd);
			if (r < 0)
				fail(op, errno, NULL);
			break;
		case JI_JOIN_CGROUP:
			for (uint64_t k = 0; k < op->b; k++) {
				int fd = slot(p, op, op->a + k);
				if (write(fd, "0", 1) != 1)
					fail(op, errno, NULL);
				close(fd);
			}
			break;
		case JI_RLIMIT:
			r = lower_rlimit((int)op->a, op->b);
			break;
		case JI_SECUREBITS:
			r = prctl(PR_SET_SECUREBITS, (unsigned long)op->a, 0, 0, 0);
			break;
		case JI_CAPBSET_DROP:
			for (uint64_t c = 0; c <= op->a && r == 0; c++)
				r = prctl(PR_CAPBSET_DROP, (unsigned long)c, 0, 0, 0);
			break;
		case JI_AMBIENT_CLEAR:
			r = prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0);
			break;
		case JI_SETGROUPS:
			r = (int)syscall(SYS_setgroups, 0, NULL);
			break;
		case JI_SETRESGID:
			r = (int)syscall(SYS_setresgid, (gid_t)op->a, (gid_t)op->a, (gid_t)op->a);
			break;
		case JI_SETRESUID:
			r = (int)syscall(SYS_setresuid, (uid_t)op->a, (uid_t)op->a, (uid_t)op->a);
			break;
		case JI_CAPSET_ZERO:
			r = capset_zero();
			break;
		case JI_NO_NEW_PRIVS:
			r = prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0);
			break;
		case JI_SECCOMP: {
			const char *bpf = arg(op, 0); // checks that it is there
			r = load_seccomp(op, bpf, op->len[JI_META]);
			break;
		}
		case JI_PDEATHSIG:
			r = set_pdeathsig((int)op->a);
			break;
		case JI_ARGV:
			st.argv = strings(op);
			break;
		case JI_ENV:
			st.envp = strings(op);
			break;
		case JI_AWAIT_CALL:
			await_call(op);
			break;
		case JI_CONTINUE: {
			// The rest never returns: it ends in execve or a failure.
			struct prog rest;
			receive(&rest);
			run(&rest, 0);
			fail(op, 0, "the program ended without exec");
			break;
		}
		case JI_CLONE_INIT:
			clone_init(op);
			break;
		case JI_AWAIT_IDMAP:
			await_idmap(op);
			break;
		case JI_JOIN_NETNS:
			join_netns(op);
			break;
		case JI_STDIO:
			slot(p, op, op->a);
			slot(p, op, op->a + 2); // and so all three
			take_stdio(op, &p->fds[op->a]);
			break;
		case JI_LOOKPATH: {
			if (!st.argv || !st.argv[0])
				fail(op, 0, "no command");
			const char *path = getenv_in(st.envp, "PATH");
			st.path = lookpath(st.argv[0], path ? path : arg(op, 0));
			if (!st.path)
				fail_at(op, st.argv[0], ENOENT, "command not found in the jail's PATH: no such file or directory");
			break;
		}
		case JI_READY:
			report(op, "ready");
			break;
		case JI_EXEC:
			if (!st.path)
				fail(op, 0, "no command");
			execve(st.path, st.argv, st.envp);
			fail_at(op, st.path, errno, NULL);
			break;
		default:
			fail(op, 0, "malformed program: unknown op");
		}
		if (r < 0)
			fail(op, errno, NULL);
	}
}

// mark_all_cloexec is close_range(CLOSE_RANGE_CLOEXEC) for kernels before
// 5.11.
static void mark_all_cloexec(void)
{
	DIR *d = opendir("/proc/self/fd");
	struct dirent *e;
	if (!d)
		fail(NULL, errno, "cannot mark inherited descriptors close-on-exec");
	while ((e = readdir(d))) {
		int fd = atoi(e->d_name);
		if (fd > 2 && fd != dirfd(d))
			fcntl(fd, F_SETFD, FD_CLOEXEC);
	}
	closedir(d);
}

#ifndef __GLIBC__
int ji_args(char ***out)
{
	static char buf[4096];
	static char *args[JI_ARGS_MAX + 1];
	static int n = -1;
	if (n < 0) {
		n = 0;
		int fd = open("/proc/self/cmdline", O_RDONLY | O_CLOEXEC);
		ssize_t len = fd < 0 ? -1 : read(fd, buf, sizeof(buf) - 1);
		if (fd >= 0)
			close(fd);
		for (char *q = buf; len > 0 && q < buf + len && n < JI_ARGS_MAX; q += strlen(q) + 1)
			args[n++] = q; // buf is zeroed, and read leaves its last byte alone
	}
	*out = args;
	return n;
}
#endif

// glibc passes argc, argv and envp to constructors; under musl, ji_args
// reads them.
#ifdef __GLIBC__
__attribute__((constructor)) static void neonbox_init(int argc, char **argv, char **envp)
{
	(void)envp;
#else
__attribute__((constructor)) static void neonbox_init(void)
{
	// The init starts with an empty environment: anything else is no
	// init, without a read of /proc/self/cmdline.
	extern char **environ;
	if (environ && environ[0])
		return;
	char **argv;
	int argc = ji_args(&argv);
#endif
	if (argc < 1 || !argv || !argv[0] || strcmp(argv[0], JI_NAME) != 0)
		return;
	mark("started");
	// `neonbox-ns exec` gives its init the teardown helper's socket: the
	// helper is forked from here, still in neonbox-ns's namespaces and
	// with its credentials (teardown.c).
	if (argc > 1 && argv[1] && strcmp(argv[1], JT_INIT_ARG) == 0)
		jt_fork_from_init(JT_INIT_FD);
	// Nothing but stdin, stdout and stderr may reach CMD: not the sync
	// socket (its closing at execve tells the parent exec worked), and
	// not any descriptor the caller left open without close-on-exec (a
	// directory fd would be a way out of the jail, as in runc's
	// CVE-2024-21626).
	if (syscall(SYS_close_range, 3, ~0U, CLOSE_RANGE_CLOEXEC) < 0)
		mark_all_cloexec();
	struct prog p;
	receive(&p);
	run(&p, 0);
	fail(NULL, 0, "the program ended without exec");
}
