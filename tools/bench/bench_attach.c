// SPDX-License-Identifier: MIT
/* bench_attach.c - `wsrv-bench attach`: how long a new worker takes to get
 * at an already loaded model, across model sizes.
 *
 * One wsrvd serves every model; for each, a new client attaches (and
 * detaches) 30 times: the attach alone and connect + attach are timed.
 * Baseline, same run, same files: what a worker pays to open them the
 * cheapest way without a server, as safetensors' safe_open does: open each
 * file, read and check its header, and mmap it (no byte of data touched).
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <stdbool.h>
#include <ftw.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "bench.h"
#include "bench_util.h"
#include "mkmodel.h"
#include "format_door.h"
#include "progress.h"
#include "units.h"
#include "wsrv.h"

#define REPS 30
#define MAX_MODELS 16

struct entry {
	char name[32];
	char path[512];
	uint64_t bytes;
	double attach_ms, connect_attach_ms, baseline_ms;
};

static double safe_open_ms(const char *path)
{
	struct model *m;
	struct errinfo e;
	double t0 = mono_now();

	if (model_open("x", path, NULL, &m, &e) < 0)
		return -1;
	for (size_t f = 0; f < m->nfiles; f++) {
		int fd = open(m->files[f]->path, O_RDONLY | O_CLOEXEC);
		void *p = fd >= 0 ? mmap(NULL, m->files[f]->file_size, PROT_READ, MAP_SHARED, fd, 0) : MAP_FAILED;
		if (p != MAP_FAILED)
			munmap(p, m->files[f]->file_size);
		if (fd >= 0)
			close(fd);
	}
	model_free(m);
	return (mono_now() - t0) * 1e3;
}

static int attach_measure(const char *sock, struct entry *en)
{
	double a[REPS], ca[REPS], b[REPS];

	for (int i = 0; i < REPS; i++) {
		struct wsrv_client *c;
		struct wsrv_model *m;
		double t0 = mono_now(), t1, t2;
		if (wsrv_connect(sock, NULL, &c) < 0)
			return -1;
		t1 = mono_now();
		if (wsrv_attach(c, en->name, &m) < 0) {
			fprintf(stderr, "wsrv-bench attach: %s\n", wsrv_last_error());
			wsrv_disconnect(c);
			return -1;
		}
		t2 = mono_now();
		wsrv_detach(m);
		wsrv_disconnect(c);
		a[i] = (t2 - t1) * 1e3;
		ca[i] = (t2 - t0) * 1e3;
		b[i] = safe_open_ms(en->path);
	}
	en->attach_ms = percentile(a, REPS, 50);
	en->connect_attach_ms = percentile(ca, REPS, 50);
	en->baseline_ms = percentile(b, REPS, 50);
	return 0;
}

static int rm_one(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
	(void)sb;
	(void)ftw;
	return (flag == FTW_DP ? rmdir(path) : unlink(path)) < 0 ? -1 : 0;
}

/* --clean: the models this run made go, and workdir if they leave it
 * empty (issue 61 item 12: 309 MiB stayed in /tmp with no way to say). */
static void clean_sizes(const struct entry *en, int n, const bool *made, const char *workdir)
{
	for (int i = 0; i < n; i++)
		if (made[i] && nftw(en[i].path, rm_one, 16, FTW_DEPTH | FTW_PHYS) < 0)
			fprintf(stderr, "wsrv-bench attach: cannot remove %s: %s\n", en[i].path, strerror(errno));
	(void)rmdir(workdir); /* only when empty */
}

/* --sizes 64M,256M: llama-mini models made in workdir (kept for reuse,
 * unless --clean), those it made marked in made[]. */
static int make_sizes(char *list, const char *workdir, struct entry *en, int *n, bool *made)
{
	for (char *tok = strtok(list, ","); tok && *n < MAX_MODELS; tok = strtok(NULL, ",")) {
		struct entry *x = &en[(*n)++];
		struct mk_spec spec;
		struct errinfo e;
		uint64_t sz;
		if (parse_size(tok, &sz) < 0)
			return -EINVAL;
		snprintf(x->name, sizeof(x->name), "m%s", tok);
		snprintf(x->path, sizeof(x->path), "%s/llama-mini-%s", workdir, tok);
		if (access(x->path, F_OK) == 0)
			continue;
		made[*n - 1] = true;
		fprintf(stderr, "making %s\n", x->path);
		if (mk_preset("llama-mini", sz, 0, &spec, &e) < 0 || mk_write(&spec, x->path, 4, 1, &e) < 0) {
			fprintf(stderr, "wsrv-bench attach: %s\n", e.msg);
			return -EIO;
		}
		mk_spec_free(&spec);
	}
	return 0;
}

