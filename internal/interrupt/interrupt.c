// The handler that interrupt_linux.go installs: it runs on whichever of
// neonbox-ns's threads the kernel picks, on that thread's alternate signal
// stack (SA_ONSTACK; a goroutine's stack is too small for a C frame), and
// only writes the signal's number to a pipe.
#include <errno.h>
#include <signal.h>
#include <string.h>
#include <unistd.h>

#include "interrupt.h"

static int wake_fd = -1;
static struct sigaction saved[NI_MAX_SIGNALS];
static int saved_sig[NI_MAX_SIGNALS];
static int nsaved;

static void on_signal(int sig)
{
	int e = errno;
	unsigned char b = (unsigned char)sig;
	(void)!write(wake_fd, &b, 1); // O_NONBLOCK: a full pipe drops it, never blocks
	errno = e;
}

void ni_set_fd(int fd)
{
	wake_fd = fd;
}

int ni_catch(const int *sigs, int n)
{
	if (n > NI_MAX_SIGNALS || nsaved || wake_fd < 0) {
		errno = EINVAL;
		return -1;
	}
	struct sigaction sa;
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_signal;
	// SA_RESETHAND: the first signal is caught, a second one has its
	// default action (ends the process), as after signal.Stop.
	sa.sa_flags = SA_ONSTACK | SA_RESTART | SA_RESETHAND;
	sigemptyset(&sa.sa_mask);
	for (int i = 0; i < n; i++) {
		struct sigaction old;
		if (sigaction(sigs[i], NULL, &old) < 0)
			goto fail;
		// A signal the process was started with ignored (nohup) stays
		// ignored, as the Go runtime leaves SIGHUP and SIGINT then.
		if (old.sa_handler == SIG_IGN)
			continue;
		if (sigaction(sigs[i], &sa, &saved[nsaved]) < 0)
			goto fail;
		saved_sig[nsaved++] = sigs[i];
	}
	return 0;
fail:;
	int e = errno;
	ni_restore();
	errno = e;
	return -1;
}

void ni_restore(void)
{
	for (int i = 0; i < nsaved; i++)
		sigaction(saved_sig[i], &saved[i], NULL);
	nsaved = 0;
}
