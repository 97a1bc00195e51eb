// SPDX-License-Identifier: MIT
/* syscount.h - how many system calls a piece of code makes, measured. */
#ifndef WSRV_SYSCOUNT_H
#define WSRV_SYSCOUNT_H

#include <stdint.h>

/* Runs fn(arg) in a forked child under a seccomp filter that traps every
 * system call except write, exit_group and rt_sigreturn, counting them (a
 * trapped call is not executed: it fails with ENOSYS). Returns the count,
 * or a negative errno when the measurement could not be made. fn must not
 * need any system call to do its job. */
int64_t count_syscalls(void (*fn)(void *), void *arg);

#endif
