// SPDX-License-Identifier: MIT
/* dev_cuda_ctx.c - what every part of the cuda backend stands on: its
 * context made current around driver calls, and a driver error as an
 * errno with a sentence. Below dev_cuda.c, dev_cuda_copy.c, dev_cuda_reg.c
 * and dev_cuda_share.c, so that none of them calls back up. */
#include <errno.h>

#include "wire.h"
#include "dev_cuda.h"

void cu_enter(struct cuda_dev *c)
{
	c->cu->CtxPushCurrent(c->ctx);
}

void cu_leave(struct cuda_dev *c)
{
	CUcontext was;

	c->cu->CtxPopCurrent(&was);
}

int cu_fail(struct cuda_dev *c, CUresult e, const char *what)
{
	return cl_err(e == CUDA_ERROR_OUT_OF_MEMORY ? -ENOMEM : -EIO, "cuda: %s: %s", what,
		      cuda_api_strerror(c->cu, e));
}
