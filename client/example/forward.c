// SPDX-License-Identifier: MIT
/* forward.c - a forward pass over streamed or mapped weights.
 *
 * The activation is a vector of ACT floats. Each 2-D weight W [rows, cols]
 * of a layer multiplies the activation (read cyclically to length cols),
 * and y folds back into the activation (y[r] into act[r mod ACT], scaled),
 * followed by a normalisation so values stay finite. */
#include "forward.h"

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "ticker.h"

#define ACT 1024
#define LANES 8

float fp8_e4m3(uint8_t b)
{
	int sign = b >> 7, exp = (b >> 3) & 15, man = b & 7;
	float v;

	if ((b & 0x7f) == 0x7f)
		return NAN;
	v = exp ? ldexpf(1.0f + man / 8.0f, exp - 7) : ldexpf(man / 8.0f, -6);
	return sign ? -v : v;
}

static float bf16(const uint8_t *p)
{
	uint32_t u = (uint32_t)(p[0] | p[1] << 8) << 16;
	float f;

	memcpy(&f, &u, 4);
	return f;
}

static float f16(const uint8_t *p)
{
	uint16_t h = (uint16_t)(p[0] | p[1] << 8);
	int e = (h >> 10) & 31, m = h & 1023;
	float v = e ? ldexpf(1.0f + m / 1024.0f, e - 15) : ldexpf(m / 1024.0f, -14);

	return (h & 0x8000) ? -v : v;
}

static __thread char why[1024];

const char *forward_error(void)
{
	return why;
}

struct weight {
	struct wsrv_tensor t;
	const uint8_t *w;           /* the bytes to read: device or mapping */
	const uint8_t *scale;       /* F32 block scales (FP8), or NULL */
	uint64_t scale_cols;
	uint64_t blk[2];            /* rows and columns one scale covers */
};

/* FP8 E4M3 by table: a pass decodes billions of them. */
static float fp8_table[256];
static pthread_once_t fp8_once = PTHREAD_ONCE_INIT;

static void fp8_fill(void)
{
	for (int b = 0; b < 256; b++)
		fp8_table[b] = fp8_e4m3((uint8_t)b);
}

/* Row r of the weight as floats, each times its block scale: row[cols]. */
static void decode_row(const struct weight *wt, uint64_t r, uint64_t cols, float *row)
{
	const uint8_t *w = wt->w;

	switch (wt->t.dtype) {
	case WSRV_BF16: for (uint64_t c = 0; c < cols; c++) row[c] = bf16(w + 2 * (r * cols + c)); break;
	case WSRV_F16: for (uint64_t c = 0; c < cols; c++) row[c] = f16(w + 2 * (r * cols + c)); break;
	case WSRV_F32: memcpy(row, w + 4 * r * cols, cols * 4); break;
	case WSRV_F8_E4M3: for (uint64_t c = 0; c < cols; c++) row[c] = fp8_table[w[r * cols + c]]; break;
	default: memset(row, 0, cols * 4); break;
	}
	if (!wt->scale)
		return;
	const uint8_t *srow = wt->scale + 4 * (r / wt->blk[0]) * wt->scale_cols;
	for (uint64_t c0 = 0, k = 0; c0 < cols; c0 += wt->blk[1], k++) {
		uint64_t end = c0 + wt->blk[1] < cols ? c0 + wt->blk[1] : cols;
		float sc;
		memcpy(&sc, srow + 4 * k, 4);
		for (uint64_t c = c0; c < end; c++)
			row[c] *= sc;
	}
}

/* row . act, act read cyclically to cols: LANES sums, each over the
 * columns of its residue (ACT is a multiple of LANES, so a group of LANES
 * never wraps), added in a fixed order at the end. */
static float dot(const float *row, uint64_t cols, const float *act)
{
	float acc[LANES] = { 0 }, sum = 0;
	uint64_t c = 0, a = 0;

	for (; c + LANES <= cols; c += LANES) {
		for (int j = 0; j < LANES; j++)
			acc[j] += row[c + j] * act[a + j];
		a = a + LANES == ACT ? 0 : a + LANES;
	}
	for (; c < cols; c++, a++)
		acc[0] += row[c] * act[a];
	for (int j = 0; j < LANES; j++)
		sum += acc[j];
	return sum;
}

/* y = W x, folded into act, one row decoded at a time. -ENOMEM when a row's floats do not fit. */
static int matvec(const struct weight *wt, float *act)
{
	uint64_t rows = wt->t.shape[0], cols = wt->t.shape[1];
	float fold = 1.0f / (float)cols;
	float *row = malloc(cols * sizeof(float));

	if (!row)
		return -ENOMEM;
	pthread_once(&fp8_once, fp8_fill);
	for (uint64_t r = 0; r < rows; r++) {
		decode_row(wt, r, cols, row);
		act[r % ACT] += dot(row, cols, act) * fold;
	}
	free(row);
	float norm = 0;
	for (int i = 0; i < ACT; i++)
		norm += act[i] * act[i];
	norm = sqrtf(norm / ACT) + 1e-6f;
	for (int i = 0; i < ACT; i++)
		act[i] /= norm;
	return 0;
}

/* The bytes of tensor i: its device address through the stream, else the
 * shared mapping. */
static const uint8_t *bytes_of(struct wsrv_model *m, struct wsrv_stream *s, size_t i)
{
	struct wsrv_tensor t;
	void *d;

	wsrv_model_tensor(m, i, &t);
	if (!s)
		return t.data;
	return wsrv_stream_tensor_at(s, i, &d) == 0 ? d : NULL;
}

/* An FP8 weight's block scale, when it has one: F32 [ceil(rows / blk[0]),
 * ceil(cols / blk[1])], else -EINVAL (a scale of another shape would be
 * read out of its bounds). */
