// SPDX-License-Identifier: MIT
/* test_partial.c - partial loads: wsrvd --plan P --ranks A-B --world W
 * holds only what those ranks see, reads only that from the files, serves
 * every held rank byte for byte what the whole model serves it, and
 * refuses the ranks it does not hold, naming those it does. */
#include <errno.h>
#include <jansson.h>
#include <setjmp.h>
#include <stdbool.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
#include <cmocka.h>

#include "helpers.h"
#include "wsrv.h"

static const char DS_PLAN[] =
	"{\"tp_plan\": {\"layers.*.self_attn.q_b_proj\": \"colwise\", \"layers.*.self_attn.o_proj\": \"rowwise\","
	" \"layers.*.mlp.experts.*.*\": \"experts\", \"lm_head\": \"colwise\"}}";
static const char LLAMA_PLAN[] =
	"{\"stages\": 2, \"tp_plan\": {\"layers.*.self_attn.q_proj\": \"colwise\","
	" \"layers.*.self_attn.k_proj\": \"kv_heads\", \"layers.*.self_attn.v_proj\": \"kv_heads\","
	" \"layers.*.self_attn.o_proj\": \"rowwise\", \"layers.*.mlp.gate_proj\": \"colwise\","
	" \"layers.*.mlp.up_proj\": \"colwise\", \"layers.*.mlp.down_proj\": \"rowwise\","
	" \"lm_head\": \"colwise\"}}";

static struct {
	struct two_models full;     /* both models whole: the reference */
	char *dir;                  /* plans and logs */
	char ds_plan[300], llama_plan[300];
	int fds;
} T;

static int partial_write_text(const char *path, const char *text)
{
	FILE *f = fopen(path, "we");

	if (!f)
		return -errno;
	fputs(text, f);
	return fclose(f) == 0 ? 0 : -EIO;
}

static int partial_setup(void **st)
{
	(void)st;
	signal(SIGPIPE, SIG_IGN);
	T.fds = count_fds();
	if (two_models_start(&T.full, "partial", 4) < 0 || !(T.dir = test_tmpdir("partial")))
		return -1;
	snprintf(T.ds_plan, sizeof(T.ds_plan), "%s/ds.json", T.dir);
	snprintf(T.llama_plan, sizeof(T.llama_plan), "%s/llama.json", T.dir);
	if (partial_write_text(T.ds_plan, DS_PLAN) < 0 || partial_write_text(T.llama_plan, LLAMA_PLAN) < 0)
		return -1;
	return 0;
}

static int case_open(void)
{
	return two_models_open(&T.full);
}

static int case_close(void)
{
	return two_models_close(&T.full);
}

static int partial_teardown(void **st)
{
	(void)st;
	two_models_stop(&T.full);
	rm_rf(T.dir);
	free(T.dir);
	return fd_leak_check(T.fds);
}

/* A partial server of one model (name=dir) holding ranks of world. */
static void partial_start(struct test_server *ts, const char *name, const char *dir,
			  const char *plan, const char *ranks, const char *world)
{
	memset(ts, 0, sizeof(*ts));
	if (server_start(ts, name, dir, "--plan", plan, "--ranks", ranks, "--world", world, NULL) < 0) {
		char cmd[400];
		snprintf(cmd, sizeof(cmd), "cat %s >&2", ts->log);
		(void)!system(cmd);
		fail_msg("the partial server did not start");
	}
}

static struct wsrv_stream *open_rank(struct wsrv_model *m, struct wsrv_device *d, const char *json,
				     int rank, int world, int *err)
{
	struct wsrv_stream_opts o = { .struct_size = sizeof(o), .slots = 2, .rank = rank, .world = world };
	struct wsrv_plan *p;
	struct wsrv_stream *s = NULL;

	assert_int_equal(wsrv_plan_parse(json, strlen(json), &p), 0);
	*err = wsrv_stream_open(m, d, p, &o, &s);
	wsrv_plan_free(p);
	return *err == 0 ? s : NULL;
}

/* Rank r of w: every tensor it sees, on the device, is the same bytes from
 * the partial server (pm) as from the whole model (fm). */