static void attach_print(const struct entry *en, int n, int json)
{
	json_t *arr = json_array();
	char b[32];

	if (!json)
		printf("%-12s %12s %14s %14s %22s\n", "MODEL", "BYTES", "attach_ms", "connect+attach",
		       "baseline (safe_open)");
	for (int i = 0; i < n; i++) {
		if (json)
			json_array_append_new(arr, json_pack("{s:s, s:I, s:f, s:f, s:f}", "model", en[i].name,
				"model_bytes", (json_int_t)en[i].bytes, "attach_ms", en[i].attach_ms,
				"connect_attach_ms", en[i].connect_attach_ms, "baseline_ms", en[i].baseline_ms));
		else
			printf("%-12s %12s %11.3f ms %11.3f ms %14.3f ms\n", en[i].name,
			       fmt_bytes(en[i].bytes, b, sizeof(b)), en[i].attach_ms, en[i].connect_attach_ms,
			       en[i].baseline_ms);
	}
	if (json) {
		json_dumpf(arr, stdout, JSON_INDENT(2));
		putchar('\n');
	}
	json_decref(arr);
}

int bench_attach(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "model", required_argument, NULL, 'm' },
		{ "sizes", required_argument, NULL, 's' },
		{ "workdir", required_argument, NULL, 'w' },
		{ "clean", no_argument, NULL, 'c' },
		{ "json", no_argument, NULL, 'j' },
		{ 0 },
	};
	bool made[MAX_MODELS] = { false }, clean = false;
	struct entry en[MAX_MODELS] = { 0 };
	const char *specs[MAX_MODELS];
	char specbuf[MAX_MODELS][560];
	const char *workdir = "/tmp/wsrv-bench-models";
	char *sizes = NULL;
	int n = 0, json = 0, c, r = 0;
	struct bench_server bs = { 0 };

	optind = 1;
	while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		if (c == 'm' && n < MAX_MODELS) {
			snprintf(en[n].name, sizeof(en[n].name), "model%d", n);
			snprintf(en[n].path, sizeof(en[n].path), "%s", optarg);
			n++;
		} else if (c == 's') sizes = optarg;
		else if (c == 'w') workdir = optarg;
		else if (c == 'c') clean = true;
		else if (c == 'j') json = 1;
		else return 2;
	}
	/* The folder is for generated models: made only when some are. */
	if (sizes)
		mkdir(workdir, 0755);
	if ((sizes && make_sizes(sizes, workdir, en, &n, made) < 0) || n == 0) {
		fprintf(stderr, "usage: wsrv-bench attach (--model DIR ... | --sizes 64M,256M,1G [--workdir D] [--clean])\n"
				"                         [--json]\n");
		if (clean)
			clean_sizes(en, n, made, workdir);
		return 2;
	}
	if (sizes && !clean)
		fprintf(stderr, "the models are kept in %s for the next run (--clean removes those a run makes)\n",
			workdir);
	for (int i = 0; i < n; i++) {
		struct model *m;
		struct errinfo e;
		if (model_open("x", en[i].path, NULL, &m, &e) < 0) {
			fprintf(stderr, "wsrv-bench attach: %s\n", e.msg);
			return 1;
		}
		en[i].bytes = m->data_bytes;
		model_free(m);
		snprintf(specbuf[i], sizeof(specbuf[i]), "%s=%s", en[i].name, en[i].path);
		specs[i] = specbuf[i];
	}
	if (bench_server_start(&bs, specs, (size_t)n) < 0) {
		fprintf(stderr, "wsrv-bench attach: cannot start wsrvd\n");
		return 1;
	}
	for (int i = 0; i < n && r == 0; i++)
		r = attach_measure(bs.sock, &en[i]);
	bench_server_stop(&bs);
	if (clean)
		clean_sizes(en, n, made, workdir);
	if (r < 0)
		return 1;
	attach_print(en, n, json);
	return 0;
}
