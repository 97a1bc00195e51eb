// SPDX-License-Identifier: MIT
/* copy_client.c - a worker's side of the copy service (copy_client.h). */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "clock.h"
#include "copy.pb-c.h"
#include "copy_client.h"
#include "packet.h"
#include "sockpath.h"
#include "test_seam.h"
#include "wire.h"

/* How long a worker waits for the service, bounded by what the work can
 * take, then copies by itself (a stopped or stuck service costs it this,
 * never more): an answer that copies nothing (a map, an unmap) within the
 * base ($WSRV_COPYD_TIMEOUT_S, default 30 s); a copy within the base plus
 * its bytes, and those of the copies queued before it, at 1 GB/s (a
 * link runs at 25 to 55 GB/s). A connect is retried while the service's
 * backlog is full, for at most CONNECT_S. A wait longer than NOTE_S says
 * on stderr, once, what it waits for. */
#define BASE_S 30.0
#define FLOOR_RATE 1e9
#define CONNECT_S 5.0
#define NOTE_S 3.0

struct copy_conn {
	int fd;                      /* owned */
	uint64_t seq;
	uint64_t sent[COPY_IN_FLIGHT]; /* the CopyRuns not answered yet, */
	uint64_t sent_bytes[COPY_IN_FLIGHT]; /* and the bytes each copies, */
	uint64_t nsent, nwaited;     /* oldest first */
	char path[108];
};

static double base_s(void)
{
	const char *e = getenv("WSRV_COPYD_TIMEOUT_S");
	double v = e ? strtod(e, NULL) : 0;

	return v > 0 ? v : BASE_S;
}

/* connect() that does not wait for room in a full backlog for ever: it
 * is tried again every 20 ms for CONNECT_S. 0 or -errno. */
static int connect_bounded(int fd, const struct sockaddr_un *a)
{
	double t0 = mono_now();
	int fl = fcntl(fd, F_GETFL);

	if (fl < 0 || fcntl(fd, F_SETFL, fl | O_NONBLOCK) < 0)
		return -errno;
	while (connect(fd, (const struct sockaddr *)a, sizeof(*a)) < 0) {
		if (errno != EAGAIN || mono_now() - t0 > CONNECT_S)
			return errno == EAGAIN ? -ETIMEDOUT : -errno;
		nanosleep(&(struct timespec){ 0, 20 * 1000 * 1000 }, NULL);
	}
	return fcntl(fd, F_SETFL, fl) < 0 ? -errno : 0;
}

const char *copy_service_path(void)
{
	const char *p = getenv("WSRV_COPYD");

	if (!p)
		return WSRV_COPYD_SOCKET;
	return *p && strcmp(p, "off") != 0 ? p : NULL;
}

/* The tests' seam: a pause between the connect and the first request,
 * in which the service can refuse the connection and close it. */
static void connected_pause(void)
{
	const char *ms = test_seam("WSRV_TEST_COPY_CONNECTED_PAUSE_MS");
	long v = ms ? strtol(ms, NULL, 10) : 0;

	if (v > 0)
		nanosleep(&(struct timespec){ v / 1000, v % 1000 * 1000000 }, NULL);
}

int copy_connect(const char *path, struct copy_conn **out)
{
	struct sockaddr_un a = { .sun_family = AF_UNIX };
	struct timeval tv = { (time_t)base_s(), 0 };
	struct copy_conn *c;
	char err[256];
	int fd, e;

	if ((e = sockpath_check(path, err, sizeof(err))) < 0) /* wsrvd's clients' rule */
		return cl_err(e, "copy service: %s", err);
	strcpy(a.sun_path, path);
	if ((fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0)) < 0)
		return cl_err(-errno, "copy service: socket: %s", strerror(errno));
	if ((e = connect_bounded(fd, &a)) < 0) {
		close(fd);
		return cl_err(e, "copy service at %s: %s", path,
			      e == -ENOENT ? "not running (no socket)"
			      : e == -ETIMEDOUT ? "not accepting connections (its backlog stayed full)" : strerror(-e));
	}
	/* A send into a service that stopped reading fails too. */
	setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
	connected_pause();
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

/* An Error answer as its errno, with the service's sentence. */
static int error_code(const Wsrv__CopyResponse *rs)
{
	int e = rs->error->code > 0 && rs->error->code < 4096 ? rs->error->code : EIO;

	return cl_err(-e, "copy service: %s", rs->error->message ? rs->error->message : "refused");
}

/* After a send failed with err: the service may have refused this
 * connection (and closed it) before the request went, its reason waiting
 * to be read. That reason's errno, or err with a sentence. */
