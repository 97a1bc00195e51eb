// SPDX-License-Identifier: MIT
/* conn.c - the connection: connect, handshake, one request at a time. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/un.h>
#include <unistd.h>

#include "client_internal.h"
#include "packet.h"
#include "sockpath.h"

WSRV_EXPORT const char *wsrv_default_socket(void)
{
	static __thread char buf[SOCKPATH_MAX];
	char err[256];
	int r = sockpath_default(buf, sizeof(buf), err, sizeof(err));

	if (r < 0) {
		cl_err(r, "%s", err);
		return NULL;
	}
	return buf;
}

static int error_reply(const Wsrv__Response *r)
{
	const Wsrv__Error *e = r->error;
	int code = e && e->code > 0 && e->code < 4096 ? e->code : EPROTO;

	return cl_err(-code, "server: %s", e && e->message ? e->message : "error");
}

#define BULK_MAX (64u << 20)

/* A Bulk reply's memfd (fd, owned by the caller): sealed, regular, of the
 * size announced, at most BULK_MAX; the Response in it replaces *r. */
static int unbulk(int fd, Wsrv__Response **r)
{
	uint64_t size = (*r)->bulk ? (*r)->bulk->size : 0, got;
	Wsrv__Response *inner;
	void *p;
	int ret;

	if (size == 0 || size > BULK_MAX)
		return cl_err(-EBADMSG, "the server sent a bulk reply of %llu bytes",
			      (unsigned long long)size);
	ret = cl_check_fd(fd, "bulk reply", size, &got);
	if (ret < 0)
		return ret;
	if (got != size)
		return cl_err(-EBADMSG, "the server sent a bulk reply of %llu bytes where %llu were stated",
			      (unsigned long long)got, (unsigned long long)size);
	p = mmap(NULL, size, PROT_READ, MAP_SHARED, fd, 0);
	if (p == MAP_FAILED)
		return cl_err(-errno, "cannot map a bulk reply: %s", strerror(errno));
	inner = wsrv__response__unpack(NULL, size, p);
	munmap(p, size);
	if (!inner || inner->body_case == WSRV__RESPONSE__BODY_BULK || inner->seq != (*r)->seq) {
		if (inner)
			wsrv__response__free_unpacked(inner, NULL);
		return cl_err(-EBADMSG, "the server sent a malformed bulk reply");
	}
	wsrv__response__free_unpacked(*r, NULL);
	*r = inner;
	return 0;
}

/* Receives the reply to seq, skipping nothing: a Goodbye ends the
 * connection; a Bulk reply is read from its memfd. Caller holds the lock. */
static int recv_reply(struct wsrv_client *c, uint64_t seq, Wsrv__Response **out,
		      int *fds, int maxfds, int *nfds)
{
	int got[WSRV_MAX_FDS], n = 0;
	Wsrv__Response *r;
	long len = pkt_recv(c->fd, c->buf, c->max_packet, got, WSRV_MAX_FDS, &n);

	/* A server that refused us and closed may leave ECONNRESET ahead of
	 * its Error packet in our queue: the packet is the next receive. */
	if (len == -ECONNRESET)
		len = pkt_recv(c->fd, c->buf, c->max_packet, got, WSRV_MAX_FDS, &n);
	if (len == -EAGAIN || len == -EWOULDBLOCK)
		return cl_err(-ETIMEDOUT, "the server did not answer in time");
	if (len < 0)
		return cl_err(len == -EMSGSIZE ? -EBADMSG : -ENOTCONN,
			      "lost the server: %s", strerror((int)-len));
	r = wsrv__response__unpack(NULL, (size_t)len, c->buf);
	if (!r || (n > maxfds && !(r->body_case == WSRV__RESPONSE__BODY_BULK && n == 1))) {
		pkt_close_fds(got, n);
		if (r)
			wsrv__response__free_unpacked(r, NULL);
		return cl_err(-EBADMSG, "the server sent a malformed reply");
	}
	if (r->body_case == WSRV__RESPONSE__BODY_GOODBYE) {
		pkt_close_fds(got, n);
		wsrv__response__free_unpacked(r, NULL);
		return cl_err(-ENOTCONN, "the server is stopping");
	}
	if (r->seq != seq && r->body_case != WSRV__RESPONSE__BODY_ERROR) {
		pkt_close_fds(got, n);
		wsrv__response__free_unpacked(r, NULL);
		return cl_err(-EBADMSG, "the server answered another request");
	}
	if (r->body_case == WSRV__RESPONSE__BODY_BULK) {
		int ret = n == 1 ? unbulk(got[0], &r)
			: cl_err(-EBADMSG, "the server sent a bulk reply with %d fds", n);
		pkt_close_fds(got, n);
		n = 0;
		if (ret < 0) {
			wsrv__response__free_unpacked(r, NULL);
			return ret;
		}
	}
	memcpy(fds, got, sizeof(int) * (size_t)n);
	*nfds = n;
	*out = r;
	return 0;
}

