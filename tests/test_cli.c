// SPDX-License-Identifier: MIT
/* test_cli.c - the programs as scripts see them: exit codes, messages on
 * stderr, JSON on stdout. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <fcntl.h>
#include <jansson.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "fixture.h"
#include "wsrv.h"

/* dir[0]: scratch. */
static struct fixture F = { .tag = "cli", .models = { { "" } } };

static char out[1 << 20], err[1 << 16];
static int run_limit_s = 120; /* each run, at most */

static void cli_slurp(const char *path, char *buf, size_t cap)
{
	FILE *f = fopen(path, "re");
	size_t n = f ? fread(buf, 1, cap - 1, f) : 0;

	buf[n] = 0;
	if (f)
		fclose(f);
}

/* Runs the program named by env var `prog` with args; returns its exit
 * status, with stdout and stderr in out and err. */
static int cli_run(const char *prog, ...)
{
	const char *argv[32];
	char o[4096], e[4096];
	va_list ap;
	int n = 0, status;

	argv[n++] = getenv(prog);
	assert_non_null(argv[0]);
	va_start(ap, prog);
	while (n < 31 && (argv[n] = va_arg(ap, const char *)))
		n++;
	va_end(ap);
	argv[n] = NULL;
	snprintf(o, sizeof(o), "%s", pjoin(F.dir[0], "out"));
	snprintf(e, sizeof(e), "%s", pjoin(F.dir[0], "err"));
	status = run_prog(argv, NULL, o, e, 0, run_limit_s);
	cli_slurp(o, out, sizeof(out));
	cli_slurp(e, err, sizeof(err));
	return status;
}

static void inspect(void **s)
{
	char model[4096];
	json_error_t je;
	json_t *j;

	snprintf(model, sizeof(model), "%s", pjoin(F.dir[0], "model")); /* pjoin's buffers rotate */
	assert_int_equal(cli_run("WSRV_MKMODEL", "--preset", "tiny", "--size", "2M", "--shards", "2",
			     "--out", model, NULL), 0);
	assert_int_equal(cli_run("WSRV_CTL", "inspect", model, NULL), 0);
	assert_non_null(strstr(out, "model.layers.0.self_attn.q_proj.weight"));
	assert_non_null(strstr(out, ": valid"));
	/* Counted as wsrvctl models counts them (issue 41: "10 groups"
	 * beside LAYERS 9). */
	assert_non_null(strstr(out, " layers + the global group, "));
	assert_int_equal(cli_run("WSRV_CTL", "--json", "inspect", model, NULL), 0);
	j = json_loads(out, 0, &je);
	assert_non_null(j);
	assert_true(json_is_true(json_object_get(j, "valid")));
	assert_int_equal(json_array_size(json_object_get(j, "tensors")), 39);
	assert_int_equal(json_integer_value(json_object_get(j, "files")), 2);
	json_decref(j);
	/* Invalid input: exit 1, the reason on stderr, nothing on stdout. */
	assert_int_equal(st_write(pjoin(F.dir[0], "bad.safetensors"),
		"{\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,4]}}", 4, NULL), 0);
	assert_int_equal(cli_run("WSRV_CTL", "inspect", pjoin(F.dir[0], "bad.safetensors"), NULL), 1);
	assert_non_null(strstr(err, "bad.safetensors: tensor 'w'"));
	assert_non_null(strstr(err, "(TensorInvalidInfo)"));
	assert_string_equal(out, "");
	/* Usage errors: exit 2. */
	assert_int_equal(cli_run("WSRV_CTL", "inspect", NULL), 2);
	assert_int_equal(cli_run("WSRV_CTL", "frobnicate", NULL), 2);
	assert_int_equal(cli_run("WSRV_CTL", NULL), 2);
	/* Issue 49 item 8: an option that changes nothing inspect shows was
	 * accepted and ignored (--memory-budget, and --mem for it); every
	 * command takes --help, exit 0; the help names WSRV_SOCKET and the
	 * exit codes. */
	assert_int_equal(cli_run("WSRV_CTL", "inspect", model, "--queue-depth", "8", NULL), 2);
	assert_non_null(strstr(err, "--queue-depth does not change what inspect shows"));
	/* (--memory-budget does since item 9: the plan under it.) */
	assert_int_equal(cli_run("WSRV_CTL", "inspect", model, "--memory-budget", "1G", NULL), 0);
	assert_non_null(strstr(out, "it holds all of it: no disk tier"));
	assert_int_equal(cli_run("WSRV_CTL", "inspect", model, "--mem", "1G", NULL), 2);
	assert_int_equal(cli_run("WSRV_CTL", "reload", "--help", NULL), 0);
	assert_non_null(strstr(out, "usage: wsrvctl"));
	assert_non_null(strstr(out, "reload"));
	/* Issue 61 item 8: each command's help lists its options (they were
	 * only in the bare usage and the man page). */
	assert_non_null(strstr(out, "--timeout S"));
	assert_non_null(strstr(out, "3 the wait ran out"));
	static const char *const with[][2] = { { "inspect", "--memory-budget SIZE" }, { "tensors", "--layer N" },
					       { "verify", "--hold S" }, { "dump", "-o FILE" },
					       { "plan", "--slots N" }, { "publish", "--from DIR" } };
	for (size_t k = 0; k < sizeof(with) / sizeof(with[0]); k++) {
		assert_int_equal(cli_run("WSRV_CTL", with[k][0], "--help", NULL), 0);
		if (!strstr(out, "options:\n") || !strstr(out, with[k][1]))
			fail_msg("wsrvctl %s --help:\n%s", with[k][0], out);
	}
	assert_int_equal(cli_run("WSRV_CTL", "--help", NULL), 0);
	assert_non_null(strstr(out, "WSRV_SOCKET"));
	assert_non_null(strstr(out, "exit status"));
}

