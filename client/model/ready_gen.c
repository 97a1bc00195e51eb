// SPDX-License-Identifier: MIT
/* ready_gen.c - one server's readiness page for a model attached while
 * it loads: mapped read-only, checked against the model's manifest, and
 * freed with the older pages it stands in front of. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "attached.h"

struct ready_gen *cl_ready_gen_map(struct wsrv_model *m, int fd, uint64_t len)
{
	struct ready_gen *g = calloc(1, sizeof(*g));
	char err[256];
	uint64_t size;

	if (!g) {
		cl_err(-ENOMEM, "out of memory");
		return NULL;
	}
	if (len < sizeof(struct rd_header) || len > (64u << 20)) {
		cl_err(-EBADMSG, "the server sent a readiness page of %llu bytes", (unsigned long long)len);
		goto fail;
	}
	if (cl_check_fd(fd, "readiness page", len, &size) < 0)
		goto fail;
	g->len = (size_t)len;
	g->page = mmap(NULL, g->len, PROT_READ, MAP_SHARED, fd, 0);
	if (g->page == MAP_FAILED) {
		g->page = NULL;
		cl_err(-errno, "cannot map the readiness page: %s", strerror(errno));
		goto fail;
	}
	if (ready_check(g->page, g->len, m->nseg, m->v.h->ntensors, &g->rv, err, sizeof(err)) < 0) {
		cl_err(-EBADMSG, "the server sent a bad readiness page: %s", err);
		goto fail;
	}
	return g;
fail:
	cl_ready_gen_free(g);
	return NULL;
}

void cl_ready_gen_free(struct ready_gen *g)
{
	while (g) {
		struct ready_gen *older = g->older;
		for (uint32_t i = 0; g->fds && i < g->rv.nsegments; i++)
			if (g->fds[i] >= 0)
				close(g->fds[i]);
		if (g->page)
			munmap((void *)g->page, g->len);
		free(g->fds);
		free(g->piece_first);
		free(g->piece_tensors);
		free(g->checked);
		free(g);
		g = older;
	}
}
