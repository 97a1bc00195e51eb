// SPDX-License-Identifier: MIT
/* bench_share.c - `wsrv-bench share`: what N co-located workers cost in RAM.
 *
 * N clients attach to one wsrvd and read every byte of the model through
 * the shared mapping; the PSS (each shared page split between the processes
 * that map it) of the server and all clients is summed. Baseline, same run:
 * N processes that each read the model's files into private memory, as
 * workers do without a weight server, measured the same way.
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <jansson.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
#include <xxhash.h>

#include "cliarg.h"
#include "bench.h"
#include "bench_util.h"
#include "format_door.h"
#include "wsrv.h"

#define MAX_CLIENTS 64

/* A worker through wsrv: attach, hash every tensor, report, wait. */
static int shared_worker(const char *sock, int ready)
{
	struct wsrv_client *c;
	struct wsrv_model *m;
	uint64_t sum = 0;

	if (wsrv_connect(sock, NULL, &c) < 0 || wsrv_attach(c, "m", &m) < 0)
		return 1;
	for (size_t i = 0; i < wsrv_model_tensor_count(m); i++) {
		struct wsrv_tensor t;
		wsrv_model_tensor(m, i, &t);
		sum += XXH3_64bits(t.data, t.size);
	}
	if (write(ready, &sum, 1) != 1)
		return 1;
	pause();
	return 0;
}

/* A worker without wsrv: every file read into private memory. */
static int private_worker(const struct model *md, int ready)
{
	uint64_t sum = 0;

	for (size_t f = 0; f < md->nfiles; f++) {
		uint64_t len = md->files[f]->file_size;
		uint8_t *buf = malloc(len ? len : 1);
		int fd = open(md->files[f]->path, O_RDONLY | O_CLOEXEC);
		uint64_t got = 0;
		ssize_t n;
		while (buf && fd >= 0 && got < len && (n = read(fd, buf + got, len - got)) > 0)
			got += (uint64_t)n;
		if (fd >= 0)
			close(fd);
		if (!buf || got != len)
			return 1;
		sum += XXH3_64bits(buf, len); /* kept: the private copy stays */
	}
	if (write(ready, &sum, 1) != 1)
		return 1;
	pause();
	return 0;
}

/* Starts n workers of one kind, waits until all are ready, sums PSS of
 * them (and extra, when > 0), kills them. */
static uint64_t measure(int n, const char *sock, const struct model *md, pid_t extra)
{
	pid_t kids[MAX_CLIENTS];
	int p[2];
	uint64_t total = 0;
	char b;

	if (pipe(p) < 0)
		return 0;
	for (int i = 0; i < n; i++) {
		kids[i] = fork();
		if (kids[i] == 0) {
			close(p[0]);
			_exit(sock ? shared_worker(sock, p[1]) : private_worker(md, p[1]));
		}
	}
	close(p[1]);
	for (int i = 0; i < n; i++)
		if (read(p[0], &b, 1) != 1)
			break;
	close(p[0]);
	for (int i = 0; i < n; i++)
		total += pss_bytes(kids[i]);
	if (extra > 0)
		total += pss_bytes(extra);
	for (int i = 0; i < n; i++) {
		kill(kids[i], SIGKILL);
		waitpid(kids[i], NULL, 0);
	}
	return total;
}

int bench_share(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "model", required_argument, NULL, 'm' },
		{ "clients", required_argument, NULL, 'n' },
		{ "json", no_argument, NULL, 'j' },
		{ 0 },
	};
	const char *path = NULL;
	int n = 8, json = 0, c;
	struct bench_server bs = { 0 };
	struct model *md;
	struct errinfo e;
	char spec[4200];

	optind = 1;
	while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		if (c == 'm') path = optarg;
		else if (c == 'n') n = (int)cliarg_long("wsrv-bench share", "--clients", optarg, 1, MAX_CLIENTS);
		else if (c == 'j') json = 1;
		else return 2;
	}
	if (!path || optind != argc) {
		fprintf(stderr, "usage: wsrv-bench share --model DIR [--clients 1..%d] [--json]\n", MAX_CLIENTS);
		return 2;
	}
	if (model_open("m", path, NULL, &md, &e) < 0) {
		fprintf(stderr, "wsrv-bench share: %s\n", e.msg);
		return 1;
	}
	snprintf(spec, sizeof(spec), "m=%s", path);
	if (bench_server_start(&bs, (const char *[]){ spec }, 1) < 0) {
		fprintf(stderr, "wsrv-bench share: cannot start wsrvd\n");
		model_free(md);
		return 1;
	}
	uint64_t shared = measure(n, bs.sock, md, bs.pid);
	bench_server_stop(&bs);
	uint64_t priv = measure(n, NULL, md, 0);
	double model = (double)md->data_bytes;
	double bar = 1.1 * model + 8.0 * 1048576 * n;

	if (json) {
		json_t *o = json_pack("{s:I, s:i, s:I, s:I, s:f, s:f, s:b}",
			"model_bytes", (json_int_t)md->data_bytes, "clients", n,
			"total_pss_bytes", (json_int_t)shared, "private_pss_bytes", (json_int_t)priv,
			"total_vs_model", (double)shared / model, "private_vs_total", (double)priv / (double)shared,
			"within_bar", (double)shared <= bar);
		json_dumpf(o, stdout, JSON_INDENT(2));
		putchar('\n');
		json_decref(o);
	} else {
		printf("model %.1f MiB, %d clients that each read every byte\n", model / 1048576, n);
		printf("  wsrv: server + %d clients, total PSS   %8.1f MiB   %.3fx the model (bar: <= %.1f MiB: %s)\n",
		       n, (double)shared / 1048576, (double)shared / model, bar / 1048576,
		       bench_at_most((double)shared, bar));
		printf("  baseline: %d private copies, total PSS %8.1f MiB   %.2fx wsrv\n", n,
		       (double)priv / 1048576, (double)priv / (double)shared);
	}
	model_free(md);
	return 0;
}
