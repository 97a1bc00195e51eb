// SPDX-License-Identifier: MIT
/* bench_restart.c - `wsrv-bench restart`: how long wsrvd is away when it
 * restarts under systemd, adopting its models from the fd store, against a
 * cold load of the same model (the baseline, same run).
 *
 * The benchmark plays systemd (tools/harness/fdstore_peer.c): it starts wsrvd with
 * a notify socket, keeps the memfds wsrvd stores, stops it (SIGTERM) and
 * starts the next one with them. restart_ms runs from the old process's
 * exit to the new one answering an Attach; load_ms from a cold start (page
 * cache dropped, as root) to the same answer. */
#include <errno.h>
#include <getopt.h>
#include <jansson.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "bench.h"
#include "bench_util.h"
#include "cliarg.h"
#include "clock.h"
#include "fdstore_peer.h"
#include "wsrv.h"

struct rs_ctx {
	char dir[64], sock[128], spec[4200];
	struct fdstore store;       /* under mu: the drainer reads into it */
	pthread_mutex_t mu;
	bool done;                  /* under mu: the drainer stops */
	pid_t pid;
};

/* Plays systemd's side of the notify socket the whole time, as systemd
 * does: wsrvd pushes its fds as datagrams, and with no reader the socket's
 * queue (10 datagrams) fills and wsrvd waits, before it serves. */
static void *drainer(void *arg)
{
	struct rs_ctx *x = arg;

	for (bool done = false; !done;) {
		pthread_mutex_lock(&x->mu);
		fdstore_drain(&x->store, 5, false);
		done = x->done;
		pthread_mutex_unlock(&x->mu);
		struct timespec ts = { 0, 1000000 };
		nanosleep(&ts, NULL);
	}
	return NULL;
}

/* Whether the model's layout is in the store: wsrvd stores a model's fds
 * once it is loaded (or adopted). A restart before that loads the model
 * again instead of adopting it (and serving while loading answers an
 * Attach at once: what this bench timed by mistake until 2026-11-28). */
static bool stored(struct rs_ctx *x)
{
	bool in = false;

	pthread_mutex_lock(&x->mu);
	for (int k = 0; k < x->store.n && !in; k++)
		in = strcmp(x->store.names[k], "m0-manifest") == 0;
	pthread_mutex_unlock(&x->mu);
	return in;
}

static int until_stored(struct rs_ctx *x)
{
	for (double t0 = mono_now(); mono_now() - t0 < 60;) {
		struct timespec ts = { 0, 5000000 };
		if (stored(x))
			return 0;
		nanosleep(&ts, NULL);
	}
	return -1;
}

static pid_t launch(struct rs_ctx *x)
{
	const char *argv[] = { bench_wsrvd_path(), "--quiet", "--socket", x->sock, "--model", x->spec,
			       geteuid() ? "--no-lock" : NULL, NULL };
	pid_t pid;

	pthread_mutex_lock(&x->mu); /* the store, whole in the child's copy */
	if ((pid = fork()) == 0) {
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		if (fdstore_pass(&x->store) < 0)
			_exit(126);
		execvp(argv[0], (char *const *)argv);
		_exit(127);
	}
	pthread_mutex_unlock(&x->mu);
	return pid;
}

/* Polls (every 0.5 ms) until an Attach of "m" is answered; seconds since t0. */
static double until_attach(struct rs_ctx *x, double t0)
{
	for (;;) {
		struct wsrv_client *c;
		struct wsrv_model *m;
		struct timespec ts = { 0, 500000 };
		if (wsrv_connect(x->sock, NULL, &c) == 0) {
			int r = wsrv_attach(c, "m", &m);
			double t = mono_now() - t0;
			if (r == 0)
				wsrv_detach(m);
			wsrv_disconnect(c);
			if (r == 0)
				return t;
		}
		if (waitpid(x->pid, NULL, WNOHANG) == x->pid || mono_now() - t0 > 600)
			return -1;
		nanosleep(&ts, NULL);
	}
}

static void stop(struct rs_ctx *x)
{
	struct timespec ts = { 0, 50000000 };

	kill(x->pid, SIGTERM);
	waitpid(x->pid, NULL, 0);
	nanosleep(&ts, NULL); /* its last messages, drained */
}

int bench_restart(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "model", required_argument, NULL, 'm' }, { "repeat", required_argument, NULL, 'n' },
		{ "json", no_argument, NULL, 'j' }, { 0 },
	};
	struct rs_ctx x = { 0 };
	const char *path = NULL;
	int repeat = 5, json = 0, c;
	double load, restart[32];

	optind = 1;
	while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		if (c == 'm') path = optarg;
		else if (c == 'n') repeat = (int)cliarg_long("wsrv-bench restart", "--repeat", optarg, 1, 32);
		else if (c == 'j') json = 1;
		else return 2;
	}
	if (!path || optind != argc) {
		fprintf(stderr, "usage: wsrv-bench restart --model DIR [--repeat N] [--json]\n");
		return 2;
	}
	snprintf(x.dir, sizeof(x.dir), "/tmp/wsrv-restart-XXXXXX");
	if (!mkdtemp(x.dir) || fdstore_open(&x.store, x.dir) < 0)
		return 1;
	snprintf(x.sock, sizeof(x.sock), "%s/wsrv.sock", x.dir);
	snprintf(x.spec, sizeof(x.spec), "m=%s", path);
	bench_drop_caches();
	pthread_t dr;
	pthread_mutex_init(&x.mu, NULL);
	if (pthread_create(&dr, NULL, drainer, &x) != 0)
		return 1;
	double t0 = mono_now();
	x.pid = launch(&x);
	load = until_attach(&x, t0);
	if (load >= 0 && until_stored(&x) < 0)
		load = -1;
	for (int i = 0; load >= 0 && i < repeat; i++) {
		stop(&x);
		t0 = mono_now();
		x.pid = launch(&x);
		restart[i] = until_attach(&x, t0);
		if (restart[i] < 0 || until_stored(&x) < 0)
			load = -1;
	}
	stop(&x);
	pthread_mutex_lock(&x.mu);
	x.done = true;
	pthread_mutex_unlock(&x.mu);
	pthread_join(dr, NULL);
	pthread_mutex_destroy(&x.mu);
	fdstore_close(&x.store);
	char lock[200];
	snprintf(lock, sizeof(lock), "%s.lock", x.sock);
	unlink(lock);
	rmdir(x.dir);
	if (load < 0) {
		fprintf(stderr, "wsrv-bench restart: a wsrvd did not serve\n");
		return 1;
	}
	qsort(restart, (size_t)repeat, sizeof(double), cmp_double);
	double med = restart[repeat / 2];
	if (json) {
		json_t *o = json_pack("{s:s, s:f, s:f, s:f, s:f, s:i}", "model", path, "load_ms", load * 1e3,
				      "restart_ms", med * 1e3, "restart_max_ms", restart[repeat - 1] * 1e3,
				      "restart_vs_load", med / load, "repeat", repeat);
		json_dumpf(o, stdout, JSON_INDENT(2));
		putchar('\n');
		json_decref(o);
	} else {
		printf("%s\n  cold load to first attach   %9.1f ms (baseline)\n"
		       "  restart to first attach     %9.1f ms median of %d (max %.1f) = %.4fx the load\n",
		       path, load * 1e3, med * 1e3, repeat, restart[repeat - 1] * 1e3, med / load);
	}
	return 0;
}
