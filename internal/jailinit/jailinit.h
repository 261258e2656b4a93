/*
 * The jail init's program: the steps the parent computed, in order.
 * Shared by jailinit.c (which runs them) and jailinit.go (which encodes
 * them), so the two cannot disagree on a number.
 *
 * A program is one SOCK_SEQPACKET message, little-endian:
 *
 *   "NBI1"  u32 count
 *   count x { u16 code, u16 flags, u32 nstr, u64 a, u64 b,
 *             nstr x { u32 len, len bytes, NUL } }
 *
 * Every op's first three strings are its stage, operation and path, for
 * the error report; its arguments follow.
 */
#ifndef NEONBOX_JAILINIT_H
#define NEONBOX_JAILINIT_H

#define JI_MAGIC "NBI1"
#define JI_NAME "neonbox-init" /* argv[0] of a jail's init */
#define JI_META 3 /* stage, op, path */
#define JI_SYNC_FD 3 /* the init's end of the sync socket */

enum ji_code {
	JI_MARK = 1,      /* record the time under the op's stage name */
	JI_MOUNT,         /* mount(src, dst, fstype, a=flags, data) */
	JI_UMOUNT,        /* umount2(path, a=flags) */
	JI_MKDIR,         /* mkdir(path, a=mode) */
	JI_MKDIR_ALL,     /* mkdir -p path, 0755 */
	JI_SYMLINK,       /* symlink(target, path) */
	JI_CREATE,        /* create the empty file path, a=mode */
	JI_LCHOWN,        /* lchown(path, a=uid, b=gid) */
	JI_BIND,          /* open_tree(src) + mount_setattr(a=attrs) + move_mount(dst) */
	JI_MOVE_FD,       /* move_mount(fd slot a, dst); closes the fd */
	JI_SETATTR_FD,    /* mount_setattr(fd slot a, b=attrs) */
	JI_PIVOT,         /* make path the root, detach the old one */
	JI_HOSTNAME,      /* sethostname(name) */
	JI_LINK_UP,       /* bring up interface name */
	JI_CWD,           /* remember the directory CMD starts in */
	JI_CHDIR,         /* chdir to it */
	JI_JOIN_CGROUP,   /* write "0" to fd slots a .. a+b-1 (v1 tasks), close them */
	JI_RLIMIT,        /* lower resource a's limits to at most b */
	JI_SECUREBITS,    /* prctl(PR_SET_SECUREBITS, a) */
	JI_CAPBSET_DROP,  /* drop capabilities 0..a from the bounding set */
	JI_AMBIENT_CLEAR, /* clear the ambient set */
	JI_SETGROUPS,     /* setgroups(0, NULL) */
	JI_SETRESGID,     /* setresgid(a, a, a) */
	JI_SETRESUID,     /* setresuid(a, a, a) */
	JI_CAPSET_ZERO,   /* empty effective, permitted, inheritable sets */
	JI_NO_NEW_PRIVS,  /* prctl(PR_SET_NO_NEW_PRIVS, 1) */
	JI_SECCOMP,       /* load the classic BPF program in the argument */
	JI_PDEATHSIG,     /* prctl(PR_SET_PDEATHSIG, a) */
	JI_ARGV,          /* CMD's argv: the arguments */
	JI_ENV,           /* CMD's environment: the arguments */
	JI_AWAIT_CALL,    /* say "prepared", run the call program that comes, take its stdio */
	JI_LOOKPATH,      /* find argv[0] along PATH (default: the argument) */
	JI_READY,         /* report "ready" and the marks */
	JI_EXEC,          /* execve CMD */
	JI_RMDIR,         /* rmdir(path) */
	JI_CONTINUE,      /* receive the rest of the program and run it */
	JI_CLONE_INIT,    /* fork pid 1 in new namespaces (a = clone flags, with
	                     CLONE_NEWUSER; always a pid namespace) as the
	                     parent's child (CLONE_PARENT); this process reports
	                     {"pid":N}, writes its id maps (the argument; ""
	                     maps root to this process's own ids, refused to
	                     root), reports {"mapped":true}, (b != 0: makes a
	                     network namespace for pid 1 and) exits */
	JI_AWAIT_IDMAP,   /* wait until JI_CLONE_INIT's process has mapped the ids */
	JI_JOIN_NETNS,    /* join the network namespace JI_CLONE_INIT made */
	JI_STDIO,         /* take fd slots a .. a+2 as stdin, stdout, stderr */
	JI_CODE_END
};

/* Op flags. */
#define JI_IF_EXISTS 0x1 /* skip the op when its target path does not exist */
#define JI_RECURSIVE 0x2 /* JI_BIND: the whole mount tree */

/* Descriptors that may come with a message. */
#define JI_MAX_FDS 16

/* The longest message the init sends. */
#define JI_MAX_REPORT 16384

/*
 * ji_args gives a constructor the process's arguments under musl, which
 * passes constructors none (glibc passes argc, argv and envp): it reads
 * them from /proc/self/cmdline, as far as JI_ARGS_MAX arguments in 4 KiB
 * (the init's constructor looks at the first two, the prestart's for
 * exec's --state-dir too), and returns their count.
 */
#define JI_ARGS_MAX 64
#ifndef __GLIBC__
int ji_args(char ***out);
#endif

#endif