static int find_scale(struct wsrv_model *m, struct wsrv_stream *s, struct weight *wt)
{
	const uint64_t *b = wt->blk;
	char name[600];
	struct wsrv_tensor sc;
	void *d;

	snprintf(name, sizeof(name), "%s_scale_inv", wt->t.name);
	if (wsrv_model_find(m, name, &sc) < 0)
		return 0;
	if (sc.dtype != WSRV_F32 || sc.rank != 2 || sc.shape[0] != (wt->t.shape[0] + b[0] - 1) / b[0] ||
	    sc.shape[1] != (wt->t.shape[1] + b[1] - 1) / b[1]) {
		snprintf(why, sizeof(why), "%s: not the F32 [ceil(rows/%llu), ceil(cols/%llu)] block scale of its weight",
			 name, (unsigned long long)b[0], (unsigned long long)b[1]);
		return -EINVAL;
	}
	wt->scale = s ? (wsrv_stream_tensor(s, name, &d) == 0 ? d : NULL) : sc.data;
	wt->scale_cols = sc.shape[1];
	return wt->scale ? 0 : -EAGAIN;
}

static bool computable(const struct wsrv_tensor *t)
{
	return t->rank == 2 && t->shape[0] && t->shape[1] && !strstr(t->name, "weight_scale_inv") &&
	       (t->dtype == WSRV_BF16 || t->dtype == WSRV_F16 || t->dtype == WSRV_F32 ||
		t->dtype == WSRV_F8_E4M3);
}

static int layer_pass(struct wsrv_model *m, struct wsrv_stream *s, const struct wsrv_layer *l,
		      const uint64_t blk[2], float *act)
{
	for (uint32_t i = l->first; i < l->first + l->count; i++) {
		struct weight wt = { .blk = { blk[0], blk[1] } };
		int r;
		wsrv_model_tensor(m, i, &wt.t);
		if (!computable(&wt.t))
			continue; /* an empty one too: [2^63-1, 0] has nothing to do */
		if (!(wt.w = bytes_of(m, s, i)))
			return -EAGAIN;
		if (wt.t.dtype == WSRV_F8_E4M3 && (r = find_scale(m, s, &wt)) < 0)
			return r;
		if ((r = matvec(&wt, act)) < 0)
			return r;
	}
	return 0;
}

/* Whether every weight of layer l has its bytes mapped here (a disk
 * tier's layer has none until it is taken). */
static bool layer_mapped(struct wsrv_model *m, const struct wsrv_layer *l)
{
	for (uint32_t i = l->first; i < l->first + l->count; i++) {
		struct wsrv_tensor t;
		if (wsrv_model_tensor(m, i, &t) < 0 || (computable(&t) && !t.data))
			return false;
	}
	return true;
}

/* Layer l over the direct mapping; a disk tier's layer not mapped here
 * through an attachment of its own, held while it computes and let go
 * after (wsrv_model_wait holds what it maps until detach: one
 * attachment for every layer would hold the whole model). */
static int direct_layer(struct wsrv_client *c, const char *model, struct wsrv_model *m,
			const struct wsrv_layer *l, const uint64_t blk[2], float *act)
{
	struct wsrv_model *lm;
	int r;

	if (!c || layer_mapped(m, l))
		return layer_pass(m, NULL, l, blk, act);
	if ((r = wsrv_attach(c, model, &lm)) < 0)
		return r;
	if ((r = wsrv_model_wait(lm, l->index, 60000)) == 0)
		r = layer_pass(lm, NULL, l, blk, act);
	wsrv_detach(lm);
	return r;
}

/* The passes, each layer through s, or directly (c and model given: a
 * disk tier's layers each taken alone, direct_layer). */
static int passes_over(struct wsrv_client *c, const char *model, struct wsrv_model *m, struct wsrv_stream *s,
		       int passes, uint64_t *digest)
{
	float *act;
	uint64_t blk[2];
	int r;

	why[0] = 0;
	if ((r = wsrv_model_fp8_block(m, blk)) < 0) {
		snprintf(why, sizeof(why), "%s", wsrv_last_error());
		return r;
	}
	if (!(act = malloc(ACT * sizeof(float))))
		return -ENOMEM;
	for (int i = 0; i < ACT; i++)
		act[i] = sinf((float)i * 0.37f) * 0.5f;
	for (int p = 0; p < passes && r == 0; p++)
		for (size_t i = 0; i < wsrv_model_layer_count(m) && r == 0; i++) {
			struct wsrv_layer l;
			wsrv_model_layer_at(m, i, &l);
			ticker_update("%spass %d of %d, layer %zu of %zu", s ? "" : "the direct mapping's ", p + 1, passes,
				      i + 1, wsrv_model_layer_count(m));
			if (s && (r = wsrv_stream_acquire(s, l.index)) < 0)
				break;
			r = s ? layer_pass(m, s, &l, blk, act) : direct_layer(c, model, m, &l, blk, act);
			if (s)
				wsrv_stream_release(s, l.index);
		}
	for (int i = 0; i < ACT && r == 0; i++)
		if (!isfinite(act[i]))
			r = -ERANGE; /* a weight decoded to NaN or inf */
	*digest = XXH3_64bits(act, ACT * sizeof(float));
	free(act);
	return r;
}

int forward_pass(struct wsrv_model *m, struct wsrv_stream *s, int passes, uint64_t *digest)
{
	return passes_over(NULL, NULL, m, s, passes, digest);
}

int forward_pass_direct(struct wsrv_client *c, const char *model, struct wsrv_model *m, int passes,
			uint64_t *digest)
{
	return passes_over(c, model, m, NULL, passes, digest);
}
