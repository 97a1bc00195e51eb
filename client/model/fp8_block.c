// SPDX-License-Identifier: MIT
/* fp8_block.c - the FP8 block size a model's config.json states. */
#include <errno.h>
#include <jansson.h>

#include "attached.h"
#include "rank_view.h"

WSRV_EXPORT int wsrv_model_fp8_block(const struct wsrv_model *m, uint64_t blk[2])
{
	struct errinfo e;
	const char *cfg;
	size_t len;
	json_t *j;
	int r;

	CL_NEED(m);
	CL_NEED(blk);
	cfg = wsrv_model_config(m, &len);
	j = cfg ? json_loadb(cfg, len, 0, NULL) : NULL;
	if ((r = rv_fp8_block(j, blk, &e)) < 0)
		cl_err(r, "%s", e.msg);
	json_decref(j);
	return r;
}