/* Issue 12: the load time covered only the read loop. It covers headers
 * through the published manifest, the phases add up to no more than it, and
 * the read-buffer pool of a small model is no larger than the model. */
/* The tensors of a --json listing (inspect's or wsrvctl tensors'), by
 * name: "segment/offset" strings in an object. */
static json_t *placements(json_t *tensors)
{
	json_t *o = json_object(), *t;
	size_t i;
	char at[64];

	json_array_foreach(tensors, i, t) {
		snprintf(at, sizeof(at), "%lld/%lld", (long long)json_integer_value(json_object_get(t, "segment")),
			 (long long)json_integer_value(json_object_get(t, "offset")));
		json_object_set_new(o, json_string_value(json_object_get(t, "name")), json_string(at));
	}
	return o;
}

/* Issue 79 item 6: inspect showed 1 segment where wsrvd lays the same
 * model out in 11 (it serves while loading by default, in runs of
 * layers). Every tensor's segment and offset in inspect's listing are
 * the ones wsrvd serves it at; --serve-when-loaded is the one-run
 * layout. */
static void inspect_lays_out_as_wsrvd(void **s)
{
	struct test_server ts = { 0 };
	char model[4096];
	json_t *mine, *served, *j;

	snprintf(model, sizeof(model), "%s", pjoin(F.dir[0], "m-layout"));
	assert_int_equal(cli_run("WSRV_MKMODEL", "--preset", "tiny", "--size", "8M", "--layers", "12", "--out", model,
				 NULL), 0);
	assert_int_equal(cli_run("WSRV_CTL", "--json", "inspect", model, NULL), 0);
	assert_non_null(j = json_loads(out, 0, NULL));
	mine = placements(json_object_get(j, "tensors"));
	assert_true(json_integer_value(json_object_get(j, "segments")) > 1);
	json_decref(j);
	assert_int_equal(server_start(&ts, "m", model, NULL), 0);
	assert_int_equal(cli_run("WSRV_CTL", "--socket", ts.sock, "--json", "tensors", "m", NULL), 0);
	assert_non_null(j = json_loads(out, 0, NULL));
	served = placements(json_object_get(j, "tensors") ? json_object_get(j, "tensors") : j);
	json_decref(j);
	assert_true(json_object_size(served) > 10);
	if (!json_equal(mine, served)) {
		char *a = json_dumps(mine, JSON_SORT_KEYS), *b = json_dumps(served, JSON_SORT_KEYS);
		fail_msg("inspect: %.600s\nwsrvd:   %.600s", a, b);
	}
	assert_int_equal(server_stop(&ts, SIGTERM), 0);
	rm_rf(ts.dir);
	json_decref(mine);
	json_decref(served);
	assert_int_equal(cli_run("WSRV_CTL", "inspect", model, "--serve-when-loaded", NULL), 0);
	assert_non_null(strstr(out, ", 1 segment: valid"));
	assert_int_equal(cli_run("WSRV_CTL", "inspect", model, "--serve-when-loaded", "--memory-budget", "1G", NULL), 2);
}

static void load_time_is_whole(json_t *m)
{
	json_t *ph = json_object_get(m, "phases");
	const char *keys[] = { "open_parse_s", "allocate_place_s", "read_s", "seal_s" };
	double total = json_real_value(json_object_get(m, "load_seconds")), sum = 0;

	assert_non_null(ph);
	for (size_t i = 0; i < sizeof(keys) / sizeof(keys[0]); i++) {
		json_t *v = json_object_get(ph, keys[i]);
		assert_true(json_is_real(v));
		sum += json_real_value(v);
	}
	assert_true(total > 0 && sum <= total + 1e-6 && sum > total * 0.9);
	assert_true(json_real_value(json_object_get(ph, "checksum_s")) <=
		    json_real_value(json_object_get(ph, "read_s")));
	assert_true(json_integer_value(json_object_get(m, "read_pool_bytes")) <=
		    json_integer_value(json_object_get(m, "tensor_bytes")) + (4 << 20));
	assert_true(json_is_integer(json_object_get(m, "read_pinned_bytes")));
	assert_true(json_integer_value(json_object_get(m, "read_pinned_bytes")) <=
		    json_integer_value(json_object_get(m, "read_pool_bytes")));
}

