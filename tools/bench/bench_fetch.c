// SPDX-License-Identifier: MIT
/* bench_fetch.c - `wsrv-bench fetch`: round trips of the fetch-layer RPC.
 *
 * 1 and N client threads, each on its own connection, fetch a layer and
 * release its lease in a loop; the fetch round trip is timed. Floor, same
 * run: a raw SOCK_SEQPACKET ping-pong with the same packet sizes (request
 * and reply of a fetch, then of a release), served by one single-threaded
 * process (poll, recv, send) the way wsrvd serves all its clients from one
 * thread. */
#include <errno.h>
#include <getopt.h>
#include <jansson.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cliarg.h"
#include "bench.h"
#include "bench_util.h"
#include "progress.h"
#include "wsrv.h"
#include "wsrv.pb-c.h"

#define MAX_CLIENTS 64
#define WARMUP 200

struct sizes { size_t fetch_req, fetch_rep, rel_req, rel_rep; };

struct job {
	const char *sock;       /* wsrv: the server; NULL for the floor */
	int fd;                 /* floor: this thread's end of a socketpair */
	const struct sizes *sz;
	int requests;
	double *rtt;            /* requests entries, microseconds */
	int failed;
};

/* Packet sizes of a typical exchange, from the real messages. */
static void message_sizes(struct sizes *s)
{
	Wsrv__Request q = WSRV__REQUEST__INIT;
	Wsrv__FetchLayer f = WSRV__FETCH_LAYER__INIT;
	Wsrv__Release rl = WSRV__RELEASE__INIT;
	Wsrv__Response r = WSRV__RESPONSE__INIT;
	Wsrv__FetchReply fr = WSRV__FETCH_REPLY__INIT;
	Wsrv__Extent ex = WSRV__EXTENT__INIT, *pex = &ex;
	Wsrv__Ok ok = WSRV__OK__INIT;

	q.seq = 100000;
	f.attach_id = 1;
	f.layer = 3;
	q.body_case = WSRV__REQUEST__BODY_FETCH_LAYER;
	q.fetch_layer = &f;
	s->fetch_req = wsrv__request__get_packed_size(&q);
	rl.lease = 100000;
	q.body_case = WSRV__REQUEST__BODY_RELEASE;
	q.release = &rl;
	s->rel_req = wsrv__request__get_packed_size(&q);
	ex.offset = 1 << 30;
	ex.length = 1 << 26;
	fr.lease = 100000;
	fr.n_extents = 1;
	fr.extents = &pex;
	r.seq = 100000;
	r.body_case = WSRV__RESPONSE__BODY_FETCH;
	r.fetch = &fr;
	s->fetch_rep = wsrv__response__get_packed_size(&r);
	r.body_case = WSRV__RESPONSE__BODY_OK;
	r.ok = &ok;
	s->rel_rep = wsrv__response__get_packed_size(&r);
}

static void *wsrv_thread(void *arg)
{
	struct job *j = arg;
	struct wsrv_client *c;
	struct wsrv_model *m;
	struct wsrv_lease l;
	int layers;

	if (wsrv_connect(j->sock, NULL, &c) < 0 || wsrv_attach(c, "m", &m) < 0) {
		j->failed = 1;
		return NULL;
	}
	layers = (int)wsrv_model_layer_count(m) - 1;
	for (int i = -WARMUP; i < j->requests; i++) {
		int32_t layer = layers > 0 ? (int32_t)((i + WARMUP) % layers) : WSRV_LAYER_GLOBAL;
		double t0 = mono_now();
		if (wsrv_fetch_layer(m, layer, &l) < 0) {
			j->failed = 1;
			break;
		}
		double t1 = mono_now();
		wsrv_release(m, l.id);
		if (i >= 0)
			j->rtt[i] = (t1 - t0) * 1e6;
	}
	wsrv_detach(m);
	wsrv_disconnect(c);
	return NULL;
}

static void *floor_thread(void *arg)
{
	struct job *j = arg;
	char buf[256] = { 0 };

	for (int i = -WARMUP; i < j->requests; i++) {
		double t0 = mono_now();
		if (send(j->fd, buf, j->sz->fetch_req, 0) < 0 || recv(j->fd, buf, sizeof(buf), 0) <= 0) {
			j->failed = 1;
			break;
		}
		double t1 = mono_now();
		if (send(j->fd, buf, j->sz->rel_req, 0) < 0 || recv(j->fd, buf, sizeof(buf), 0) <= 0) {
			j->failed = 1;
			break;
		}
		if (i >= 0)
			j->rtt[i] = (t1 - t0) * 1e6;
	}
	return NULL;
}

/* The floor's server: one thread, poll over every connection, answer each
 * request with a packet of the matching reply's size. */
static void echo_server(const int *fds, int n, const struct sizes *sz)
{
	struct pollfd p[MAX_CLIENTS];
	char buf[256] = { 0 };
	int open = n;

	for (int i = 0; i < n; i++)
		p[i] = (struct pollfd){ fds[i], POLLIN, 0 };
	while (open > 0 && poll(p, (nfds_t)n, -1) > 0) {
		for (int i = 0; i < n; i++) {
			if (!p[i].revents)
				continue;
			ssize_t got = recv(p[i].fd, buf, sizeof(buf), 0);
			if (got <= 0) {
				p[i].fd = -1;
				open--;
				continue;
			}
			send(p[i].fd, buf, (size_t)got == sz->fetch_req ? sz->fetch_rep : sz->rel_rep, 0);
		}
	}
}

