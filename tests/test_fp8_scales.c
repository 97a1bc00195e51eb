// SPDX-License-Identifier: MIT
/* test_fp8_scales.c - models the server accepts but whose FP8 scales do
 * not fit their weights: the example worker and the tensor-parallel views
 * refuse them with a sentence (they used to read past the scale, or crash
 * on a 1-D one); the block size comes from config.json
 * (quantization_config.weight_block_size), 128x128 when it says nothing;
 * an empty tensor of shape [2^63-1, 0] costs the worker nothing (it used to
 * spin through 2^63 rows). */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "forward.h"
#include "fixture.h"
#include "wsrv.h"

static struct fixture F = { .tag = "fp8" };

#define ROWS 256
#define COLS 256
#define W "model.layers.0.mlp.down_proj.weight"

/* A one-layer model: an FP8 [256, 256] weight of 1.0 with an F32 scale of
 * scale_shape (JSON) whose entries are 1.0, and the config given (NULL:
 * none). Returns its directory (caller frees and removes). */
static char *fp8_model(const char *scale_shape, size_t scale_elems, const char *config)
{
	char *dir = test_tmpdir("fp8");
	size_t wbytes = ROWS * COLS, sbytes = 4 * scale_elems;
	uint8_t *data = malloc(wbytes + sbytes);
	const float one = 1.0f;
	const char *h;

	assert_non_null(dir);
	assert_non_null(data);
	memset(data, 0x38, wbytes); /* 1.0 in E4M3 */
	for (size_t i = 0; i < scale_elems; i++)
		memcpy(data + wbytes + 4 * i, &one, 4);
	h = hdr("{\"" W "\": {\"dtype\": \"F8_E4M3\", \"shape\": [%d, %d], \"data_offsets\": [0, %zu]},"
		" \"" W "_scale_inv\": {\"dtype\": \"F32\", \"shape\": %s, \"data_offsets\": [%zu, %zu]}}",
		ROWS, COLS, wbytes, scale_shape, wbytes, wbytes + sbytes);
	assert_int_equal(st_write(pjoin(dir, "model.safetensors"), h, wbytes + sbytes, data), 0);
	free(data);
	if (config) {
		FILE *f = fopen(pjoin(dir, "config.json"), "we");
		assert_non_null(f);
		fputs(config, f);
		fclose(f);
	}
	return dir;
}

/* Serves dir, attaches and runs the worker's pass over the mapping and
 * through a stream, and a rowwise TP stream of world 2; *fwd gets the
 * pass's result, *tp the TP stream's open. */
static void try_model(const char *dir, int *fwd, int *tp)
{
	static const char plan[] = "{\"tp_plan\": {\"layers.*.mlp.down_proj\": \"rowwise\"}}";
	struct wsrv_stream_opts o = { .struct_size = sizeof(o), .rank = 1, .world = 2 };
	struct test_server ts = { 0 };
	struct wsrv_stream *s = NULL;
	struct wsrv_device *d;
	struct wsrv_client *c;
	struct wsrv_plan *p;
	struct wsrv_model *m;
	uint64_t digest;

	assert_int_equal(server_start(&ts, "m", dir, NULL), 0);
	assert_int_equal(wsrv_connect(ts.sock, NULL, &c), 0);
	assert_int_equal(wsrv_attach(c, "m", &m), 0);
	*fwd = forward_pass(m, NULL, 1, &digest);
	assert_int_equal(wsrv_plan_parse(plan, strlen(plan), &p), 0);
	assert_int_equal(wsrv_device_host(NULL, &d), 0);
	*tp = wsrv_stream_open(m, d, p, &o, &s);
	wsrv_stream_close(s);
	wsrv_device_destroy(d);
	wsrv_plan_free(p);
	wsrv_detach(m);
	wsrv_disconnect(c);
	server_done(&ts);
}

static void check(const char *shape, size_t elems, const char *config, int want)
{
	char *dir = fp8_model(shape, elems, config);
	int fwd, tp;

	try_model(dir, &fwd, &tp);
	if (fwd != want)
		fail_msg("scale %s, config %s: the pass returned %d (%s), not %d", shape,
			 config ? config : "none", fwd, forward_error(), want);
	if (tp != want)
		fail_msg("scale %s, config %s: the TP stream returned %d (%s), not %d", shape,
			 config ? config : "none", tp, wsrv_last_error(), want);
	if (want < 0)
		assert_non_null(strstr(forward_error(), "block scale"));
	rm_rf(dir);
	free(dir);
}

static void scales_that_fit(void **st)
{
	check("[2, 2]", 4, NULL, 0);
	check("[2, 2]", 4, "{\"quantization_config\": {\"weight_block_size\": [128, 128]}}", 0);
	check("[4, 4]", 16, "{\"quantization_config\": {\"weight_block_size\": [64, 64]}}", 0);
	check("[2, 4]", 8, "{\"quantization_config\": {\"weight_block_size\": [128, 64]}}", 0);
}

static void scales_that_do_not_fit(void **st)
{
	check("[4]", 4, NULL, -EINVAL);        /* one-dimensional: used to crash */
	check("[1, 1]", 1, NULL, -EINVAL);     /* too small: read past it */
	check("[2, 2]", 4, "{\"quantization_config\": {\"weight_block_size\": [64, 64]}}", -EINVAL);
	check("[4, 4]", 16, NULL, -EINVAL);    /* 64x64 blocks, but the config says 128 */
}

static void malformed_block_size(void **st)
{
	char *dir = fp8_model("[2, 2]", 4, "{\"quantization_config\": {\"weight_block_size\": [0, 128]}}");
	int fwd, tp;

	try_model(dir, &fwd, &tp);
	assert_int_equal(fwd, -EINVAL);
	assert_int_equal(tp, -EINVAL);
	assert_non_null(strstr(wsrv_last_error(), "weight_block_size"));
	rm_rf(dir);
	free(dir);
}

static void empty_tensor_costs_nothing(void **st)
{
	char *dir = test_tmpdir("fp8-empty");
	const char *h = hdr("{\"model.layers.0.mlp.up_proj.weight\": {\"dtype\": \"BF16\","
			    " \"shape\": [9223372036854775807, 0], \"data_offsets\": [0, 0]}}");
	struct test_server ts = { 0 };
	struct wsrv_client *c;
	struct wsrv_model *m;
	uint64_t digest;

	assert_int_equal(st_write(pjoin(dir, "model.safetensors"), h, 0, NULL), 0);
	assert_int_equal(server_start(&ts, "m", dir, NULL), 0);
	assert_int_equal(wsrv_connect(ts.sock, NULL, &c), 0);
	assert_int_equal(wsrv_attach(c, "m", &m), 0);
	assert_int_equal(forward_pass(m, NULL, 3, &digest), 0); /* returns: no 2^63 rows */
	wsrv_detach(m);
	wsrv_disconnect(c);
	server_done(&ts);
	rm_rf(dir);
	free(dir);
}

FIXTURE_MAIN(F,
	cmocka_unit_test(scales_that_fit),
	cmocka_unit_test(scales_that_do_not_fit),
	cmocka_unit_test(malformed_block_size),
	cmocka_unit_test(empty_tensor_costs_nothing),
)