static void wsrvd_load_only(void **s)
{
	const char *model = pjoin(F.dir[0], "model2");
	char spec[4200];
	json_error_t je;
	json_t *j, *m;

	assert_int_equal(cli_run("WSRV_MKMODEL", "--preset", "llama-mini", "--size", "8M", "--out",
			     model, NULL), 0);
	snprintf(spec, sizeof(spec), "demo=%s", model);
	assert_int_equal(cli_run("WSRVD", "--load-only", "--model", spec, "--no-lock", "--hugepages", "off",
			     NULL), 0);
	assert_non_null(strstr(out, "sealed     yes"));
	assert_non_null(strstr(err, "model demo loaded"));
	assert_int_equal(cli_run("WSRVD", "--load-only", "--json", "--model", spec, "--no-lock",
			     "--hugepages", "off", NULL), 0);
	j = json_loads(out, 0, &je);
	assert_non_null(j);
	m = json_array_get(j, 0);
	assert_true(json_is_true(json_object_get(m, "sealed")));
	assert_int_equal(json_integer_value(json_object_get(m, "page_size")), 4096);
	assert_non_null(json_object_get(json_object_get(m, "numa_pages_sampled"), "0"));
	load_time_is_whole(m);
	json_decref(j);
	/* --verbose logs the phases. */
	assert_int_equal(cli_run("WSRVD", "--load-only", "--verbose", "--model", spec, "--lock", "off",
			     NULL), 0);
	assert_non_null(strstr(err, "read"));
	assert_non_null(strstr(err, "checksum"));
	assert_non_null(strstr(out, "open     "));
	/* Issue 79 item 10: "2 of 2 chunks (stopped early)": a sweep the
	 * exit stopped after its last chunk stopped nothing; a sweep stopped
	 * early leaves chunks in 4 KiB pages, and its note counts all of them. */
	for (const char *l = strstr(err, "(stopped early)"); l; l = strstr(l + 1, "(stopped early)")) {
		const char *start = l;
		while (start > err && start[-1] != '\n')
			start--;
		if (!memmem(start, (size_t)(l - start), "the rest in 4 KiB pages", 23))
			fail_msg("a sweep said it stopped early with every chunk made: %.*s", (int)(l - start + 15), start);
	}
	assert_int_equal(cli_run("WSRVD", "--load-only", "--model", spec, "--lock", "maybe", NULL), 2);
	/* Every load option reaches wsrvd, the last in the table too: wsrvd
	 * copied two fewer than there are (and no terminator), and
	 * --layer-pattern was "unrecognized". */
	assert_int_equal(cli_run("WSRVD", "--load-only", "--model", spec, "--no-lock", "--layer-pattern",
			     "blocks.{N}.", "--max-segment", "64M", NULL), 0);
	assert_int_equal(cli_run("WSRV_BENCH", "load", "--model", spec + 5, "--repeat", "1", "--layer-pattern",
			     "blocks.{N}.", NULL), 0);
	assert_int_equal(cli_run("WSRVD", "--load-only", "--model", "x=/nonexistent", NULL), 1);
	assert_non_null(strstr(err, "/nonexistent"));
	assert_int_equal(cli_run("WSRVD", "--load-only", "--model", "nonsense", NULL), 2);
	assert_int_equal(cli_run("WSRVD", "--load-only", "--model", spec, "--hugepages", "maybe", NULL), 2);
	/* An unknown preset is a usage error, as the options' are (it was 1). */
	assert_int_equal(cli_run("WSRV_MKMODEL", "--preset", "gpt-9", "--size", "1M", "--out", model, NULL), 2);
	assert_non_null(strstr(err, "unknown preset 'gpt-9'"));
	assert_int_equal(cli_run("WSRV_MKMODEL", "--preset", "tiny", "--size", "1M", "--out", "", NULL), 2);
	assert_non_null(strstr(err, "--out ''"));
	/* wsrvctl: a wrong command is one line and the hint, not the usage. */
	assert_int_equal(cli_run("WSRV_CTL", "frobnicate", NULL), 2);
	assert_string_equal(err, "wsrvctl: unknown command 'frobnicate'\nsee wsrvctl --help\n");
	assert_int_equal(cli_run("WSRV_MKMODEL", "--preset", "tiny", NULL), 2);
}

/* Issue 13, items 13-14: every bad argument is exit 2 and a sentence; no
 * number wraps or becomes 0. */
static void bad_arguments(void **s)
{
	char model[4096], spec[4200];

	snprintf(model, sizeof(model), "%s", pjoin(F.dir[0], "m3"));

	assert_int_equal(cli_run("WSRV_MKMODEL", "--preset", "tiny", "--size", "1M", "--shards",
			     "4294967297", "--out", model, NULL), 2);
	assert_non_null(strstr(err, "--shards '4294967297'"));
	assert_int_equal(cli_run("WSRV_MKMODEL", "--preset", "tiny", "--size", "1M", "--shards", "-1",
			     "--out", model, NULL), 2);
	assert_int_equal(cli_run("WSRV_MKMODEL", "--preset", "tiny", "--size", "0", "--out", model, NULL), 2);
	assert_non_null(strstr(err, "--size '0'"));
	assert_int_equal(cli_run("WSRV_MKMODEL", "--preset", "tiny", "--size", "1M", "--out", model,
			     "extra", NULL), 2);
	assert_non_null(strstr(err, "unexpected argument 'extra'"));
	assert_int_equal(cli_run("WSRV_CTL", "tensors", "m", "--layer", "abc", NULL), 2);
	assert_non_null(strstr(err, "--layer 'abc'"));
	assert_int_equal(cli_run("WSRV_CTL", "verify", "m", "--hold", "-5", NULL), 2);
	assert_int_equal(cli_run("WSRV_CTL", "dump", "m", "t", "--rank", "1", "--world", "2", "-o",
			     pjoin(F.dir[0], "x"), NULL), 2);
	assert_non_null(strstr(err, "need --plan"));
	assert_int_equal(cli_run("WSRV_CTL", "dump", "m", "t", "--plan", "p", "--rank", "abc", "-o",
			     pjoin(F.dir[0], "x"), NULL), 2);
	assert_int_equal(cli_run("WSRV_CTL", "stats", "extra", NULL), 2);
	assert_int_equal(cli_run("WSRV_CTL", "models", "extra", NULL), 2);
	assert_int_equal(cli_run("WSRV_CTL", "stats", "--socket", NULL), 2);
	assert_non_null(strstr(err, "--socket needs a PATH"));
	assert_int_equal(cli_run("WSRV_CTL", "plan", "m", "--rank", "x", NULL), 2);
	/* SIZE means a size: 64K is taken. */
	if (cli_run("WSRV_MKMODEL", "--preset", "tiny", "--size", "1M", "--out", model, NULL) != 0)
		fail_msg("mkmodel: %s", err);
	snprintf(spec, sizeof(spec), "m=%s", model);
	assert_int_equal(cli_run("WSRVD", "--load-only", "--no-lock", "--hugepages", "off", "--max-message",
			     "64K", "--model", spec, NULL), 0);
	assert_int_equal(cli_run("WSRVD", "--load-only", "--no-lock", "--model", spec, "stray", NULL), 2);
	assert_non_null(strstr(err, "unexpected argument 'stray'"));
	/* wsrv-bench and the example worker: the same strict numbers. */
	assert_int_equal(cli_run("WSRV_BENCH", "pipeline", "--model", model, "--trace", "/nonexistent/t.json",
			     NULL), 2);
	assert_non_null(strstr(err, "--trace /nonexistent/t.json"));
	assert_int_equal(cli_run("WSRV_BENCH", "fetch", "--model", model, "--clients", "abc", NULL), 2);
	assert_non_null(strstr(err, "--clients 'abc'"));
	assert_int_equal(cli_run("WSRV_BENCH", "share", "--model", model, "--clients", "2", "extra", NULL), 2);
	assert_int_equal(cli_run("WSRV_BENCH", "load", "--model", model, "--repeat", "0", NULL), 2);
	assert_int_equal(cli_run("WSRV_BENCH", "header", "--tensors", "5x", NULL), 2);
	assert_int_equal(cli_run("WSRV_BENCH", "pipeline", "--model", model, "--slots", "99", NULL), 2);
	assert_int_equal(cli_run("WSRV_WORKER", "--model", "m", "--rank", "abc", NULL), 2);
	assert_non_null(strstr(err, "--rank 'abc'"));
	assert_int_equal(cli_run("WSRV_WORKER", "--model", "m", "--passes", "-1", NULL), 2);
	assert_int_equal(cli_run("WSRV_WORKER", "--model", "m", "extra", NULL), 2);
}

