// SPDX-License-Identifier: MIT
/* wsrvd_run.h - starting a wsrvd for a test or a benchmark and waiting
 * until it serves: one copy for tests/support and tools/bench. */
#ifndef WSRV_HARNESS_WSRVD_RUN_H
#define WSRV_HARNESS_WSRVD_RUN_H

#include <stdbool.h>
#include <sys/types.h>

struct wsrv_client;

/* Forks and execs argv[0] (found on PATH when it has no slash) with argv (NULL-terminated). The child dies
 * with its parent (PR_SET_PDEATHSIG) and, when in_child is not NULL,
 * calls in_child(arg) just before exec: a nonzero return is its exit
 * status. 0 with *pid set, or a negative errno. */
int wsrvd_spawn(const char *const *argv, int (*in_child)(void *arg), void *arg, pid_t *pid);

/* Waits until the wsrvd pid at sock says Hello and, unless early (it was
 * asked to serve while loading), has every model loaded; tick(arg) runs
 * between tries when not NULL. 0, -ECHILD when it exited, or -ETIMEDOUT
 * after timeout_s. */
int wsrvd_wait_ready(pid_t pid, const char *sock, bool early, double timeout_s,
		     void (*tick)(void *arg), void *arg);

/* Whether c's server is loading any model now. */
bool wsrvd_models_loading(struct wsrv_client *c);

#endif