static void same_views(struct wsrv_model *pm, struct wsrv_model *fm, const char *json, int r, int w)
{
	int e1, e2;
	struct wsrv_stream *ps = open_rank(pm, T.full.dev, json, r, w, &e1);
	struct wsrv_stream *fs = open_rank(fm, T.full.dev, json, r, w, &e2);
	size_t present = 0;

	if (!ps || !fs)
		fail_msg("rank %d of %d: %s", r, w, wsrv_last_error());
	for (size_t li = 0; li < wsrv_model_layer_count(fm); li++) {
		struct wsrv_layer l;
		wsrv_model_layer_at(fm, li, &l);
		assert_int_equal(wsrv_stream_acquire(ps, l.index), 0);
		assert_int_equal(wsrv_stream_acquire(fs, l.index), 0);
		for (uint32_t i = l.first; i < l.first + l.count; i++) {
			struct wsrv_view pv, fv;
			void *pd, *fd;
			assert_int_equal(wsrv_stream_view(ps, i, &pv), 0);
			assert_int_equal(wsrv_stream_view(fs, i, &fv), 0);
			assert_int_equal(pv.present, fv.present);
			if (!fv.present)
				continue;
			present++;
			assert_int_equal(pv.bytes, fv.bytes);
			assert_int_equal(wsrv_stream_tensor_at(ps, i, &pd), 0);
			assert_int_equal(wsrv_stream_tensor_at(fs, i, &fd), 0);
			if (memcmp(pd, fd, fv.bytes) != 0) {
				struct wsrv_tensor t;
				wsrv_model_tensor(fm, i, &t);
				fail_msg("rank %d of %d: %s differs from the whole model's view", r, w, t.name);
			}
		}
		assert_int_equal(wsrv_stream_release(ps, l.index), 0);
		assert_int_equal(wsrv_stream_release(fs, l.index), 0);
	}
	assert_true(present > 0);
	wsrv_stream_close(ps);
	wsrv_stream_close(fs);
}

struct held {
	uint64_t bytes, total, disk;
	uint32_t first, last, world, stages;
	bool adopted;
};

static void held_of(struct test_server *ts, const char *name, struct held *h)
{
	struct wsrv_client *c;
	struct wsrv_model *m;
	struct wsrv_held wh;
	struct wsrv_stats *s;
	struct wsrv_model_stats ms;
	uint64_t total = 0;

	assert_int_equal(wsrv_connect(ts->sock, NULL, &c), 0);
	assert_int_equal(wsrv_attach(c, name, &m), 0);
	assert_int_equal(wsrv_model_held(m, &wh), 0);
	for (size_t i = 0; i < wsrv_model_tensor_count(m); i++) {
		struct wsrv_tensor t;
		wsrv_model_tensor(m, i, &t);
		total += t.size;
	}
	assert_int_equal(wsrv_stats(c, &s), 0);
	assert_int_equal(wsrv_stats_model(s, 0, &ms), 0);
	*h = (struct held){ wh.bytes, total, ms.disk_bytes, wh.first, wh.last, wh.world, wh.stages, ms.adopted };
	wsrv_stats_free(s);
	wsrv_detach(m);
	wsrv_disconnect(c);
}

/* A partial server, a client attached to its model (pm), and the whole
 * model's attachment (fm) to compare with. */
struct pair {
	struct test_server ts;
	struct wsrv_client *c;
	struct wsrv_model *pm, *fm;
	struct held h;
};

static void pair_open(struct pair *p, const char *name, const char *dir, const char *plan,
		      const char *ranks, const char *world)
{
	partial_start(&p->ts, name, dir, plan, ranks, world);
	held_of(&p->ts, name, &p->h);
	assert_true(p->h.bytes < p->h.total);
	assert_int_equal(wsrv_connect(p->ts.sock, NULL, &p->c), 0);
	assert_int_equal(wsrv_attach(p->c, name, &p->pm), 0);
	assert_int_equal(wsrv_attach(T.full.cl, name, &p->fm), 0);
}

static void pair_close(struct pair *p)
{
	wsrv_detach(p->fm);
	wsrv_detach(p->pm);
	wsrv_disconnect(p->c);
	assert_int_equal(server_stop(&p->ts, SIGTERM), 0);
	rm_rf(p->ts.dir);
}