/* Every wsrvd option with a value, and values it must refuse before it
 * does anything: exit 2, one line naming the option (the rule with it),
 * then "see wsrvd --help", and nothing made (no socket, no lock). */
static const struct { const char *opt, *bad[6]; } bad_values[] = {
	{ "--socket", { "", NULL } },
	{ "--allow-uid", { "", "-1", "abc", "99999999999999999999", "4294967295", NULL } },
	{ "--allow-gid", { "", "-1", "1x", NULL } },
	{ "--allow-publish-uid", { "", "-1", "abc", NULL } },
	{ "--allow-publish-gid", { "", "x", NULL } },
	{ "--metrics-listen", { "", "127.0.0.1:99999", "127.0.0.1", "127.0.0.1:x", "256.1.1.1:9464",
				"127.0.0.1:-1" } },
	{ "--max-clients", { "", "0", "-1", "65537", "1e3", NULL } },
	{ "--max-leases", { "", "0", "abc", NULL } },
	{ "--max-attach", { "", "0", "99999", NULL } },
	{ "--max-message", { "", "1", "3Q", "-1", "1T", NULL } },
	{ "--hello-timeout", { "", "0", "1.5", "3601", NULL } },
	{ "--max-regions", { "", "-1", "99999", NULL } },
	{ "--max-region-bytes", { "", "1Q", "-5", NULL } },
	{ "--max-client-regions", { "", "abc", NULL } },
	{ "--max-client-region-bytes", { "", "x", NULL } },
	{ "--numa", { "", "node", "bogus", NULL } },
	{ "--numa-node", { "", "-1", "64", NULL } },
	{ "--hugepages", { "", "maybe", NULL } },
	{ "--lock", { "", "maybe", NULL } },
	{ "--queue-depth", { "", "-1", "0", "1025", "abc", NULL } },
	{ "--block-size", { "", "3K", "0", "128M", "1Q", NULL } },
	{ "--concurrent-shards", { "", "-1", "1025", NULL } },
	{ "--read", { "", "fast", NULL } },
	{ "--read-rate", { "", "-1", "1Q", NULL } },
	{ "--align", { "", "3", "100", "2G", "x", NULL } },
	{ "--max-segment", { "", "1Q", "-1", NULL } },
	{ "--layer-pattern", { "", NULL } },
	{ "--ranks", { "", "5-2", "a-b", NULL } },
	{ "--world", { "", "0", "-1", NULL } },
	{ "--memory-budget-share", { "", "0", "101", "x", NULL } },
	{ "--plan", { "", "/nonexistent/plan.json", NULL } },
	{ "--peer-listen", { "", "1.2.3.4", "127.0.0.1:99999", NULL } },
	{ "--peer-allow", { "", "1.2.3.4/99", "x", NULL } },
	{ "--peer-token", { "", "/nonexistent/token", NULL } },
	{ "--fill-from", { "", "nowhere", "127.0.0.1:0", NULL } },
	{ "--fill-wait", { "", "-1", "abc", NULL } },
};

static bool one_line_then_hint(const char *e)
{
	const char *hint = strstr(e, "see wsrvd --help");
	int lines = 0;

	for (const char *c = e; *c; c++)
		lines += *c == '\n';
	return hint && lines <= 3;
}

