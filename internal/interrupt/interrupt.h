#ifndef NEONBOX_INTERRUPT_H
#define NEONBOX_INTERRUPT_H

#define NI_MAX_SIGNALS 8

// ni_set_fd sets the descriptor (a non-blocking pipe) the handler writes
// a caught signal's number to, once.
void ni_set_fd(int fd);

// ni_catch installs the handler for the n signals sigs, each caught once
// (SA_RESETHAND); 0, or -1 with errno set and nothing installed.
int ni_catch(const int *sigs, int n);

// ni_restore puts back the handlers ni_catch replaced.
void ni_restore(void);

#endif