/* After a failed send: did the server say why before it left? */
static int lost(struct wsrv_client *c, int err)
{
	int fds[WSRV_MAX_FDS], n = 0;
	long len = recv(c->fd, c->buf, c->max_packet, MSG_DONTWAIT | MSG_PEEK);
	Wsrv__Response *r;

	if (len > 0 && (len = pkt_recv(c->fd, c->buf, c->max_packet, fds, WSRV_MAX_FDS, &n)) > 0) {
		pkt_close_fds(fds, n);
		r = wsrv__response__unpack(NULL, (size_t)len, c->buf);
		if (r && r->body_case == WSRV__RESPONSE__BODY_GOODBYE) {
			wsrv__response__free_unpacked(r, NULL);
			return cl_err(-ENOTCONN, "the server is stopping");
		}
		if (r && r->body_case == WSRV__RESPONSE__BODY_ERROR) {
			int code = error_reply(r);
			wsrv__response__free_unpacked(r, NULL);
			return code;
		}
		if (r)
			wsrv__response__free_unpacked(r, NULL);
	}
	return cl_err(-ENOTCONN, "lost the server: %s", strerror(-err));
}

/* The connection is unusable: close it so later calls fail fast. */
static void drop(struct wsrv_client *c)
{
	if (c->fd >= 0) {
		close(c->fd);
		c->fd = -1;
	}
}

int cl_call(struct wsrv_client *c, Wsrv__Request *req, Wsrv__Response **resp,
	    int *fds, int maxfds, int *nfds)
{
	Wsrv__Response *r = NULL;
	size_t len;
	int ret, n = 0;

	pthread_mutex_lock(&c->lock);
	if (c->fd < 0) {
		pthread_mutex_unlock(&c->lock);
		return cl_err(-ENOTCONN, "not connected to the server (it stopped or was lost); connect again");
	}
	req->seq = ++c->seq;
	len = wsrv__request__get_packed_size(req);
	if (len > c->max_packet) {
		pthread_mutex_unlock(&c->lock);
		return cl_err(-EMSGSIZE, "request of %zu bytes is over the server's %u", len, c->max_packet);
	}
	wsrv__request__pack(req, c->buf);
	ret = pkt_send(c->fd, c->buf, len, NULL, 0);
	if (ret < 0)
		ret = lost(c, ret);
	else
		ret = recv_reply(c, req->seq, &r, fds, maxfds, &n);
	if (ret == -ENOTCONN || ret == -ETIMEDOUT || ret == -EBADMSG || ret == -EACCES)
		drop(c);
	pthread_mutex_unlock(&c->lock);
	if (ret == 0 && r->body_case == WSRV__RESPONSE__BODY_ERROR) {
		ret = error_reply(r);
		wsrv__response__free_unpacked(r, NULL);
		pkt_close_fds(fds, n);
		return ret;
	}
	if (ret == 0) {
		*resp = r;
		*nfds = n;
	}
	return ret;
}