static void every_option_checked_first(void **s)
{
	char model[4096], spec[4200], sock[4096], lock[4200];
	int bad = 0;

	run_limit_s = 10; /* a value taken by mistake starts a server: killed */
	snprintf(model, sizeof(model), "%s", pjoin(F.dir[0], "m4"));
	if (cli_run("WSRV_MKMODEL", "--preset", "tiny", "--size", "1M", "--out", model, NULL) != 0)
		fail_msg("mkmodel: %s", err);
	snprintf(spec, sizeof(spec), "m=%s", model);
	snprintf(sock, sizeof(sock), "%s", pjoin(F.dir[0], "bad.sock"));
	snprintf(lock, sizeof(lock), "%s.lock", sock);
	for (size_t i = 0; i < sizeof(bad_values) / sizeof(bad_values[0]); i++)
		for (size_t k = 0; k < 6 && bad_values[i].bad[k]; k++) {
			const char *o = bad_values[i].opt, *v = bad_values[i].bad[k];
			int st = strcmp(o, "--socket") == 0
				 ? cli_run("WSRVD", "--no-lock", o, v, "--model", spec, NULL)
				 : cli_run("WSRVD", "--no-lock", "--socket", sock, "--model", spec, o, v, NULL);

			if (st != 2 || !strstr(err, o) || !one_line_then_hint(err))
				bad += fprintf(stderr, "wsrvd %s '%s': exit %d, stderr:\n%s\n", o, v, st, err) > 0;
			if (access(sock, F_OK) == 0 || access(lock, F_OK) == 0) {
				bad += fprintf(stderr, "wsrvd %s '%s': made %s before refusing\n", o, v, sock) > 0;
				unlink(sock);
				unlink(lock);
			}
		}
	assert_int_equal(bad, 0);
	/* A mistyped option: the hint, not the whole usage. */
	assert_int_equal(cli_run("WSRVD", "--modle", spec, NULL), 2);
	assert_true(one_line_then_hint(err));
	/* Issue 49 item 3: getopt's own lines came in another format (the
	 * binary's full path, no timestamp, no level); now every line is the
	 * log's: "... wsrvd[PID] error: unknown option '--modle'". */
	assert_non_null(strstr(err, "] error: unknown option '--modle'"));
	assert_null(strstr(err, "unrecognized option"));
	assert_int_equal(cli_run("WSRVD", "--model", NULL), 2);
	assert_non_null(strstr(err, "] error: --model: a value is needed"));
	/* Issue 79 item 5: getopt took an unambiguous prefix as the option
	 * (--hugepage ran as --hugepages) and called an ambiguous one
	 * unknown (--max) without saying what it could mean. Only whole names
	 * are options now, and the sentence names the candidates. */
	assert_int_equal(cli_run("WSRVD", "--no-lock", "--socket", sock, "--model", spec, "--hugepage", "off", NULL), 2);
	assert_non_null(strstr(err, "unknown option '--hugepage': did you mean --hugepages?"));
	assert_int_equal(access(sock, F_OK), -1);
	assert_int_equal(cli_run("WSRVD", "--no-lock", "--socket", sock, "--model", spec, "--max=4", NULL), 2);
	assert_non_null(strstr(err, "unknown option '--max': did you mean --max-clients, --max-leases"));
	assert_int_equal(cli_run("WSRVD", "--no-lock", "--socket", sock, "--model", spec, "--socket-mode", "0600",
				 "--load-only", "--model=x=/nonexistent", "--", NULL) != 2 || !strstr(err, "unknown"), 1);
	for (const char *l = err; *l; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : l + strlen(l))
		if (*l && *l != '\n' && !strstr(l, " wsrvd["))
			fail_msg("a line not in the log's format: %s", l);
}

/* The README's C example, compiled as it stands: from ```c to ```. */
static void readme_example(const char *src)
{
	size_t len;
	char *readme = (char *)read_file(pjoin(getenv("WSRV_SOURCE_ROOT"), "README.md"), &len), *a, *b;
	FILE *f;

	assert_non_null(readme);
	assert_non_null(a = strstr(readme, "```c\n"));
	assert_non_null(b = strstr(a + 5, "```"));
	assert_non_null(f = fopen(src, "we"));
	fwrite(a + 5, 1, (size_t)(b - a - 5), f);
	fclose(f);
	free(readme);
}

/* Issue 79 item 10: the README's C example went on after a failed connect
 * (onto a NULL model) and exited 0. It compiles as written, exits 1 with
 * the reason where no server is, and 0 with a tensor where one serves its
 * model. */
static void readme_c_example_runs(void **s)
{
	static const char cc[] = "/usr/bin/cc";
	struct test_server ts = { 0 };
	char src[4200], exe[4200], inc[4200], libdir[4200], rpath[4300], model[4200];
	const char *lib = getenv("WSRV_LIB"), *nowhere[] = { "WSRV_SOCKET=/nonexistent/wsrv.sock", NULL };

	if (access(cc, X_OK) != 0)
		skip(); /* no C compiler on this machine */
	snprintf(src, sizeof(src), "%s", pjoin(F.dir[0], "readme.c"));
	snprintf(exe, sizeof(exe), "%s", pjoin(F.dir[0], "readme"));
	snprintf(inc, sizeof(inc), "-I%s", getenv("WSRV_HEADER"));
	*strrchr(inc, '/') = 0;
	snprintf(libdir, sizeof(libdir), "%s", lib);
	*strrchr(libdir, '/') = 0;
	snprintf(rpath, sizeof(rpath), "-Wl,-rpath,%s", libdir);
	readme_example(src);
	/* A sanitizer build's libwsrv needs its runtime in the program too. */
	const char *san = getenv("WSRV_SANITIZE");
	char fsan[64] = "-Wall";
	if (san && *san && strcmp(san, "none") != 0)
		snprintf(fsan, sizeof(fsan), "-fsanitize=%s", san);
	const char *build[] = { cc, "-std=gnu17", "-Wall", "-Werror", fsan, inc, src, lib, rpath, "-o", exe, NULL };
	if (run_prog(build, NULL, pjoin(F.dir[0], "cc.out"), pjoin(F.dir[0], "cc.err"), 0, run_limit_s) != 0)
		fail_msg("the README's C example does not compile (%s)", pjoin(F.dir[0], "cc.err"));
	const char *run[] = { exe, NULL };
	assert_int_equal(run_prog(run, nowhere, pjoin(F.dir[0], "ex.out"), pjoin(F.dir[0], "ex.err"), 0, run_limit_s), 1);
	snprintf(model, sizeof(model), "%s", pjoin(F.dir[0], "demo"));
	assert_int_equal(cli_run("WSRV_MKMODEL", "--preset", "llama-mini", "--size", "4M", "--out", model, NULL), 0);
	assert_int_equal(server_start(&ts, "demo", model, NULL), 0);
	char env_sock[4300];
	snprintf(env_sock, sizeof(env_sock), "WSRV_SOCKET=%s", ts.sock);
	const char *served[] = { env_sock, NULL };
	assert_int_equal(run_prog(run, served, pjoin(F.dir[0], "ex.out"), pjoin(F.dir[0], "ex.err"), 0, run_limit_s), 0);
	cli_slurp(pjoin(F.dir[0], "ex.out"), out, sizeof(out));
	assert_non_null(strstr(out, " bytes at 0x"));
	assert_int_equal(server_stop(&ts, SIGTERM), 0);
	rm_rf(ts.dir);
}