/* Runs n threads of one kind; fills all (n * requests samples). */
static int fetch_run(int n, int requests, const char *sock, const struct sizes *sz, double *all)
{
	struct job jobs[MAX_CLIENTS];
	pthread_t th[MAX_CLIENTS];
	int pairs[MAX_CLIENTS][2], srv_ends[MAX_CLIENTS], failed = 0;
	pid_t echo = -1;

	if (!sock) {
		for (int i = 0; i < n; i++) {
			if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, pairs[i]) < 0)
				return -errno;
			srv_ends[i] = pairs[i][1];
		}
		echo = fork();
		if (echo == 0) {
			/* Only the server ends here, or no client close is seen. */
			for (int i = 0; i < n; i++)
				close(pairs[i][0]);
			echo_server(srv_ends, n, sz);
			_exit(0);
		}
		for (int i = 0; i < n; i++)
			close(pairs[i][1]);
	}
	for (int i = 0; i < n; i++) {
		jobs[i] = (struct job){ sock, sock ? -1 : pairs[i][0], sz, requests,
					all + (size_t)i * (size_t)requests, 0 };
		pthread_create(&th[i], NULL, sock ? wsrv_thread : floor_thread, &jobs[i]);
	}
	for (int i = 0; i < n; i++) {
		pthread_join(th[i], NULL);
		failed |= jobs[i].failed;
		if (!sock)
			close(pairs[i][0]);
	}
	if (echo > 0)
		waitpid(echo, NULL, 0);
	return failed ? -EIO : 0;
}

struct result { int clients; double p50, p99, floor50, floor99; };

static int fetch_one(int n, int requests, const char *sock, const struct sizes *sz, struct result *r)
{
	size_t total = (size_t)n * (size_t)requests;
	double *a = calloc(total, sizeof(double)), *b = calloc(total, sizeof(double));
	int rc = a && b ? fetch_run(n, requests, sock, sz, a) : -ENOMEM;

	if (rc == 0)
		rc = fetch_run(n, requests, NULL, sz, b);
	if (rc == 0) {
		*r = (struct result){ n, percentile(a, total, 50), percentile(a, total, 99),
				      percentile(b, total, 50), percentile(b, total, 99) };
	}
	free(a);
	free(b);
	return rc;
}

int bench_fetch(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "model", required_argument, NULL, 'm' },
		{ "clients", required_argument, NULL, 'n' },
		{ "requests", required_argument, NULL, 'r' },
		{ "json", no_argument, NULL, 'j' },
		{ 0 },
	};
	const char *path = NULL;
	int n = 8, requests = 20000, json = 0, c;
	struct result res[2];
	struct bench_server bs = { 0 };
	struct sizes sz;
	char spec[4200];

	optind = 1;
	while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		if (c == 'm') path = optarg;
		else if (c == 'n') n = (int)cliarg_long("wsrv-bench fetch", "--clients", optarg, 1, MAX_CLIENTS);
		else if (c == 'r') requests = (int)cliarg_long("wsrv-bench fetch", "--requests", optarg, 10, 10000000);
		else if (c == 'j') json = 1;
		else return 2;
	}
	if (!path || optind != argc) {
		fprintf(stderr, "usage: wsrv-bench fetch --model DIR [--clients 1..%d] [--requests R] [--json]\n",
			MAX_CLIENTS);
		return 2;
	}
	signal(SIGPIPE, SIG_IGN);
	message_sizes(&sz);
	snprintf(spec, sizeof(spec), "m=%s", path);
	if (bench_server_start(&bs, (const char *[]){ spec }, 1) < 0) {
		fprintf(stderr, "wsrv-bench fetch: cannot start wsrvd\n");
		return 1;
	}
	int rc = fetch_one(1, requests, bs.sock, &sz, &res[0]);
	if (rc == 0 && n > 1)
		rc = fetch_one(n, requests / n > 1000 ? requests / n : 1000, bs.sock, &sz, &res[1]);
	bench_server_stop(&bs);
	if (rc < 0) {
		fprintf(stderr, "wsrv-bench fetch: a client failed: %s\n", wsrv_last_error());
		return 1;
	}
	int k = n > 1 ? 2 : 1;
	if (json) {
		json_t *arr = json_array();
		for (int i = 0; i < k; i++)
			json_array_append_new(arr, json_pack("{s:i, s:f, s:f, s:f, s:f, s:f}",
				"clients", res[i].clients, "rpc_p50_us", res[i].p50, "rpc_p99_us", res[i].p99,
				"floor_p50_us", res[i].floor50, "floor_p99_us", res[i].floor99,
				"p50_vs_floor", res[i].p50 / res[i].floor50));
		json_dumpf(arr, stdout, JSON_INDENT(2));
		putchar('\n');
		json_decref(arr);
		return 0;
	}
	printf("fetch-layer round trip (request %zu B, reply %zu B), microseconds\n", sz.fetch_req, sz.fetch_rep);
	printf("%8s %10s %10s %12s %12s %10s\n", "clients", "rpc p50", "rpc p99", "floor p50", "floor p99", "p50/floor");
	for (int i = 0; i < k; i++)
		printf("%8d %10.2f %10.2f %12.2f %12.2f %9.2fx\n", res[i].clients, res[i].p50, res[i].p99,
		       res[i].floor50, res[i].floor99, res[i].p50 / res[i].floor50);
	return 0;
}
