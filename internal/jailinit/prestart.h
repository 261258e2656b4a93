/*
 * The init `neonbox-ns exec` starts before the Go runtime (prestart.c).
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
};

/* The spawn program compiled in (prestart_program.h) for neonbox-ns run
 * as root or not; its length in *len. */
const unsigned char *ji_spawn_program(int rootful, size_t *len);

/* Fills out with the prestarted init and returns 1, once; else 0. */
int ji_take_prestarted(struct ji_prestarted *out);

/* Returns this process's end of the prestarted init's teardown helper's
 * socket (teardown.h), once; else -1. */
int ji_take_teardown(void);

#endif