/* Issue 41's small things: --out's missing parents made, --version
 * everywhere, wsrv-bench --help on stdout, a layer a model lacks refused. */
static void small_things_seen(void **s)
{
	static const char *const progs[] = { "WSRVD", "WSRV_CTL", "WSRV_MKMODEL", "WSRV_BENCH" };
	struct test_server ts = { 0 };
	char model[4096], spec[4200];

	snprintf(model, sizeof(model), "%s", pjoin(F.dir[0], "new/parents/m5"));
	if (cli_run("WSRV_MKMODEL", "--preset", "tiny", "--size", "1M", "--out", model, NULL) != 0)
		fail_msg("mkmodel into missing folders: %s", err);
	assert_int_equal(access(pjoin(model, "config.json"), F_OK), 0);
	/* Issue 79 item 10: "2GB" was refused without the forms that work. */
	assert_int_equal(cli_run("WSRV_MKMODEL", "--preset", "tiny", "--size", "2GB", "--out", pjoin(F.dir[0], "gb"), NULL),
			 2);
	if (!strstr(err, "such as 512M, 1.5G or 2GiB") || !strstr(err, "KB, MB, GB are not taken"))
		fail_msg("--size 2GB: %s", err);
	for (size_t i = 0; i < sizeof(progs) / sizeof(progs[0]); i++) {
		assert_int_equal(cli_run(progs[i], "--version", NULL), 0);
		if (!strstr(out, "0.") || !strchr(out, '\n'))
			fail_msg("%s --version: %s", progs[i], out);
	}
	assert_int_equal(cli_run("WSRVD", "--help", NULL), 0);
	assert_null(strstr(out, "operations.md#")); /* an anchor the docs lack */
	assert_int_equal(cli_run("WSRV_BENCH", "--help", NULL), 0);
	assert_non_null(strstr(out, "usage: wsrv-bench"));
	assert_non_null(strstr(out, "load --model"));
	assert_string_equal(err, "");
	/* wsrv-bench cold (issue 38): its arguments, and a run whose JSON
	 * has the figures, one entry per worker on each side. */
	assert_int_equal(cli_run("WSRV_BENCH", "cold", "--model", model, "--workers", "0", NULL), 2);
	assert_int_equal(cli_run("WSRV_BENCH", "cold", "--model", model, "--device", "tpu", NULL), 2);
	assert_int_equal(cli_run("WSRV_BENCH", "cold", "--model", model, "--workers", "2", "--repeat", "1", "--json",
			     NULL), 0);
	json_t *cold = json_loads(out, 0, NULL);
	assert_non_null(cold);
	assert_true(json_real_value(json_object_get(cold, "wsrv_all_ready_s")) > 0);
	assert_true(json_real_value(json_object_get(cold, "load_file_all_ready_s")) > 0);
	assert_int_equal(json_array_size(json_object_get(cold, "wsrv_workers")), 2);
	assert_true(json_integer_value(json_object_get(json_array_get(json_object_get(cold, "wsrv_workers"), 1),
						       "copied_bytes")) > 0);
	json_decref(cold);
	assert_int_equal(cli_run("WSRV_BENCH", "frobnicate", NULL), 2);
	assert_string_equal(out, "");
	assert_non_null(strstr(err, "no benchmark 'frobnicate'"));
	assert_int_equal(server_start(&ts, "m", model, NULL), 0);
	assert_int_equal(cli_run("WSRV_CTL", "--socket", ts.sock, "tensors", "m", "--layer", "99", NULL), 1);
	assert_non_null(strstr(err, "has no layer 99"));
	assert_string_equal(out, "");
	assert_int_equal(cli_run("WSRV_CTL", "--socket", ts.sock, "tensors", "m", "--layer", "-1", NULL), 0);
	/* Issue 79 item 6: the columns wsrvctl(1) promises: segment, offset, checksum. */
	assert_non_null(strstr(out, "SEGMENT"));
	assert_non_null(strstr(out, "OFFSET"));
	assert_non_null(strstr(out, "XXH3"));
	/* Issue 79 item 10: dump -o - wrote a file named "-"; now standard
	 * output gets the same bytes as a file does. */
	{
		const char *q = "model.layers.0.self_attn.q_proj.weight";
		char dumped[4200];
		size_t a_len, b_len;
		uint8_t *a, *b;

		snprintf(dumped, sizeof(dumped), "%s", pjoin(F.dir[0], "dumped"));
		assert_int_equal(cli_run("WSRV_CTL", "--socket", ts.sock, "dump", "m", q, "-o", dumped, NULL), 0);
		assert_int_equal(cli_run("WSRV_CTL", "--socket", ts.sock, "dump", "m", q, "-o", "-", NULL), 0);
		assert_non_null(a = read_file(dumped, &a_len));
		assert_non_null(b = read_file(pjoin(F.dir[0], "out"), &b_len));
		assert_true(a_len > 0 && a_len == b_len && memcmp(a, b, a_len) == 0);
		assert_int_equal(access("-", F_OK), -1);
		free(a);
		free(b);
	}
	/* Issue 79 item 10: publish --from a missing folder named it twice. */
	assert_int_equal(cli_run("WSRV_CTL", "--socket", ts.sock, "publish", "m", "--from", "/nonexistent/wsrv-x", NULL),
			 1);
	{
		const char *first = strstr(err, "/nonexistent/wsrv-x");
		if (!first || strstr(first + 1, "/nonexistent/wsrv-x"))
			fail_msg("publish --from a missing folder: %s", err);
	}
	/* Issue 79 item 10: wsrv-worker without --model says it is needed. */
	assert_int_equal(cli_run("WSRV_WORKER", NULL), 2);
	assert_non_null(strstr(err, "--model NAME is required"));
	/* Issue 79 item 10: a second wsrvd on the same socket is refused, and
	 * the refusal says how to replace the running one. */
	snprintf(spec, sizeof(spec), "m=%s", model);
	assert_true(cli_run("WSRVD", "--socket", ts.sock, "--model", spec, NULL) != 0);
	if (!strstr(err, "not starting a second one") || !strstr(err, "--take-over"))
		fail_msg("a second wsrvd: %s", err);
	assert_int_equal(server_stop(&ts, SIGTERM), 0);
	rm_rf(ts.dir);
	snprintf(spec, sizeof(spec), "%s", pjoin(F.dir[0], "new"));
	rm_rf(spec);
}