static int send_failed(struct copy_conn *c, int err)
{
	uint8_t buf[WSRV_MAX_PACKET];
	int nfds = 0, junk[1];
	long n = recv(c->fd, buf, sizeof(buf), MSG_DONTWAIT | MSG_PEEK);
	Wsrv__CopyResponse *rs;

	if (n > 0 && (n = pkt_recv(c->fd, buf, sizeof(buf), junk, 1, &nfds)) > 0) {
		pkt_close_fds(junk, nfds);
		rs = wsrv__copy_response__unpack(NULL, (size_t)n, buf);
		if (rs && rs->body_case == WSRV__COPY_RESPONSE__BODY_ERROR) {
			int e = error_code(rs);
			wsrv__copy_response__free_unpacked(rs, NULL);
			return e;
		}
		wsrv__copy_response__free_unpacked(rs, NULL);
	}
	return cl_err(err, "copy service at %s: sending: %s", c->path, strerror(-err));
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
		return send_failed(c, r);
	return 0;
}

/* Waits until an answer can be read, for at most limit seconds (what the
 * work can take), saying once on stderr past NOTE_S what it waits for.
 * 0 or -ETIMEDOUT with a sentence. */
static int wait_answer(struct copy_conn *c, double limit, uint64_t bytes)
{
	static bool said;
	double t0 = mono_now(), left;
	struct pollfd p = { .fd = c->fd, .events = POLLIN };

	while ((left = limit - (mono_now() - t0)) > 0) {
		double slice = left < 1 ? left : 1;
		if (poll(&p, 1, (int)(slice * 1000) + 1) > 0)
			return 0;
		if (!said && mono_now() - t0 > NOTE_S) {
			said = true;
			fprintf(stderr, "libwsrv: waiting for the copy service at %s to answer (%.1f MB to copy); "
				"this process copies by itself if it has not in %.0f s\n", c->path, (double)bytes / 1e6,
				limit);
		}
	}
	return cl_err(-ETIMEDOUT, "copy service at %s: no answer in %.0f s (%.1f MB to copy: stopped or stuck)",
		      c->path, limit, (double)bytes / 1e6);
}

/* Reads the answer to request seq, waiting at most limit seconds: 0 and
 * *out (the caller frees it), or <0. An Error is returned as its errno. */
static int recv_answer(struct copy_conn *c, uint64_t seq, double limit, uint64_t bytes,
		       Wsrv__CopyResponse **out)
{
	uint8_t buf[WSRV_MAX_PACKET];
	int nfds = 0, junk[1];
	Wsrv__CopyResponse *rs;
	long n;
	int r;

	if ((r = wait_answer(c, limit, bytes)) < 0)
		return r;
	n = pkt_recv(c->fd, buf, sizeof(buf), junk, 1, &nfds);
	pkt_close_fds(junk, nfds); /* the service sends none */
	if (n <= 0)
		return cl_err(n == 0 || n == -ECONNRESET ? -ECONNRESET : (int)n,
			      "copy service at %s: %s", c->path,
			      n == -EAGAIN ? "no answer in time" : "gone before it answered");
	rs = wsrv__copy_response__unpack(NULL, (size_t)n, buf);
	/* An Error of seq 0 answers no request: the service refused the
	 * connection as it let it in (copyd_conn.c). */
	if (rs && rs->body_case == WSRV__COPY_RESPONSE__BODY_ERROR && (rs->seq == seq || rs->seq == 0)) {
		int e = error_code(rs);
		wsrv__copy_response__free_unpacked(rs, NULL);
		return e;
	}
	if (!rs || rs->seq != seq) {
		wsrv__copy_response__free_unpacked(rs, NULL);
		return cl_err(-EPROTO, "copy service at %s: a malformed answer", c->path);
	}
	*out = rs;
	return 0;
}

/* One request and its answer. */
static int call(struct copy_conn *c, Wsrv__CopyRequest *rq, int fd, Wsrv__CopyResponse **out)
{
	int r = send_req(c, rq, fd);

	return r < 0 ? r : recv_answer(c, rq->seq, base_s(), 0, out);
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
	uint64_t bytes = 0;
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
		bytes += runs[i].width * runs[i].height;
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
	if (r == 0) {
		c->sent_bytes[c->nsent % COPY_IN_FLIGHT] = bytes;
		c->sent[c->nsent++ % COPY_IN_FLIGHT] = rq.seq;
	}
	return r;
}

int copy_runs_wait(struct copy_conn *c, uint64_t *bytes)
{
	Wsrv__CopyResponse *rs;
	uint64_t queued = 0, first;
	int r;

	if (c->nwaited == c->nsent)
		return cl_err(-EINVAL, "copy service: no request to wait for");
	/* Bounded, generously, by every byte queued: the service copies in
	 * order, and may be copying others' first. */
	for (uint64_t k = c->nwaited; k < c->nsent; k++)
		queued += c->sent_bytes[k % COPY_IN_FLIGHT];
	first = c->sent_bytes[c->nwaited % COPY_IN_FLIGHT];
	r = recv_answer(c, c->sent[c->nwaited++ % COPY_IN_FLIGHT], base_s() + (double)queued / FLOOR_RATE, first,
			&rs);
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