/* DeepSeek-style: experts and column splits, ranks 1-2 of 4. */
static void ds_ranks_match_whole(void **st)
{
	struct pair p;
	int err;

	(void)st;
	pair_open(&p, "ds", T.full.dir_ds, T.ds_plan, "1-2", "4");
	assert_int_equal(p.h.first, 1);
	assert_int_equal(p.h.last, 2);
	assert_int_equal(p.h.world, 4);
	assert_int_equal(p.h.disk, p.h.bytes); /* read from the files: the held parts only */
	/* The server's model list says it too (wsrvctl models). */
	struct wsrv_model_list *l;
	struct wsrv_model_info mi;
	assert_int_equal(wsrv_list_models(p.c, &l), 0);
	assert_int_equal(wsrv_model_list_at(l, 0, &mi), 0);
	assert_int_equal(mi.held_world, 4);
	assert_int_equal(mi.held_first, 1);
	assert_int_equal(mi.held_last, 2);
	assert_int_equal(mi.held_bytes, p.h.bytes);
	wsrv_model_list_free(l);
	/* wsrvctl verify checks the held parts (every byte that was loaded). */
	char out[300];
	const char *verify[] = { getenv("WSRV_CTL"), "--socket", p.ts.sock, "verify", "ds", NULL };
	snprintf(out, sizeof(out), "%s/verify.log", T.dir);
	assert_int_equal(run_prog(verify, NULL, out, out, 0, 30), 0);
	/* A whole tensor it holds part of is not dumped as if whole. */
	char dump_to[300];
	snprintf(dump_to, sizeof(dump_to), "%s/dump.bin", T.dir);
	const char *dump[] = { getenv("WSRV_CTL"), "--socket", p.ts.sock, "dump", "ds", "lm_head.weight", "-o",
			       dump_to, NULL };
	assert_int_equal(run_prog(dump, NULL, out, out, 0, 30), 1);
	same_views(p.pm, p.fm, DS_PLAN, 1, 4);
	same_views(p.pm, p.fm, DS_PLAN, 2, 4);
	/* Rank 0 and rank 3 are not held: refused, naming what is. */
	for (int r = 0; r < 4; r += 3) {
		assert_null(open_rank(p.pm, T.full.dev, DS_PLAN, r, 4, &err));
		assert_int_equal(err, -ERANGE);
		if (!strstr(wsrv_last_error(), "loaded ranks 1-2 of 4"))
			fail_msg("rank %d: %s", r, wsrv_last_error());
	}
	/* The same ranks under another world are not held either. */
	assert_null(open_rank(p.pm, T.full.dev, DS_PLAN, 0, 2, &err));
	assert_int_equal(err, -ERANGE);
	pair_close(&p);
}

/* Pipeline stages: world 4 in 2 stages of 2; ranks 2-3 are stage 1, which
 * holds the second half of the layers, and the global group. */
static void llama_stage_matches_whole(void **st)
{
	struct pair p;
	int err;

	(void)st;
	pair_open(&p, "llama", T.full.dir_llama, T.llama_plan, "2-3", "4");
	assert_int_equal(p.h.stages, 2);
	for (size_t i = 0; i < wsrv_model_tensor_count(p.pm); i++) {
		struct wsrv_tensor t;
		wsrv_model_tensor(p.pm, i, &t);
		if (t.layer >= 0 && t.layer < 2 && t.size)
			assert_int_equal(t.held_size, 0); /* stage 0's layers: none of them */
		else if (t.layer >= 2)
			assert_true(t.held_size > 0);
	}
	same_views(p.pm, p.fm, LLAMA_PLAN, 2, 4);
	same_views(p.pm, p.fm, LLAMA_PLAN, 3, 4);
	assert_null(open_rank(p.pm, T.full.dev, LLAMA_PLAN, 1, 4, &err));
	assert_int_equal(err, -ERANGE);
	pair_close(&p);
}


/* Taken over (--take-over) with other ranks, the successor must not adopt
 * the memfds that hold the old ranks: it loads its own; with the same
 * ranks, it adopts them. */
static void takeover_with_other_ranks(void **st)
{
	struct test_server a, b, c;
	struct wsrv_client *cl;
	struct wsrv_model *pm, *fm;
	struct held h;

	(void)st;
	partial_start(&a, "ds", T.full.dir_ds, T.ds_plan, "1-2", "4");
	b = a;
	assert_int_equal(server_restart_args(&b, "ds", T.full.dir_ds, "--take-over", "--plan", T.ds_plan,
					     "--ranks", "0", "--world", "4", NULL), 0);
	assert_int_equal(child_status(a.pid), 0);
	held_of(&b, "ds", &h);
	assert_false(h.adopted);
	assert_int_equal(h.first, 0);
	assert_int_equal(h.last, 0);
	assert_int_equal(wsrv_connect(b.sock, NULL, &cl), 0);
	assert_int_equal(wsrv_attach(cl, "ds", &pm), 0);
	assert_int_equal(wsrv_attach(T.full.cl, "ds", &fm), 0);
	same_views(pm, fm, DS_PLAN, 0, 4);
	wsrv_detach(fm);
	wsrv_detach(pm);
	wsrv_disconnect(cl);
	c = b;
	assert_int_equal(server_restart_args(&c, "ds", T.full.dir_ds, "--take-over", "--plan", T.ds_plan,
					     "--ranks", "0", "--world", "4", NULL), 0);
	assert_int_equal(child_status(b.pid), 0);
	held_of(&c, "ds", &h);
	assert_true(h.adopted);
	assert_int_equal(h.last, 0);
	assert_int_equal(server_stop(&c, SIGTERM), 0);
	rm_rf(a.dir);
}

