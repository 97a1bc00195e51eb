// SPDX-License-Identifier: MIT
/* copy_client.c - a worker's side of the copy service (copy_client.h). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/un.h>
#include <unistd.h>

#include "copy.pb-c.h"
#include "copy_client.h"
#include "packet.h"
#include "wire.h"

/* The longest the service may take to answer: a copy of a whole model
 * at the pinned rate takes seconds; a service that hangs is left. */
#define COPY_REPLY_TIMEOUT_S 120

struct copy_conn {
	int fd;                      /* owned */
	uint64_t seq;
	uint64_t sent[COPY_IN_FLIGHT]; /* the CopyRuns not answered yet, */
	uint64_t nsent, nwaited;     /* oldest first */
	char path[108];
};

const char *copy_service_path(void)
{
	const char *p = getenv("WSRV_COPYD");

	if (!p)
		return WSRV_COPYD_SOCKET;
	return *p && strcmp(p, "off") != 0 ? p : NULL;
}

int copy_connect(const char *path, struct copy_conn **out)
{
	struct sockaddr_un a = { .sun_family = AF_UNIX };
	struct timeval tv = { COPY_REPLY_TIMEOUT_S, 0 };
	struct copy_conn *c;
	int fd, e;

	if (strlen(path) >= sizeof(a.sun_path))
		return cl_err(-ENAMETOOLONG, "copy service: the socket path %s is too long", path);
	strcpy(a.sun_path, path);
	if ((fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0)) < 0)
		return cl_err(-errno, "copy service: socket: %s", strerror(errno));
	if (connect(fd, (struct sockaddr *)&a, sizeof(a)) < 0) {
		e = errno;
		close(fd);
		return cl_err(-e, "copy service at %s: %s", path,
			      e == ENOENT ? "not running (no socket)" : strerror(e));
	}
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	if (!(c = calloc(1, sizeof(*c)))) {
		close(fd);
		return cl_err(-ENOMEM, "out of memory");
	}
	c->fd = fd;
	snprintf(c->path, sizeof(c->path), "%s", path);
	*out = c;
	return 0;
}

void copy_close(struct copy_conn *c)
{
	if (!c)
		return;
	close(c->fd);
	free(c);
}

/* Sends rq (with fd, or -1) as the next request: 0 or <0. */
static int send_req(struct copy_conn *c, Wsrv__CopyRequest *rq, int fd)
{
	uint8_t buf[WSRV_MAX_PACKET];
	size_t len;
	int r;

	rq->seq = ++c->seq;
	if ((len = wsrv__copy_request__get_packed_size(rq)) > sizeof(buf))
		return cl_err(-EMSGSIZE, "copy service: a request of %zu bytes", len);
	wsrv__copy_request__pack(rq, buf);
	if ((r = pkt_send(c->fd, buf, len, fd >= 0 ? &fd : NULL, fd >= 0)) < 0)
		return cl_err(r, "copy service at %s: sending: %s", c->path, strerror(-r));
	return 0;
}

/* Reads the answer to request seq: 0 and *out (the caller frees it), or
 * <0. An Error is returned as its errno. */
static int recv_answer(struct copy_conn *c, uint64_t seq, Wsrv__CopyResponse **out)
{
	uint8_t buf[WSRV_MAX_PACKET];
	int nfds = 0, junk[1];
	Wsrv__CopyResponse *rs;
	long n = pkt_recv(c->fd, buf, sizeof(buf), junk, 1, &nfds);

	pkt_close_fds(junk, nfds); /* the service sends none */
	if (n <= 0)
		return cl_err(n == 0 || n == -ECONNRESET ? -ECONNRESET : (int)n,
			      "copy service at %s: %s", c->path,
			      n == -EAGAIN ? "no answer in time" : "gone before it answered");
	if (!(rs = wsrv__copy_response__unpack(NULL, (size_t)n, buf)) || rs->seq != seq) {
		wsrv__copy_response__free_unpacked(rs, NULL);
		return cl_err(-EPROTO, "copy service at %s: a malformed answer", c->path);
	}
	if (rs->body_case == WSRV__COPY_RESPONSE__BODY_ERROR) {
		int e = rs->error->code > 0 && rs->error->code < 4096 ? rs->error->code : EIO;
		cl_err(-e, "copy service: %s", rs->error->message ? rs->error->message : "refused");
		wsrv__copy_response__free_unpacked(rs, NULL);
		return -e;
	}
	*out = rs;
	return 0;
}

/* One request and its answer. */
static int call(struct copy_conn *c, Wsrv__CopyRequest *rq, int fd, Wsrv__CopyResponse **out)
{
	int r = send_req(c, rq, fd);

	return r < 0 ? r : recv_answer(c, rq->seq, out);
}

