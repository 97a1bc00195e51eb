// SPDX-License-Identifier: MIT
/* wsrvd_run.c - a wsrvd started and waited for (wsrvd_run.h). */
#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "clock.h"
#include "wsrv.h"
#include "wsrvd_run.h"

int wsrvd_spawn(const char *const *argv, int (*in_child)(void *arg), void *arg, pid_t *pid)
{
	int st;

	if (!argv[0])
		return -ENOENT;
	*pid = fork();
	if (*pid < 0)
		return -errno;
	if (*pid > 0)
		return 0;
	/* A test or bench that fails or is killed takes its server with it. */
	prctl(PR_SET_PDEATHSIG, SIGKILL);
	if (in_child && (st = in_child(arg)) != 0)
		_exit(st);
	execvp(argv[0], (char *const *)argv);
	_exit(127);
}

bool wsrvd_models_loading(struct wsrv_client *c)
{
	struct wsrv_model_list *l;
	bool loading = false;

	if (wsrv_list_models(c, &l) < 0)
		return false;
	for (size_t i = 0; i < wsrv_model_list_count(l); i++) {
		struct wsrv_model_info mi;
		if (wsrv_model_list_at(l, i, &mi) == 0 && mi.loading)
			loading = true;
	}
	wsrv_model_list_free(l);
	return loading;
}

int wsrvd_wait_ready(pid_t pid, const char *sock, bool early, double timeout_s,
		     void (*tick)(void *arg), void *arg)
{
	double t0 = mono_now();

	do {
		struct timespec ts10 = { 0, 10000000 };
		struct wsrv_client *c;
		int st;
		if (tick)
			tick(arg);
		if (wsrv_connect(sock, NULL, &c) == 0) {
			bool loading = !early && wsrvd_models_loading(c);
			wsrv_disconnect(c);
			if (!loading)
				return 0;
		}
		if (waitpid(pid, &st, WNOHANG) == pid)
			return -ECHILD;
		nanosleep(&ts10, NULL);
	} while (mono_now() - t0 < timeout_s);
	return -ETIMEDOUT;
}