/* wsrvctl inspect gives the bytes a host would load, as the server does. */
static void inspect_reports_held_bytes(void **st)
{
	const char *ctl = getenv("WSRV_CTL");
	char out[300], err[300];
	const char *argv[] = { ctl, "inspect", "--json", T.full.dir_ds, "--plan", T.ds_plan,
			       "--ranks", "1-2", "--world", "4", NULL };
	struct test_server ts;
	struct held h;
	json_error_t je;
	json_t *j;

	(void)st;
	snprintf(out, sizeof(out), "%s/inspect.json", T.dir);
	snprintf(err, sizeof(err), "%s/inspect.err", T.dir);
	assert_int_equal(run_prog(argv, NULL, out, err, 0, 30), 0);
	j = json_load_file(out, 0, &je);
	assert_non_null(j);
	partial_start(&ts, "ds", T.full.dir_ds, T.ds_plan, "1-2", "4");
	held_of(&ts, "ds", &h);
	assert_int_equal(json_integer_value(json_object_get(json_object_get(j, "held"), "bytes")), h.bytes);
	assert_int_equal(json_integer_value(json_object_get(j, "tensor_bytes")), h.total);
	json_decref(j);
	server_done(&ts);
}

/* Options that make no sense are refused before anything is loaded. */
static void options_refused(void **st)
{
	char spec[300], out[300], bad[300];
	const char *const cases[][8] = {
		{ "--ranks", "1-2", NULL },                                   /* no world */
		{ "--world", "4", NULL },                                     /* no ranks */
		{ "--plan", T.ds_plan, NULL },                                /* no ranks */
		{ "--ranks", "2-1", "--world", "4", NULL },
		{ "--ranks", "4", "--world", "4", NULL },
		{ "--ranks", "x", "--world", "4", NULL },
		{ "--ranks", "0", "--world", "0", NULL },
		{ "--ranks", "0", "--world", "2", "--plan", bad, NULL },      /* no such file */
	};

	(void)st;
	snprintf(spec, sizeof(spec), "ds=%s", T.full.dir_ds);
	snprintf(out, sizeof(out), "%s/opts.log", T.dir);
	snprintf(bad, sizeof(bad), "%s/none.json", T.dir);
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
		if (wsrvd_options_run(spec, cases[i], out) != 2)
			fail_msg("case %zu was not refused with exit 2", i);
}

/* A plan the model cannot follow fails the load with the reason. */
static void bad_plan_fails_load(void **st)
{
	const char *wsrvd = getenv("WSRVD");
	char spec[300], out[300], plan[300];
	const char *argv[] = { wsrvd, "--load-only", "--model", spec, "--plan", plan, "--ranks", "0",
			       "--world", "7", NULL };
	size_t len;
	uint8_t *log;

	(void)st;
	snprintf(spec, sizeof(spec), "ds=%s", T.full.dir_ds);
	snprintf(out, sizeof(out), "%s/bad.log", T.dir);
	snprintf(plan, sizeof(plan), "%s/bad.json", T.dir);
	assert_int_equal(partial_write_text(plan, "{\"tp_plan\": {\"lm_head\": \"colwise\"}}"), 0);
	assert_int_equal(run_prog(argv, NULL, out, out, 0, 20), 1);
	log = read_file(out, &len);
	assert_non_null(log);
	if (!strstr((char *)log, "does not divide by world 7"))
		fail_msg("%s", log);
	free(log);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(ds_ranks_match_whole),
		cmocka_unit_test(llama_stage_matches_whole),
		cmocka_unit_test(takeover_with_other_ranks),
		cmocka_unit_test(inspect_reports_held_bytes),
		cmocka_unit_test(options_refused),
		cmocka_unit_test(bad_plan_fails_load),
	};

	return test_group_main(&(struct test_group){ "partial", tests, sizeof(tests) / sizeof(tests[0]),
						      partial_setup, partial_teardown, case_open, case_close, false });
}
