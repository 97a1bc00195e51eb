// SPDX-License-Identifier: MIT
/* ctl_publish.c - wsrvctl publish: a new generation of a served model from
 * another directory's safetensors (the same tensors, dtypes and shapes),
 * written straight into the server's new memory and published as a
 * producer would (wsrv_publish_*). */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "clock.h"
#include "ctl.h"
#include "escape.h"
#include "fullio.h"
#include "format_door.h"
#include "ticker.h"
#include "units.h"
#include "wsrv.h"

/* m's files opened, into fds (m->nfiles of them, owned by the caller:
 * close_all): 0, or -errno with a line said. */
static int open_all(const struct model *m, int *fds)
{
	for (size_t f = 0; f < m->nfiles; f++)
		fds[f] = -1;
	for (size_t f = 0; f < m->nfiles; f++) {
		if ((fds[f] = open(m->files[f]->path, O_RDONLY | O_CLOEXEC)) < 0) {
			int e = errno;
			fprintf(stderr, "wsrvctl: %s: %s\n", esc(m->files[f]->path), strerror(e));
			return -e;
		}
	}
	return 0;
}

static void close_all(const struct model *m, int *fds)
{
	for (size_t f = 0; f < m->nfiles; f++)
		if (fds[f] >= 0)
			close(fds[f]);
	free(fds);
}

/* Tensor t from its file into the publish, through buf (BOUNCE bytes):
 * wsrv_publish_write puts it in the server's memory without a page fault
 * or a zeroed page, which reading into a mapping would pay. */
#define BOUNCE (4u << 20)
static int copy_tensor(struct wsrv_publish *p, int fd, const struct model_tensor *t, uint8_t *buf)
{
	for (uint64_t off = 0; off < t->size;) {
		uint64_t n = t->size - off < BOUNCE ? t->size - off : BOUNCE;
		int r = pread_full(fd, buf, n, t->file_off + off);
		if (r < 0) {
			fprintf(stderr, "wsrvctl: reading %s: %s\n", esc(t->name),
				r == -ENODATA ? "short file" : strerror(-r));
			return -EIO;
		}
		if ((r = wsrv_publish_write(p, t->name, off, buf, n)) < 0) {
			fprintf(stderr, "wsrvctl: %s\n", wsrv_last_error());
			return r;
		}
		off += n;
	}
	return 0;
}

/* Every tensor of m, from its file into the publish (a checkpoint of any
 * number of files: DeepSeek-V3's has 163). */
static int fill(struct wsrv_publish *p, const struct model *m)
{
	int *fds = calloc(m->nfiles ? m->nfiles : 1, sizeof(*fds)), r;
	uint8_t *buf = malloc(BOUNCE);

	if (!fds || !buf) {
		free(fds);
		free(buf);
		fprintf(stderr, "wsrvctl: out of memory\n");
		return -ENOMEM;
	}
	r = open_all(m, fds);
	ticker_step("publishing: copying the files' tensors into the server");
	for (size_t i = 0; r == 0 && i < m->ntensors; i++) {
		const struct model_tensor *t = &m->tensors[i];
		uint64_t size = 0;
		ticker_update("publishing: copying the files' tensors into the server, %zu of %zu", i + 1, m->ntensors);
		if ((r = wsrv_publish_tensor(p, t->name, NULL, &size)) < 0) {
			fprintf(stderr, "wsrvctl: %s\n", wsrv_last_error());
			break;
		}
		if (size != t->size) {
			fprintf(stderr, "wsrvctl: %s has %" PRIu64 " bytes in the model and %" PRIu64 " in the files\n",
				esc(t->name), size, t->size);
			r = -EINVAL;
			break;
		}
		r = copy_tensor(p, fds[t->file], t, buf);
	}
	free(buf);
	close_all(m, fds);
	return r;
}

int ctl_publish(const struct ctl_ctx *c, int argc, char **argv)
{
	static const struct option opts[] = { { "from", required_argument, NULL, 'f' }, { 0 } };
	const char *from = NULL;
	struct wsrv_client *cl;
	struct wsrv_publish *p;
	struct model *m;
	struct errinfo e;
	uint64_t gen = 0;
	char b[32];
	int o;

	optind = 1;
	while ((o = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		if (o == 'f') from = optarg;
		else return 2;
	}
	if (!from || optind + 1 != argc) {
		fprintf(stderr, "usage: wsrvctl publish MODEL --from DIR\n");
		return 2;
	}
	ticker_step("reading the headers of the files in %s", from);
	if (model_open(argv[optind], from, NULL, &m, &e) < 0) {
		/* e.msg names the path that failed already: not twice */
		fprintf(stderr, "wsrvctl: publish --from: %s\n", e.msg);
		return 1;
	}
	if (ctl_connect(c, &cl)) {
		model_free(m);
		return 1;
	}
	ticker_step("publishing: opening a new generation of %s", esc(argv[optind]));
	double t0 = mono_now();
	int r = wsrv_publish_begin(cl, argv[optind], &p);
	if (r < 0)
		fprintf(stderr, "wsrvctl: %s\n", wsrv_last_error());
	else if ((r = fill(p, m)) < 0)
		wsrv_publish_abort(p);
	else if (ticker_step("committing: the server seals and checks the new generation"),
		 (r = wsrv_publish_commit(p, &gen)) < 0) {
		fprintf(stderr, "wsrvctl: %s\n", wsrv_last_error());
		if (r == -ENODATA) /* refused, still open: tensors the files lack */
			wsrv_publish_abort(p);
	}
	ticker_step(NULL);
	if (r == 0)
		printf("generation %" PRIu64 " of %s published: %s in %.2f s\n", gen, esc(argv[optind]),
		       fmt_bytes(m->data_bytes, b, sizeof(b)), mono_now() - t0);
	wsrv_disconnect(cl);
	model_free(m);
	return r < 0 ? 1 : 0;
}
