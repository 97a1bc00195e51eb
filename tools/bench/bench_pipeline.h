// SPDX-License-Identifier: MIT
/* bench_pipeline.h - what `wsrv-bench pipeline` shares with its cuda
 * flavour (bench_pipeline_cuda.c). */
#ifndef WSRV_BENCH_PIPELINE_H
#define WSRV_BENCH_PIPELINE_H

#include "wsrv.h"

struct cfg {
	double compute_us, bandwidth;
	unsigned slots;
	int passes;
	const char *trace;
};

/* The pipeline on the cuda backend: compute is a timed wait on the
 * compute stream; the baseline is a pinned cuMemcpyHtoDAsync of the same
 * bytes. Returns the exit status. */
int pipeline_cuda(struct wsrv_model *m, struct cfg *c, int json);

#endif
