// SPDX-License-Identifier: MIT
/* test_worker.c - the example worker's forward pass through a stream is
 * bit-identical to the same pass over the direct mapping, for several plans
 * (all resident, all streamed, layer_shard K = 2 and 3 on every rank, a
 * budget), on a BF16 Llama-shaped model and an FP8 DeepSeek-V3-shaped one
 * (block scales). */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "forward.h"
#include "fixture.h"
#include "wsrv.h"

/* The two models' server (two_models); each case a client and a host
 * device. */
static struct fixture F = { .tag = "worker", .two_models = 3 };

static const struct { const char *json; unsigned k; } plans[] = {
	{ "{\"budget\": \"1T\"}", 1 },                                             /* all resident */
	{ "{\"residency\": {\"embed_tokens\": \"streamed\", \"norm\": \"streamed\", \"lm_head\": \"streamed\"}}", 1 },
	{ "{\"residency\": {\"layers.*.self_attn.o_proj\": \"layer_shard:2\", \"layers.*.mlp.down_proj\": \"layer_shard:2\"}}", 2 },
	{ "{\"residency\": {\"layers.*.self_attn.q_b_proj\": \"layer_shard:3\", \"layers.*.mlp.up_proj\": \"layer_shard:3\"}}", 3 },
	{ NULL, 1 },  /* a budget: made per model below */
};

static void exact(const char *model)
{
	struct wsrv_model *m;
	uint64_t direct, streamed;

	uint64_t total = 0;
	char budget[64];

	assert_int_equal(wsrv_attach(F.two.cl, model, &m), 0);
	assert_int_equal(forward_pass(m, NULL, 2, &direct), 0);
	for (size_t i = 0; i < wsrv_model_tensor_count(m); i++) {
		struct wsrv_tensor t;
		wsrv_model_tensor(m, i, &t);
		total += t.size;
	}
	/* A budget between "every layer streamed" (which fits) and "all
	 * resident": the library has to choose. Regression: on the llama
	 * model, whose embed_tokens and lm_head are its largest tensors, the
	 * budget search streamed them through D slots, needed more memory
	 * than keeping everything, and refused; on the DeepSeek one, refusing
	 * every series that did not pay alone left its experts resident. */
	struct wsrv_stream *probe;
	struct wsrv_stream_stats ps;
	assert_int_equal(wsrv_stream_open(m, NULL, NULL, NULL, &probe), 0);
	wsrv_stream_stats(probe, &ps);
	wsrv_stream_close(probe);
	snprintf(budget, sizeof(budget), "{\"budget\": %llu}", (unsigned long long)(ps.device_bytes + total) / 2);
	for (size_t i = 0; i < sizeof(plans) / sizeof(plans[0]); i++) {
		const char *json = plans[i].json ? plans[i].json : budget;
		struct wsrv_plan *p;
		assert_int_equal(wsrv_plan_parse(json, strlen(json), &p), 0);
		for (unsigned rank = 0; rank < plans[i].k; rank++) {
			struct wsrv_stream_opts o = { .struct_size = sizeof(o), .slots = 2 + rank % 2, .rank = (int)rank };
			struct wsrv_stream *s;
			if (wsrv_stream_open(m, F.two.dev, p, &o, &s) < 0)
				fail_msg("%s plan %zu: %s", model, i, wsrv_last_error());
			assert_int_equal(forward_pass(m, s, 2, &streamed), 0);
			if (streamed != direct)
				fail_msg("%s plan %zu rank %u: %016llx through the stream, %016llx direct", model, i,
					 rank, (unsigned long long)streamed, (unsigned long long)direct);
			wsrv_stream_close(s);
		}
		wsrv_plan_free(p);
	}
	wsrv_detach(m);
}

static void llama_bf16(void **st) { exact("llama"); }
static void deepseek_fp8(void **st) { exact("ds"); }

static void fp8_decoding(void **st)
{
	assert_true(fp8_e4m3(0x38) == 1.0f);        /* exp 7, man 0 */
	assert_true(fp8_e4m3(0xB8) == -1.0f);
	assert_true(fp8_e4m3(0x7E) == 448.0f);      /* the largest */
	assert_true(fp8_e4m3(0x01) == 0x1p-9f);     /* the smallest subnormal */
	assert_true(fp8_e4m3(0x7F) != fp8_e4m3(0x7F)); /* NaN */
}

/* Issue 48 item 15: wsrv-worker --check under --memory-budget said
 * "(DIFFERENT)" and exited 1 though its streamed digest was right: the
 * direct pass read the tiered layers as EAGAIN. Each such layer is now
 * mapped for the direct pass alone, and the two are bit-identical. */
