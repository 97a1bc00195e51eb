// SPDX-License-Identifier: MIT
/* loader_pool.c - a loader's io_uring and read buffers (loader_pool.h). */
#include "loader_pool.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "log.h"

int loader_pool_init(struct loader_pool *p, unsigned qd, unsigned nbufs, size_t bs, struct errinfo *e)
{
	int r;

	memset(p, 0, sizeof(*p));
	p->qd = qd;
	p->nbufs = nbufs;
	p->bs = bs;
	p->bufs_len = (size_t)nbufs * bs;
	p->bufs = mmap(NULL, p->bufs_len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (p->bufs == MAP_FAILED) {
		p->bufs = NULL;
		return err_set(e, -ENOMEM, "cannot allocate %zu bytes of read buffers", p->bufs_len);
	}
	r = io_uring_queue_init(qd, &p->ring, 0);
	if (r < 0)
		return err_set(e, r, "io_uring_queue_init: %s", strerror(-r));
	p->ring_ok = true;
	/* An empty table, each buffer registered at its first use: pinning
	 * faults its pages in, and a pool registered whole would make the
	 * first read wait for all of them. Buffers come off a stack, so a load
	 * pins only as many as it ever has in use at once. Registration counts
	 * against RLIMIT_MEMLOCK;
	 * a buffer whose registration fails is read into unregistered. */
	r = io_uring_register_buffers_sparse(&p->ring, nbufs);
	p->sparse = r == 0;
	if (r < 0)
		log_debug("io_uring_register_buffers_sparse: %s; using unregistered buffers", strerror(-r));
	if (p->sparse && !(p->buf_fixed = calloc(nbufs, 1)))
		return err_set(e, -ENOMEM, "out of memory");
	return 0;
}

bool loader_pool_fixed(struct loader_pool *p, unsigned i, uint64_t *pinned)
{
	struct iovec iov = { p->bufs + (size_t)i * p->bs, p->bs };
	__u64 tag = 0;

	if (!p->sparse)
		return false;
	if (p->buf_fixed[i] == 0) {
		int r = io_uring_register_buffers_update_tag(&p->ring, i, &iov, &tag, 1);
		p->buf_fixed[i] = r == 1 ? 1 : 2;
		*pinned += r == 1 ? p->bs : 0;
		if (r != 1)
			log_debug("registering read buffer %u: %s; reading into it unregistered", i,
				  strerror(r < 0 ? -r : EIO));
	}
	return p->buf_fixed[i] == 1;
}

void loader_pool_fini(struct loader_pool *p)
{
	if (p->ring_ok)
		io_uring_queue_exit(&p->ring);
	if (p->bufs)
		munmap(p->bufs, p->bufs_len);
	free(p->buf_fixed);
	memset(p, 0, sizeof(*p));
}
