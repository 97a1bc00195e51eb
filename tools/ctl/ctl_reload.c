// SPDX-License-Identifier: MIT
/* ctl_reload.c - wsrvctl reload: a new generation of a model while workers
 * run (or, with --all, of every model in turn: systemctl reload). Asks
 * the server, then follows the model list until the new generation
 * serves, the reload fails, or --timeout passes. */
#include <getopt.h>
#include <stdbool.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "clock.h"
#include "ctl.h"
#include "escape.h"
#include "ticker.h"
#include "wsrv.h"

/* The current generation of model name and its reload note; 0 if none. */
static uint64_t current(struct wsrv_client *cl, const char *name, char *note, size_t len)
{
	struct wsrv_model_list *l;
	struct wsrv_model_info mi;
	struct wsrv_generation g;
	uint64_t gen = 0;

	note[0] = 0;
	if (wsrv_list_models(cl, &l) < 0)
		return 0;
	for (size_t i = 0; wsrv_model_list_at(l, i, &mi) == 0; i++)
		if (strcmp(mi.name, name) == 0 && wsrv_model_list_generation(l, i, &g) == 0 && !g.retired) {
			gen = g.generation;
			snprintf(note, len, "%s", g.reload);
		}
	wsrv_model_list_free(l);
	return gen;
}

/* The exit status of a reload whose wait ran out (it goes on). */
#define RELOAD_WAITED_OUT 3

/* Reloads model name (from path, NULL: its own) and follows it for
 * timeout seconds (0: not at all): 0 done (or started, with 0), 1 failed,
 * RELOAD_WAITED_OUT when the wait ran out first. */
static int reload_one(struct wsrv_client *cl, const char *name, const char *path, double timeout)
{
	char note[200];
	uint64_t before = current(cl, name, note, sizeof(note)), now = before;

	if (wsrv_reload(cl, name, path) < 0) {
		fprintf(stderr, "wsrvctl: %s\n", wsrv_last_error());
		return 1;
	}
	printf("reloading %s (generation %" PRIu64 " serves meanwhile)\n", esc(name), before);
	fflush(stdout);
	if (timeout == 0) {
		printf("not waiting for it (--timeout 0): wsrvctl models shows how it goes\n");
		return 0;
	}
	ticker_step("waiting for %s's new generation", esc(name));
	for (double t0 = mono_now(); mono_now() - t0 < timeout;) {
		struct timespec ts = { 0, 50000000 };
		now = current(cl, name, note, sizeof(note));
		ticker_update("waiting for %s's new generation: %s", esc(name), note[0] ? esc(note) : "no word yet");
		if (now != before || strstr(note, "failed"))
			break;
		nanosleep(&ts, NULL);
	}
	ticker_step(NULL);
	if (now != before) {
		printf("generation %" PRIu64 " of %s serves new attaches (%s); attached workers were told\n", now,
		       esc(name), esc(note));
		return 0;
	}
	if (strstr(note, "failed")) {
		fprintf(stderr, "wsrvctl: %s: %s\n", esc(name), esc(note));
		return 1;
	}
	/* Issue 61 item 9: this printed the server's "loading generation
	 * N from DIR" and exited 1, as if the reload had failed. */
	fprintf(stderr, "wsrvctl: %s: the wait ran out after %g s; the reload goes on in the server (%s): "
		"wsrvctl models shows how it goes\n", esc(name), timeout, note[0] ? esc(note) : "no word yet");
	return RELOAD_WAITED_OUT;
}

/* Every model the server names, once each, one after another (each
 * reload holds a second copy of its model until it serves). */
static int reload_all(struct wsrv_client *cl, double timeout)
{
	struct wsrv_model_list *l;
	struct wsrv_model_info mi;
	char names[256][72];
	size_t n = 0;
	int rc = 0;

	if (wsrv_list_models(cl, &l) < 0) {
		fprintf(stderr, "wsrvctl: %s\n", wsrv_last_error());
		return 1;
	}
	for (size_t i = 0; wsrv_model_list_at(l, i, &mi) == 0 && n < 256; i++) {
		bool seen = false;
		for (size_t k = 0; k < n; k++)
			seen = seen || strcmp(names[k], mi.name) == 0;
		if (!seen)
			snprintf(names[n++], sizeof(names[0]), "%s", mi.name);
	}
	wsrv_model_list_free(l);
	for (size_t k = 0; k < n; k++) {
		int r = reload_one(cl, names[k], NULL, timeout);
		rc = rc == 1 || r == 1 ? 1 : rc ? rc : r; /* a failure before a wait that ran out */
	}
	return rc;
}

int ctl_reload(const struct ctl_ctx *c, int argc, char **argv)
{
	static const struct option opts[] = {
		{ "path", required_argument, NULL, 'p' }, { "timeout", required_argument, NULL, 't' },
		{ "all", no_argument, NULL, 'a' }, { 0 },
	};
	const char *path = NULL;
	double timeout = 600;
	struct wsrv_client *cl;
	bool all = false;
	int o, rc;

	optind = 1;
	while ((o = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		if (o == 'p') path = optarg;
		else if (o == 't') {
			char *end;
			timeout = strtod(optarg, &end);
			if (end == optarg || *end || !(timeout >= 0) || timeout > 1e9) {
				fprintf(stderr, "wsrvctl reload: --timeout '%s': seconds, 0 or more (0: do not wait)\n",
					optarg);
				return 2;
			}
		}
		else if (o == 'a') all = true;
		else return 2;
	}
	if (all ? optind != argc || path : optind + 1 != argc) {
		fprintf(stderr, "usage: wsrvctl reload MODEL [--path DIR] [--timeout SECONDS]\n"
				"       wsrvctl reload --all [--timeout SECONDS]\n");
		return 2;
	}
	if (ctl_connect(c, &cl))
		return 1;
	rc = all ? reload_all(cl, timeout) : reload_one(cl, argv[optind], path, timeout);
	wsrv_disconnect(cl);
	return rc;
}