static void check_under(const char *dir, const char *budget, const char *read)
{
	struct test_server ts = { 0 };
	struct wsrv_tier_info ti = { .struct_size = sizeof(ti) };
	struct wsrv_client *c;
	const char *worker = getenv("WSRV_WORKER");
	const char *out = pjoin(dir, "worker-budget.out");
	uint8_t *text;
	size_t len;

	assert_non_null(worker);
	/* The direct pass maps each MoE layer whole, all its experts, more
	 * than half the cache: one worker alone may hold all of it here
	 * (the share's floor is one piece, issue 60 item 1). */
	assert_int_equal(server_start(&ts, "m", dir, "--memory-budget", budget, "--read", read,
				      "--memory-budget-share", "100", NULL), 0);
	assert_int_equal(wsrv_connect(ts.sock, NULL, &c), 0);
	assert_int_equal(tier_counters(c, &ti), 0);
	assert_true(ti.disk_bytes > 0); /* some of it is on the disk tier */
	wsrv_disconnect(c);
	const char *argv[] = { worker, "--socket", ts.sock, "--model", "m", "--check", NULL };
	int rc = run_prog(argv, NULL, out, pjoin(dir, "worker-budget.err"), 0, 60);
	assert_non_null(text = read_file(out, &len));
	if (rc != 0 || !strstr((char *)text, "bit-identical"))
		fail_msg("wsrv-worker --check under --memory-budget %s: exit %d\n%s", budget, rc, (char *)text);
	free(text);
	server_done(&ts);
}

/* Whole layers on the tier (llama), and routed experts one by one (ds). */
static void check_under_a_budget(void **st)
{
	check_under(F.two.dir_llama, "3M", "auto");
	check_under(F.two.dir_ds, "20M", "auto");
}

/* Found with --read auto: the tier's reads served from the page cache
 * (as --read buffered does) made this check fail in 2-9 of 20 runs, the
 * server saying the budget was all held after a wait of 10 s. Two
 * causes. A tier reader waiting for room was not woken when the other
 * reader's read ended (its bytes no longer reading, its units cached and
 * nobody's), and at its deadline it looked again without evicting. And
 * the worker's stream, still open, held its slots' layers while the
 * direct pass needed another under a budget that holds one. Several runs:
 * the reads' timing decides, and fast reads are what showed it. */
static void check_reading_from_the_page_cache(void **st)
{
	for (int run = 0; run < 5; run++)
		check_under(F.two.dir_ds, "20M", "buffered");
}

/* Issue 49 item 15: quickstart's workers held their weights for a fixed
 * time (--hold 4), which ran out while the other worker was still
 * starting (torch imported cold), and the look at their mappings found
 * them gone. --hold signal holds until told: SIGUSR1 (sent before or
 * during the hold) ends it, and the worker exits 0. */
static void hold_until_told(void **st)
{
	struct test_server ts = { 0 };
	const char *worker = getenv("WSRV_WORKER");
	const char *out = pjoin(F.two.dir_llama, "hold.out");
	char *text = NULL;
	size_t len;
	int status;
	pid_t pid;

	(void)st;
	assert_int_equal(server_start(&ts, "m", F.two.dir_llama, NULL), 0);
	assert_true((pid = fork()) >= 0);
	if (pid == 0) {
		int fd = open(out, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
		if (fd < 0 || dup2(fd, 1) < 0)
			_exit(3);
		execl(worker, worker, "--socket", ts.sock, "--model", "m", "--hold", "signal", (char *)NULL);
		_exit(4);
	}
	/* Holding: it said its digest, and is still there a while after. */
	for (int i = 0; i < 600 && !(text && strstr(text, "digest")); i++) {
		free(text);
		usleep(50 * 1000);
		text = (char *)read_file(out, &len);
	}
	assert_non_null(text);
	assert_non_null(strstr(text, "digest"));
	free(text);
	usleep(300 * 1000);
	assert_int_equal(waitpid(pid, &status, WNOHANG), 0);
	assert_int_equal(kill(pid, SIGUSR1), 0);
	assert_int_equal(waitpid(pid, &status, 0), pid);
	assert_true(WIFEXITED(status));
	assert_int_equal(WEXITSTATUS(status), 0);
	const char *bad[] = { worker, "--socket", ts.sock, "--model", "m", "--hold", "soon", NULL };
	assert_int_equal(run_prog(bad, NULL, out, pjoin(F.two.dir_llama, "hold.err"), 0, 30), 2);
	server_done(&ts);
}

FIXTURE_MAIN(F,
	cmocka_unit_test(fp8_decoding),
	cmocka_unit_test(llama_bf16),
	cmocka_unit_test(deepseek_fp8),
	cmocka_unit_test(check_under_a_budget), cmocka_unit_test(check_reading_from_the_page_cache),
	cmocka_unit_test(hold_until_told),
)