/* wsrv-bench starts the wsrvd built beside it, not whatever $WSRVD or the
 * PATH has (it looked in the wrong place after the server moved, and a
 * fresh build had none there). */
static void bench_runs_the_wsrvd_beside_it(void **s)
{
	const char *model = pjoin(F.dir[0], "bench-model");
	const char *argv[] = { getenv("WSRV_BENCH"), "resolve", "--model", model, NULL };
	const char *env[] = { "WSRVD=/nonexistent/wsrvd", "PATH=/nonexistent", NULL };
	char o[4096], e[4096];

	assert_int_equal(cli_run("WSRV_MKMODEL", "--preset", "tiny", "--size", "1M", "--out", model, NULL), 0);
	snprintf(o, sizeof(o), "%s", pjoin(F.dir[0], "out"));
	snprintf(e, sizeof(e), "%s", pjoin(F.dir[0], "err"));
	assert_non_null(argv[0]);
	if (run_prog(argv, env, o, e, 0, 120) != 0) {
		cli_slurp(e, err, sizeof(err));
		fail_msg("wsrv-bench resolve: %s", err);
	}
	cli_slurp(o, out, sizeof(out));
	assert_non_null(strstr(out, "system calls made        0"));
}

static void cli_write_text(const char *path, const char *text)
{
	FILE *f = fopen(path, "we");

	assert_non_null(f);
	assert_int_equal(fputs(text, f) >= 0, 1);
	assert_int_equal(fclose(f), 0);
}

/* Issue 38 item 1: `wsrv-bench cold --from-pretrained` runs N Python
 * processes of transformers' from_pretrained(device_map="cuda"). Here a
 * stand-in torch (a CUDA device) and transformers (from_pretrained reads
 * every safetensors file of the folder) run the same plumbing that the GPU
 * machine runs for real: the JSON has a figure per process, with the bytes
 * the stand-in "device" got. Without them it says why it did not run.
 * Issue 49 item 12: where a real torch and transformers are installed (a
 * GPU machine's venv), they must not be what runs: the bench's Python is
 * a wrapper that starts python3 -S (no site directories), so only the
 * stand-ins on PYTHONPATH can be imported. */
static void cold_from_pretrained_stand_in(void **s)
{
	const char *model = pjoin(F.dir[0], "hf-model"), *fake = pjoin(F.dir[0], "fake-hf");
	char pp[600], py[720], o[4096], e[4096], path[700];
	const char *argv[] = { getenv("WSRV_BENCH"), "cold", "--model", model, "--workers", "2", "--repeat", "1",
			       "--from-pretrained", "--json", NULL };
	const char *env[] = { pp, py, "PYTHONNOUSERSITE=1", NULL };
	json_t *j, *hf;

	(void)s;
	assert_int_equal(cli_run("WSRV_MKMODEL", "--preset", "tiny", "--size", "1M", "--out", model, NULL), 0);
	assert_int_equal(mkdir(fake, 0700), 0);
	snprintf(path, sizeof(path), "%s/torch.py", fake);
	cli_write_text(path, "class cuda:\n    allocated = 0\n    is_available = staticmethod(lambda: True)\n"
		   "    synchronize = staticmethod(lambda: None)\n"
		   "    memory_allocated = staticmethod(lambda: cuda.allocated)\n");
	snprintf(path, sizeof(path), "%s/transformers.py", fake);
	cli_write_text(path, "import os, torch\nclass AutoModelForCausalLM:\n    @staticmethod\n"
		   "    def from_pretrained(d, device_map=None, torch_dtype=None):\n"
		   "        assert device_map == 'cuda'\n"
		   "        for f in sorted(os.listdir(d)):\n"
		   "            if f.endswith('.safetensors'):\n"
		   "                torch.cuda.allocated += len(open(os.path.join(d, f), 'rb').read())\n"
		   "        return object()\n");
	snprintf(path, sizeof(path), "%s/python", fake);
	cli_write_text(path, "#!/bin/sh\nexec python3 -S \"$@\"\n");
	assert_int_equal(chmod(path, 0755), 0);
	snprintf(py, sizeof(py), "PYTHON=%s", path);
	snprintf(pp, sizeof(pp), "PYTHONPATH=%s", fake);
	snprintf(o, sizeof(o), "%s", pjoin(F.dir[0], "out"));
	snprintf(e, sizeof(e), "%s", pjoin(F.dir[0], "err"));
	int rc = run_prog(argv, env, o, e, 0, 120);
	if (rc != 0) {
		cli_slurp(e, out, sizeof(out));
		fail_msg("wsrv-bench cold --from-pretrained: exit %d: %s", rc, out);
	}
	cli_slurp(o, out, sizeof(out));
	assert_non_null(j = json_loads(out, 0, NULL));
	assert_non_null(hf = json_object_get(j, "from_pretrained"));
	assert_true(json_real_value(json_object_get(hf, "all_ready_s")) > 0);
	assert_int_equal(json_array_size(json_object_get(hf, "workers")), 2);
	/* The stand-in's device got every byte of the file (one, for tiny). */
	json_int_t dev = json_integer_value(json_object_get(json_array_get(json_object_get(hf, "workers"), 1),
							    "device_bytes"));
	struct stat st;
	snprintf(path, sizeof(path), "%s/model.safetensors", model);
	assert_int_equal(stat(path, &st), 0);
	assert_int_equal(dev, st.st_size);
	json_decref(j);
	/* Without transformers: the rest runs, and the JSON says why not. */
	snprintf(path, sizeof(path), "%s/transformers.py", fake);
	assert_int_equal(unlink(path), 0);
	assert_int_equal(run_prog(argv, env, o, e, 0, 120), 0);
	cli_slurp(o, out, sizeof(out));
	assert_non_null(j = json_loads(out, 0, NULL));
	assert_non_null(strstr(json_string_value(json_object_get(json_object_get(j, "from_pretrained"), "skipped")),
			       "transformers"));
	assert_true(json_real_value(json_object_get(j, "wsrv_all_ready_s")) > 0);
	json_decref(j);
	snprintf(path, sizeof(path), "%s/torch.py", fake);
	unlink(path);
	snprintf(path, sizeof(path), "%s/python", fake);
	unlink(path);
	rm_rf(fake); /* and its __pycache__ */
	rm_rf(model);
}

