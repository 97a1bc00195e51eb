// SPDX-License-Identifier: MIT
/* fp8_block.c - FP8 block scales: the block size a model's config.json
 * states, and whether a weight_scale_inv tensor fits its weight. */
#include <errno.h>
#include <jansson.h>

#include "client_internal.h"
#include "dtype.h"

WSRV_EXPORT int wsrv_model_fp8_block(const struct wsrv_model *m, uint64_t blk[2])
{
	const char *cfg;
	size_t len;
	json_t *j, *b;
	int r = 0;

	CL_NEED(m);
	CL_NEED(blk);
	cfg = wsrv_model_config(m, &len);
	j = cfg ? json_loadb(cfg, len, 0, NULL) : NULL;
	b = json_object_get(json_object_get(j, "quantization_config"), "weight_block_size");
	blk[0] = blk[1] = 128; /* DeepSeek-V3's, when the config says nothing */
	if (b && (!json_is_array(b) || json_array_size(b) != 2 ||
		  !json_is_integer(json_array_get(b, 0)) || !json_is_integer(json_array_get(b, 1)) ||
		  json_integer_value(json_array_get(b, 0)) < 1 || json_integer_value(json_array_get(b, 1)) < 1 ||
		  json_integer_value(json_array_get(b, 0)) > (1 << 20) ||
		  json_integer_value(json_array_get(b, 1)) > (1 << 20)))
		r = cl_err(-EINVAL, "config.json: quantization_config.weight_block_size must be two whole numbers from 1 to 2^20");
	else if (b) {
		blk[0] = (uint64_t)json_integer_value(json_array_get(b, 0));
		blk[1] = (uint64_t)json_integer_value(json_array_get(b, 1));
	}
	json_decref(j);
	return r;
}

int cl_fp8_scale_check(const struct wsrv_tensor *w, const struct wsrv_tensor *sc, const uint64_t blk[2])
{
	if (w->rank != 2 || sc->rank != 2 || sc->dtype != WSRV_F32 ||
	    sc->shape[0] != (w->shape[0] + blk[0] - 1) / blk[0] ||
	    sc->shape[1] != (w->shape[1] + blk[1] - 1) / blk[1])
		return cl_err(-EINVAL, "tensor '%s' (%s, rank %u) is not the F32 [ceil(rows/%llu), ceil(cols/%llu)] block scale of '%s' (rank %u)",
			      sc->name, dtype_name((enum dtype)sc->dtype), sc->rank,
			      (unsigned long long)blk[0], (unsigned long long)blk[1], w->name, w->rank);
	return 0;
}