/* The response's body is the one asked for, else -EPROTO. */
static int expect(struct copy_conn *c, Wsrv__CopyResponse *rs, int body)
{
	if ((int)rs->body_case == body)
		return 0;
	wsrv__copy_response__free_unpacked(rs, NULL);
	return cl_err(-EPROTO, "copy service at %s: an answer of the wrong kind", c->path);
}

int copy_map(struct copy_conn *c, const char *device, int fd, uint64_t len, uint32_t *buffer)
{
	Wsrv__CopyMap m = WSRV__COPY_MAP__INIT;
	Wsrv__CopyRequest rq = WSRV__COPY_REQUEST__INIT;
	Wsrv__CopyResponse *rs;
	int r;

	m.protocol = WSRV_COPY_PROTOCOL;
	m.device = (char *)device;
	m.len = len;
	rq.body_case = WSRV__COPY_REQUEST__BODY_MAP;
	rq.map = &m;
	if ((r = call(c, &rq, fd, &rs)) < 0 || (r = expect(c, rs, WSRV__COPY_RESPONSE__BODY_MAP)) < 0)
		return r;
	*buffer = rs->map->buffer;
	wsrv__copy_response__free_unpacked(rs, NULL);
	return 0;
}

int copy_runs_send(struct copy_conn *c, uint32_t buffer, const char *model, uint64_t gen, uint64_t identity,
		   const struct copy_run *runs, size_t n)
{
	Wsrv__CopyRuns m = WSRV__COPY_RUNS__INIT;
	Wsrv__CopyRequest rq = WSRV__COPY_REQUEST__INIT;
	Wsrv__CopyRun *rv, **rp;
	int r;

	if (n > WSRV_COPY_RUNS_MAX)
		return cl_err(-E2BIG, "copy service: %zu runs in one request", n);
	rv = calloc(n + 1, sizeof(*rv));
	rp = calloc(n + 1, sizeof(*rp));
	if (!rv || !rp) {
		free(rv);
		free(rp);
		return cl_err(-ENOMEM, "out of memory");
	}
	for (size_t i = 0; i < n; i++) {
		wsrv__copy_run__init(&rv[i]);
		rv[i].segment = runs[i].segment;
		rv[i].src_off = runs[i].src_off;
		rv[i].width = runs[i].width;
		rv[i].height = runs[i].height;
		rv[i].pitch = runs[i].pitch;
		rv[i].dst_off = runs[i].dst_off;
		rp[i] = &rv[i];
	}
	m.buffer = buffer;
	m.model = (char *)model;
	m.generation = gen;
	m.identity = identity;
	m.n_runs = n;
	m.runs = rp;
	rq.body_case = WSRV__COPY_REQUEST__BODY_RUNS;
	rq.runs = &m;
	r = send_req(c, &rq, -1);
	free(rv);
	free(rp);
	if (r == 0)
		c->sent[c->nsent++ % COPY_IN_FLIGHT] = rq.seq;
	return r;
}

int copy_runs_wait(struct copy_conn *c, uint64_t *bytes)
{
	Wsrv__CopyResponse *rs;
	int r;

	if (c->nwaited == c->nsent)
		return cl_err(-EINVAL, "copy service: no request to wait for");
	r = recv_answer(c, c->sent[c->nwaited++ % COPY_IN_FLIGHT], &rs);
	if (r < 0 || (r = expect(c, rs, WSRV__COPY_RESPONSE__BODY_DONE)) < 0)
		return r;
	*bytes = rs->done->bytes;
	wsrv__copy_response__free_unpacked(rs, NULL);
	return 0;
}

unsigned copy_runs_pending(const struct copy_conn *c)
{
	return (unsigned)(c->nsent - c->nwaited);
}

int copy_unmap(struct copy_conn *c, uint32_t buffer)
{
	Wsrv__CopyUnmap m = WSRV__COPY_UNMAP__INIT;
	Wsrv__CopyRequest rq = WSRV__COPY_REQUEST__INIT;
	Wsrv__CopyResponse *rs;
	int r;

	m.buffer = buffer;
	rq.body_case = WSRV__COPY_REQUEST__BODY_UNMAP;
	rq.unmap = &m;
	if ((r = call(c, &rq, -1, &rs)) < 0 || (r = expect(c, rs, WSRV__COPY_RESPONSE__BODY_OK)) < 0)
		return r;
	wsrv__copy_response__free_unpacked(rs, NULL);
	return 0;
}

int copy_stats(struct copy_conn *c, Wsrv__CopyResponse **out)
{
	Wsrv__CopyStats m = WSRV__COPY_STATS__INIT;
	Wsrv__CopyRequest rq = WSRV__COPY_REQUEST__INIT;
	int r;

	rq.body_case = WSRV__COPY_REQUEST__BODY_STATS;
	rq.stats = &m;
	if ((r = call(c, &rq, -1, out)) < 0 || (r = expect(c, *out, WSRV__COPY_RESPONSE__BODY_STATS)) < 0)
		return r;
	return 0;
}
