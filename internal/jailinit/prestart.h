/*
 * The init `neonbox-ns exec` starts before the Go runtime, and the timer
 * slack and CPUs its Go runtime's threads start with (prestart.c).
 */
#ifndef NEONBOX_PRESTART_H
#define NEONBOX_PRESTART_H

#include <stdint.h>
#include <sys/types.h>

struct ji_prestarted {
	pid_t pid;   /* the init's first process, a child of this process */
	int sock;    /* this end of its sync socket */
	int rootful; /* its program is the one for neonbox-ns run as root */
	int64_t at;  /* CLOCK_MONOTONIC just before it was started, in ns */
	/* the base of the program queued after the spawn program (prestart.c),
	 * or NULL */
	const unsigned char *base;
	size_t base_len;
};

/* Where `neonbox-ns exec` finds the base to queue, in the state dir, and
 * the state dir it assumes without --state-dir (root's: package nsjail's
 * DefaultStateDir). */
#define JI_BASE_FILE "prestart-base"
#define JI_DEFAULT_STATE_DIR "/var/lib/neonbox"
#define JI_MAX_BASE (64 << 10)

/* JI_BASE_FILE starts with a header that names the binary that wrote it:
 * JI_BASE_MAGIC, then the device, inode, size and mtime (seconds,
 * nanoseconds) of /proc/self/exe, each 8 bytes little-endian; a base
 * another build wrote is not queued. ji_base_header fills out with this
 * binary's, or returns -1. */
#define JI_BASE_MAGIC "NBB1"
#define JI_BASE_HEADER 44
int ji_base_header(unsigned char out[JI_BASE_HEADER]);

/* The spawn program compiled in (prestart_program.h) for neonbox-ns run
 * as root or not; its length in *len. */
const unsigned char *ji_spawn_program(int rootful, size_t *len);

/* Fills out with the prestarted init and returns 1, once; else 0. */
int ji_take_prestarted(struct ji_prestarted *out);

/* The timer slack (ns) the process had before the prestart widened it for
 * its own threads (prestart.c), or 0 if the prestart left it as it was. */
unsigned long ji_caller_slack(void);

/* Returns this process's end of the prestarted init's teardown helper's
 * socket (teardown.h), once; else -1. */
int ji_take_teardown(void);

#endif
