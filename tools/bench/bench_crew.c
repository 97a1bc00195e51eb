// SPDX-License-Identifier: MIT
/* bench_crew.c - N worker processes and their reports (bench_crew.h). */
#include "bench_crew.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

int crew_start(struct crew *w, int n, crew_fn fn, void *arg)
{
	w->n = 0;
	w->out[0] = w->out[1] = -1;
	if (n > CREW_MAX)
		return -E2BIG;
	if (pipe2(w->out, O_CLOEXEC) < 0)
		return -errno;
	for (; w->n < n; w->n++) {
		pid_t pid = fork();
		if (pid < 0)
			return -errno;
		if (pid == 0) {
			prctl(PR_SET_PDEATHSIG, SIGKILL);
			close(w->out[0]);
			_exit(fn(arg, w->out[1]));
		}
		w->pid[w->n] = pid;
	}
	close(w->out[1]);
	w->out[1] = -1;
	return 0;
}

int crew_collect(struct crew *w, void *reports, size_t len)
{
	for (int i = 0; i < w->n; i++)
		if (read(w->out[0], (char *)reports + (size_t)i * len, len) != (ssize_t)len)
			return -EIO;
	return 0;
}

void crew_stop(struct crew *w)
{
	for (int i = 0; i < w->n; i++) {
		kill(w->pid[i], SIGKILL);
		waitpid(w->pid[i], NULL, 0);
	}
	if (w->out[0] >= 0)
		close(w->out[0]);
	if (w->out[1] >= 0)
		close(w->out[1]);
	w->out[0] = w->out[1] = -1;
	w->n = 0;
}
