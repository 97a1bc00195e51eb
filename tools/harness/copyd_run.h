// SPDX-License-Identifier: MIT
/* copyd_run.h - a wsrv-copyd started and waited for, for the tests and
 * the benchmarks (copyd_run.c). */
#ifndef WSRV_COPYD_RUN_H
#define WSRV_COPYD_RUN_H

#include <sys/types.h>

struct copyd_proc {
	pid_t pid;
	char sock[200];
	char log[300];
};

/* The program: next to the calling one in the build tree
 * (../client/wsrv-copyd), else $WSRV_COPYD_BIN, else "wsrv-copyd". */
const char *copyd_path(void);

/* Starts it on sock, serving wsrvd at wsrvd_sock, with extra arguments
 * (NULL-terminated, or NULL) and this process's environment, its stderr
 * into log, and waits until it accepts connections (60 s at most, or
 * until it exits). 0, or a negative errno (-ECHILD: it exited). */
int copyd_start(struct copyd_proc *p, const char *sock, const char *wsrvd_sock, const char *log,
		const char *const *extra);
/* Sends sig (unless 0) and reaps it: its exit status, 128 + signal when
 * killed, -1 when there was none. */
int copyd_stop(struct copyd_proc *p, int sig);

#endif
