/*
 * The teardown helper: a process the init of `neonbox-ns exec` forks at
 * its start, which finishes a run's cleanup after neonbox-ns has written
 * the receipt and exited (teardown.c).
 *
 * It first sends its pid (an int32). Go hands it one job: one
 * SOCK_SEQPACKET message
 *
 *   "NBT1" NUL  { op NUL path NUL } ...
 *
 * with the jail's mount namespace as an SCM_RIGHTS descriptor, or none.
 * The helper closes the descriptor (the jail's mounts go), then runs the
 * ops in order:
 *
 *   cgroup  rmdir path, retrying EBUSY for up to a second
 *   shared  rmdir path; EBUSY, ENOTEMPTY and ENOENT are fine (others'
 *           runs are still in it)
 *   spare   the path to which the next rundir op moves the run dir
 *           for a later run to reuse, instead of removing it
 *   rundir  remove everything in the run dir path but its owner file,
 *           never through a mount point or a symlink; then, if every
 *           cgroup op succeeded, the owner file and the directory. After
 *           a spare op, if every cgroup op succeeded and the spare's
 *           directory holds fewer than JT_MAX_SPARES entries: empty
 *           its upper and work dirs but keep them, remove the rest and
 *           the owner file, and rename the run dir to the spare path
 *           (RENAME_NOREPLACE); if any of that fails, remove as above
 *
 * What it cannot remove (a cgroup still busy after a second, a tree
 * deeper than it goes), it leaves to Go: it re-executes neonbox-ns as
 * JT_FALLBACK_NAME with the run dir, which removes the run as a later
 * run's sweep would. Failing that, it all stays with the owner file for
 * that sweep, as after a neonbox-ns killed with SIGKILL. With no job
 * (the socket closes first) it exits at once.
 */
#ifndef NEONBOX_TEARDOWN_H
#define NEONBOX_TEARDOWN_H

#include <sys/types.h>

#define JT_MAGIC "NBT1"
#define JT_MAX_JOB (1 << 16) /* bytes of a job message, at most */
#define JT_MAX_SPARES 4      /* run dirs kept for reuse, at most */
#define JT_INIT_ARG "--teardown-helper" /* argv[1] of an init that forks it */
#define JT_INIT_FD 4                     /* its socket, in that init */
/* argv[0] under which the helper re-executes neonbox-ns when it could
 * not remove everything: Go finishes the job (package nsjail). */
#define JT_FALLBACK_NAME "neonbox-teardown"

/* Forks a helper from this process (tests). From a process that already
 * runs other threads, the child makes only system calls. This end of its
 * socket (the helper sends its pid first), or -1 with errno. */
int jt_start(void);

/* In the init's first process: forks the helper with sock, and closes
 * sock here. */
void jt_fork_from_init(int sock);

#endif