static int hello(struct wsrv_client *c, const struct wsrv_connect_opts *o)
{
	Wsrv__Request q = WSRV__REQUEST__INIT;
	Wsrv__Hello h = WSRV__HELLO__INIT;
	Wsrv__Response *r;
	int fds[1], n, ret;

	h.protocol = WSRV_PROTOCOL_VERSION;
	h.client_name = (char *)(o && o->client_name ? o->client_name : "");
	h.pid = (uint32_t)getpid();
	h.numa_node = o ? o->numa_node : -1;
	h.cpuset = (char *)(o && o->cpuset ? o->cpuset : "");
	h.gpu_pci_bus_id = (char *)(o && o->gpu_pci_bus_id ? o->gpu_pci_bus_id : "");
	q.body_case = WSRV__REQUEST__BODY_HELLO;
	q.hello = &h;
	ret = cl_call(c, &q, &r, fds, 0, &n);
	if (ret < 0)
		return ret;
	if (r->body_case != WSRV__RESPONSE__BODY_HELLO || !r->hello ||
	    r->hello->protocol != WSRV_PROTOCOL_VERSION) {
		wsrv__response__free_unpacked(r, NULL);
		return cl_err(-EPROTONOSUPPORT, "the server does not speak protocol %u", WSRV_PROTOCOL_VERSION);
	}
	/* Never trust a larger packet than ours. */
	if (r->hello->max_packet >= 1024 && r->hello->max_packet < c->max_packet)
		c->max_packet = r->hello->max_packet;
	snprintf(c->server_version, sizeof(c->server_version), "%s",
		 r->hello->server_version ? r->hello->server_version : "");
	wsrv__response__free_unpacked(r, NULL);
	return 0;
}

static int open_socket(const char *path, int timeout_ms)
{
	struct sockaddr_un a = { .sun_family = AF_UNIX };
	struct timeval tv = { timeout_ms / 1000, (timeout_ms % 1000) * 1000 };
	char err[256];
	int fd = sockpath_check(path, err, sizeof(err));

	if (fd < 0)
		return cl_err(fd, "%s", err);
	strcpy(a.sun_path, path);
	fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return cl_err(-errno, "socket: %s", strerror(errno));
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
	if (connect(fd, (struct sockaddr *)&a, sizeof(a)) < 0) {
		int code = errno;
		close(fd);
		return cl_err(-code, "cannot connect to wsrvd at %s: %s", path, strerror(code));
	}
	return fd;
}

WSRV_EXPORT int wsrv_connect(const char *path, const struct wsrv_connect_opts *opts,
			     struct wsrv_client **out)
{
	struct wsrv_client *c;
	int fd, ret;

	if (!path && !(path = wsrv_default_socket()))
		return -ENAMETOOLONG;
	fd = open_socket(path, opts && opts->timeout_ms > 0 ? opts->timeout_ms : 10000);
	if (fd < 0)
		return fd;
	c = calloc(1, sizeof(*c));
	if (c)
		c->buf = malloc(WSRV_MAX_PACKET);
	if (!c || !c->buf) {
		free(c);
		close(fd);
		return cl_err(-ENOMEM, "out of memory");
	}
	c->fd = fd;
	c->refs = 1;
	c->max_packet = WSRV_MAX_PACKET;
	pthread_mutex_init(&c->lock, NULL);
	ret = hello(c, opts);
	if (ret < 0) {
		cl_unref(c);
		return ret;
	}
	*out = c;
	return 0;
}

void cl_unref(struct wsrv_client *c)
{
	pthread_mutex_lock(&c->lock);
	unsigned left = --c->refs;
	pthread_mutex_unlock(&c->lock);
	if (left)
		return;
	drop(c);
	pthread_mutex_destroy(&c->lock);
	free(c->buf);
	free(c);
}

WSRV_EXPORT void wsrv_disconnect(struct wsrv_client *c)
{
	if (!c)
		return;
	pthread_mutex_lock(&c->lock);
	drop(c);
	pthread_mutex_unlock(&c->lock);
	cl_unref(c);
}

static void copy_str(char *dst, size_t cap, const char *src)
{
	snprintf(dst, cap, "%s", src ? src : "");
}