/* Issue 12: `wsrv-bench SUB --help` and `wsrv-worker --help` said
 * "unrecognized option"; `wsrv-bench attach --model DIR` made the folder for
 * generated models it did not use. */
/* Issue 79 item 6: a root wsrvd whose socket is directly under /run
 * (the default /run/wsrv/wsrv.sock) made the folder and left it behind
 * when it stopped. It goes, when nothing else is in it. */
static void run_folder_goes_with_the_server(void **s)
{
	struct test_server ts = { .no_wait = true }; /* it answers on sock, not its own */
	struct wsrv_client *c = NULL;
	char dir[64], sock[96], spec[4200];
	struct stat st;

	if (geteuid() != 0)
		skip(); /* /run is root's */
	snprintf(dir, sizeof(dir), "/run/wsrv-test-%d", (int)getpid());
	snprintf(sock, sizeof(sock), "%s/wsrv.sock", dir);
	snprintf(spec, sizeof(spec), "%s", pjoin(F.dir[0], "run-model"));
	assert_int_equal(cli_run("WSRV_MKMODEL", "--preset", "tiny", "--size", "1M", "--out", spec, NULL), 0);
	rmdir(dir);
	assert_int_equal(server_start(&ts, "m", spec, "--socket", sock, NULL), 0);
	for (int i = 0; i < 1200 && wsrv_connect(sock, NULL, &c) < 0; i++)
		sleep_ms(50);
	assert_non_null(c);
	wsrv_disconnect(c);
	assert_int_equal(stat(dir, &st), 0);
	assert_int_equal(server_stop(&ts, SIGTERM), 0);
	assert_int_equal(stat(dir, &st), -1);
	rm_rf(ts.dir);
}

static void help_and_no_stray_folder(void **s)
{
	char model[4096], workdir[4096], spec[4200];
	struct stat st;

	/* Copied: pjoin's buffers go round, and run() takes two each time
	 * (this pointed at the err file by the mkmodel call). */
	snprintf(model, sizeof(model), "%s", pjoin(F.dir[0], "attach-model"));
	assert_int_equal(cli_run("WSRV_BENCH", "load", "--help", NULL), 0);
	assert_non_null(strstr(out, "usage: wsrv-bench load --model DIR"));
	assert_int_equal(cli_run("WSRV_BENCH", "pipeline", "-h", NULL), 0);
	assert_non_null(strstr(out, "usage: wsrv-bench pipeline"));
	assert_int_equal(cli_run("WSRV_WORKER", "--help", NULL), 0);
	assert_non_null(strstr(out, "usage: wsrv-worker"));
	if (cli_run("WSRV_MKMODEL", "--preset", "tiny", "--size", "1M", "--out", model, NULL) != 0)
		fail_msg("wsrv-mkmodel: %s", err);
	snprintf(workdir, sizeof(workdir), "%s", pjoin(F.dir[0], "unused-workdir"));
	snprintf(spec, sizeof(spec), "%s", model);
	assert_int_equal(cli_run("WSRV_BENCH", "attach", "--model", spec, "--workdir", workdir, NULL), 0);
	assert_int_equal(stat(workdir, &st), -1);
	/* Issue 12: the figures the load and serve benchmarks must report. */
	assert_int_equal(cli_run("WSRV_BENCH", "serve", "--model", spec, "--workers", "2", "--repeat", "1",
			     "--json", NULL), 0);
	for (const char *const *k = (const char *const[]){ "\"serve_s\"", "\"mmap_peer_s\"",
							  "\"odirect_s\"", "\"buffered_s\"", NULL }; *k; k++)
		assert_non_null(strstr(out, *k));
	assert_int_equal(cli_run("WSRV_BENCH", "load", "--model", spec, "--repeat", "1", "--contend",
			     "--json", NULL), 0);
	assert_non_null(strstr(out, "\"cpu_s_per_gb\""));
	assert_non_null(strstr(out, "\"contend\": true"));
}

FIXTURE_MAIN(F,
	cmocka_unit_test(small_things_seen),
	cmocka_unit_test(readme_c_example_runs),
	cmocka_unit_test(run_folder_goes_with_the_server),
	cmocka_unit_test(every_option_checked_first),
	cmocka_unit_test(inspect),
	cmocka_unit_test(inspect_lays_out_as_wsrvd),
	cmocka_unit_test(wsrvd_load_only),
	cmocka_unit_test(bad_arguments),
	cmocka_unit_test(bench_runs_the_wsrvd_beside_it),
	cmocka_unit_test(cold_from_pretrained_stand_in),
	cmocka_unit_test(help_and_no_stray_folder),
)
