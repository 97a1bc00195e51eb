// SPDX-License-Identifier: MIT
/* copyd_run.c - a wsrv-copyd started and waited for (copyd_run.h). */
#include "copyd_run.h"
#include "prog_path.h"

#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <limits.h>
#include <signal.h>
#include <sys/prctl.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

const char *copyd_path(void)
{
	static char p[PATH_MAX + 32];

	return prog_path(p, sizeof(p), "../client/wsrv-copyd", "WSRV_COPYD_BIN", "wsrv-copyd");
}

static bool accepts(const char *sock)
{
	struct sockaddr_un a = { .sun_family = AF_UNIX };
	int fd;
	bool ok;

	if (strlen(sock) >= sizeof(a.sun_path))
		return false;
	memcpy(a.sun_path, sock, strlen(sock) + 1);
	fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	ok = fd >= 0 && connect(fd, (struct sockaddr *)&a, sizeof(a)) == 0;
	if (fd >= 0)
		close(fd);
	return ok;
}

/* A child that dies with its parent (PR_SET_PDEATHSIG): a test case
 * that fails half-way leaves no service behind. */
static int spawn(struct copyd_proc *p, const char *wsrvd_sock, const char *const *extra)
{
	const char *argv[40] = { copyd_path(), "--verbose", "--socket", p->sock, "--wsrvd", wsrvd_sock };
	pid_t parent = getpid();
	size_t k = 6;
	int fd;

	for (size_t i = 0; extra && extra[i] && k < 39; i++)
		argv[k++] = extra[i];
	argv[k] = NULL;
	if ((p->pid = fork()) < 0)
		return -errno;
	if (p->pid > 0)
		return 0;
	prctl(PR_SET_PDEATHSIG, SIGKILL);
	if (getppid() != parent)
		_exit(127);
	if ((fd = open(p->log, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644)) >= 0)
		dup2(fd, 2);
	if ((fd = open("/dev/null", O_WRONLY | O_CLOEXEC)) >= 0)
		dup2(fd, 1);
	execv(argv[0], (char *const *)argv);
	_exit(127);
}

int copyd_start(struct copyd_proc *p, const char *sock, const char *wsrvd_sock, const char *log,
		const char *const *extra)
{
	struct timespec ts = { 0, 10 * 1000 * 1000 };
	int st, r;

	snprintf(p->sock, sizeof(p->sock), "%s", sock);
	snprintf(p->log, sizeof(p->log), "%s", log);
	if ((r = spawn(p, wsrvd_sock, extra)) < 0)
		return r;
	for (int i = 0; i < 6000; i++) {
		if (accepts(p->sock))
			return 0;
		if (waitpid(p->pid, &st, WNOHANG) == p->pid) {
			p->pid = 0;
			return -ECHILD;
		}
		nanosleep(&ts, NULL);
	}
	copyd_stop(p, SIGKILL);
	return -ETIMEDOUT;
}

int copyd_stop(struct copyd_proc *p, int sig)
{
	int st;

	if (p->pid <= 0)
		return -1;
	if (sig)
		kill(p->pid, sig);
	while (waitpid(p->pid, &st, 0) < 0 && errno == EINTR)
		;
	p->pid = 0;
	return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}