WSRV_EXPORT int wsrv_list_models(struct wsrv_client *c, struct wsrv_model_info *out,
				 size_t cap, size_t *n)
{
	Wsrv__Request q = WSRV__REQUEST__INIT;
	Wsrv__ListModels lm = WSRV__LIST_MODELS__INIT;
	Wsrv__Response *r;
	int fds[1], nf, ret;

	q.body_case = WSRV__REQUEST__BODY_LIST_MODELS;
	q.list_models = &lm;
	ret = cl_call(c, &q, &r, fds, 0, &nf);
	if (ret < 0)
		return ret;
	if (r->body_case != WSRV__RESPONSE__BODY_MODELS || !r->models) {
		wsrv__response__free_unpacked(r, NULL);
		return cl_err(-EBADMSG, "the server sent the wrong reply to ListModels");
	}
	for (size_t i = 0; i < r->models->n_models && i < cap; i++) {
		const Wsrv__ModelInfo *m = r->models->models[i];
		struct wsrv_model_info *o = &out[i];
		copy_str(o->name, sizeof(o->name), m->name);
		copy_str(o->path, sizeof(o->path), m->path);
		copy_str(o->numa, sizeof(o->numa), m->numa);
		o->tensor_bytes = m->tensor_bytes;
		o->arena_bytes = m->arena_bytes;
		o->page_size = m->page_size;
		o->tensors = m->tensors;
		o->layers = m->layers;
		o->segments = m->segments;
		o->attached = m->attached;
		o->load_seconds = m->load_seconds;
	}
	*n = r->models->n_models;
	wsrv__response__free_unpacked(r, NULL);
	return 0;
}

WSRV_EXPORT int wsrv_stats(struct wsrv_client *c, struct wsrv_stats *out)
{
	Wsrv__Request q = WSRV__REQUEST__INIT;
	Wsrv__Stats st = WSRV__STATS__INIT;
	Wsrv__Response *r;
	const Wsrv__StatsReply *s;
	int fds[1], nf, ret;

	q.body_case = WSRV__REQUEST__BODY_STATS;
	q.stats = &st;
	ret = cl_call(c, &q, &r, fds, 0, &nf);
	if (ret < 0)
		return ret;
	s = r->stats;
	if (r->body_case != WSRV__RESPONSE__BODY_STATS || !s) {
		wsrv__response__free_unpacked(r, NULL);
		return cl_err(-EBADMSG, "the server sent the wrong reply to Stats");
	}
	memset(out, 0, sizeof(*out));
	copy_str(out->server_version, sizeof(out->server_version), s->server_version);
	out->uptime_seconds = s->uptime_seconds;
	out->clients = s->clients;
	out->attachments = s->attachments;
	out->open_fds = s->open_fds;
	out->leases = s->leases;
	out->requests = s->requests;
	out->errors = s->errors;
	out->clients_total = s->clients_total;
	out->arena_bytes = s->arena_bytes;
	out->rss_bytes = s->rss_bytes;
	for (size_t i = 0; i < s->n_models && i < WSRV_STATS_MAX_MODELS; i++) {
		copy_str(out->models[i].name, sizeof(out->models[i].name), s->models[i]->name);
		out->models[i].attached = s->models[i]->attached;
		out->models[i].fetches = s->models[i]->fetches;
		out->models[i].leases = s->models[i]->leases;
		out->models[i].arena_bytes = s->models[i]->arena_bytes;
		out->nmodels++;
	}
	for (size_t i = 0; i < s->n_streams && i < WSRV_STATS_MAX_STREAMS; i++) {
		const Wsrv__ClientStream *cs = s->streams[i];
		const Wsrv__StreamReport *rp = cs->report;
		if (!rp)
			continue;
		out->streams[out->nstreams].client_id = cs->client_id;
		out->streams[out->nstreams].pid = cs->pid;
		copy_str(out->streams[out->nstreams].client, sizeof(out->streams[0].client), cs->client_name);
		copy_str(out->streams[out->nstreams].model, sizeof(out->streams[0].model), rp->model);
		out->streams[out->nstreams].stream_id = rp->stream_id;
		out->streams[out->nstreams].slots = rp->slots;
		out->streams[out->nstreams].bytes_copied = rp->bytes_copied;
		out->streams[out->nstreams].acquires = rp->acquires;
		out->streams[out->nstreams].passes = rp->passes;
		out->streams[out->nstreams].device_bytes = rp->device_bytes;
		out->streams[out->nstreams].copy_seconds = rp->copy_seconds;
		out->streams[out->nstreams].wait_seconds = rp->wait_seconds;
		out->streams[out->nstreams].hidden_fraction = rp->hidden_fraction;
		out->nstreams++;
	}
	wsrv__response__free_unpacked(r, NULL);
	return 0;
}
