// SPDX-License-Identifier: MIT
/* srv_region.c - the device-region broker (see srv_region.h). */
#include "srv_region.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "escape.h"
#include "log.h"
#include "memfd_util.h"
#include "core_door.h"
#include "srv_attachments.h"
#include "srv_identity.h"
#include "wsrv.pb-c.h"

/* Slack over the model's tensor bytes that a region may have: per-tensor
 * alignment on the device and the allocation granularity. */
#define REGION_SLACK (64ull << 20)

static struct srv_region *find_id(struct server *srv, uint32_t id)
{
	for (uint32_t i = 0; i < srv->regions.n; i++)
		if (srv->regions.v[i].id == id)
			return &srv->regions.v[i];
	return NULL;
}

static bool key_is(const struct srv_region *g, uint32_t model, uint64_t gen,
		   const Wsrv__RegionOpen *q)
{
	return g->model == model && g->generation == gen && g->kind == (int)q->kind &&
	       g->fingerprint == q->fingerprint && g->bytes == q->bytes &&
	       strcmp(g->device, q->device) == 0;
}

/* Removes region g, closing its handle. */
static void region_drop(struct server *srv, struct srv_region *g, const char *why)
{
	log_info("device region %u (%s, %llu bytes) dropped: %s", g->id, esc(g->device),
		 (unsigned long long)g->bytes, why);
	if (g->fd >= 0)
		close(g->fd);
	srv->regions.bytes -= g->bytes;
	*g = srv->regions.v[--srv->regions.n];
}

/* The region's holder count fell: forget it when nobody needs it. */
static void region_settle(struct server *srv, struct srv_region *g)
{
	if (g->holders == 0 && !(g->committed && srv->cfg.keep_regions))
		region_drop(srv, g, g->committed ? "its last holder let go" : "its writer gave up before committing");
}

/* Whether a session of another process than g's writer's holds g: a
 * worker that shares it. A region only its writer holds costs nobody
 * anything to forget: the writer keeps its own memory, and no other
 * worker maps it. */
static bool shared_with_others(struct server *srv, const struct srv_region *g)
{
	struct session *w = NULL;
	uint64_t wa = 0;

	for (struct session *o = srv->sessions; o && !w; o = o->next)
		if (o->id == g->writer)
			w = o;
	if (w)
		wa = srv_account(srv, w);
	for (struct session *o = srv->sessions; o; o = o->next)
		for (uint32_t i = 0; i < o->nholds; i++)
			if (o->holds[i] == g->id && (!w || srv_account(srv, o) != wa))
				return true;
	return false;
}

/* The regions uid has written that are in the table. */
static uint32_t written_by(const struct server *srv, uint32_t uid)
{
	uint32_t n = 0;

	for (uint32_t i = 0; i < srv->regions.n; i++)
		n += srv->regions.v[i].writer_uid == uid;
	return n;
}

/* The region to forget so that s may open one, by rule: 0, a kept region
 * nobody holds; 1, a committed one no worker but its writer's process
 * holds; 2, when s's user has written fewer than its part of the slots
 * (--max-regions over the users connected), one of a user past its part,
 * committed or still being filled (regions opened and never committed
 * held every slot for --region-fill-timeout, and were opened again at
 * once). Each rule the oldest first; NULL when none. Forgetting takes
 * nothing from a holder: each keeps what it mapped or imported, and a
 * writer whose region went copies privately. */
static struct srv_region *victim(struct server *srv, const struct session *s, int rule)
{
	uint32_t part = srv->cfg.max_regions / srv_users(srv);
	struct srv_region *old = NULL;

	if (rule == 2 && written_by(srv, s->cred.uid) >= (part ? part : 1))
		return NULL;
	for (uint32_t i = 0; i < srv->regions.n; i++) {
		struct srv_region *g = &srv->regions.v[i];
		bool fits = rule == 0 ? !g->holders
			  : rule == 1 ? g->committed && !shared_with_others(srv, g)
				      : g->writer_uid != s->cred.uid && written_by(srv, g->writer_uid) > part;
		if (fits && (!old || g->created < old->created))
			old = g;
	}
	return old;
}

/* Room for one more region of `bytes` for s: forgets regions (victim's
 * rules, in turn) while the total limits need it. */
static bool make_room(struct server *srv, const struct session *s, uint64_t bytes)
{
	static const char *const why[] = {
		"room was needed for a new region",
		"room was needed for a new region, and only its writer held it",
		"room was needed for another user's region, and its writer's user held more than its part",
	};
	const struct srv_config *c = &srv->cfg;

	while (srv->regions.n >= c->max_regions || srv->regions.bytes + bytes > c->max_region_bytes) {
		struct srv_region *g = NULL;
		int rule = 0;
		while (rule < 3 && !(g = victim(srv, s, rule)))
			rule++;
		if (!g)
			return false;
		region_drop(srv, g, why[rule]);
	}
	return true;
}

static uint64_t session_region_bytes(const struct server *srv, const struct session *s)
{
	uint64_t sum = 0;

	for (uint32_t i = 0; i < s->nholds; i++)
		for (uint32_t k = 0; k < srv->regions.n; k++)
			if (srv->regions.v[k].id == s->holds[i])
				sum += srv->regions.v[k].bytes;
	return sum;
}

/* The regions s's process holds over all its connections (srv_account),
 * and their bytes. */
static void process_regions(struct server *srv, struct session *s, uint32_t *n, uint64_t *bytes)
{
	uint64_t mine = srv_account(srv, s);

	*n = 0;
	*bytes = 0;
	for (struct session *o = srv->sessions; o; o = o->next)
		if (srv_account(srv, o) == mine) {
			*n += o->nholds;
			*bytes += session_region_bytes(srv, o);
		}
}

/* May s hold one more region of `bytes`? 0, or an error reply. The limits
 * are its process's, whatever connections it spreads them over. */
static int client_limits(struct server *srv, struct session *s, uint64_t bytes, uint64_t seq,
			 struct reply *r)
{
	uint64_t held;
	uint32_t n, *v;

	process_regions(srv, s, &n, &held);
	if (n >= srv->cfg.max_client_regions)
		return srv_reply_error(r, seq, ENOSPC, "this client's process (pid %d) holds %u device regions over its connections, the limit (--max-client-regions); close a stream first",
				       (int)s->cred.pid, n);
	if (held + bytes > srv->cfg.max_client_region_bytes)
		return srv_reply_error(r, seq, ENOSPC, "a device region of %llu bytes would put this client's process over its %llu bytes of regions (--max-client-region-bytes)",
				       (unsigned long long)bytes, (unsigned long long)srv->cfg.max_client_region_bytes);
	v = realloc(s->holds, (s->nholds + 1) * sizeof(*v));
	if (!v)
		return srv_reply_error(r, seq, ENOMEM, "out of memory");
	s->holds = v;
	return 0;
}

static void reply_region(struct reply *r, uint64_t seq, const struct srv_region *g, int role)
{
	Wsrv__Response resp = WSRV__RESPONSE__INIT;
	Wsrv__RegionReply rr = WSRV__REGION_REPLY__INIT;

	rr.role = role;
	if (g) {
		rr.region_id = role == WSRV__REGION_ROLE__REGION_WAIT ? 0 : g->id;
		rr.bytes = g->bytes;
		rr.writer_pid = g->writer_pid;
	}
	resp.seq = seq;
	resp.body_case = WSRV__RESPONSE__BODY_REGION;
	resp.region = &rr;
	srv_pack(r, &resp);
}

/* The request's key fields, or an error reply. */
static int check_key(struct server *srv, const struct srv_model *sm, const Wsrv__RegionOpen *q,
		     uint64_t seq, struct reply *r)
{
	const struct model *m = sm->lm->model;
	uint64_t cap = m->data_bytes + 256 * (uint64_t)m->ntensors + REGION_SLACK;
	size_t dl = q->device ? strlen(q->device) : 0;

	(void)srv;
	if (q->kind != WSRV__REGION_KIND__REGION_HOST && q->kind != WSRV__REGION_KIND__REGION_CUDA)
		return srv_reply_error(r, seq, EINVAL, "unknown device region kind %d", (int)q->kind);
	if (dl == 0 || dl >= SRV_REGION_DEVICE)
		return srv_reply_error(r, seq, EINVAL, "a device identity is 1 to %d bytes", SRV_REGION_DEVICE - 1);
	for (size_t i = 0; i < dl; i++)
		if ((unsigned char)q->device[i] <= 0x20 || q->device[i] == 0x7f)
			return srv_reply_error(r, seq, EINVAL, "a device identity is printable, without spaces");
	if (q->bytes == 0 || q->bytes > cap)
		return srv_reply_error(r, seq, EINVAL, "a device region of %llu bytes for model '%s': it holds at most the model's resident tensors (%llu bytes with alignment)",
				       (unsigned long long)q->bytes, m->name, (unsigned long long)cap);
	return 0;
}

static int open_new(struct server *srv, struct session *s, uint32_t mi, const Wsrv__RegionOpen *q,
		    uint64_t seq, struct reply *r)
{
	struct srv_region *g;

	if (!make_room(srv, s, q->bytes))
		return srv_reply_error(r, seq, ENOSPC, "the server holds %u device regions of %llu bytes; a new one of %llu bytes is over its limits (--max-regions %u, --max-region-bytes %llu)",
				       srv->regions.n, (unsigned long long)srv->regions.bytes,
				       (unsigned long long)q->bytes, srv->cfg.max_regions,
				       (unsigned long long)srv->cfg.max_region_bytes);
	if (srv->regions.n == srv->regions.cap) {
		uint32_t cap = srv->regions.cap ? 2 * srv->regions.cap : 8;
		g = realloc(srv->regions.v, cap * sizeof(*g));
		if (!g)
			return srv_reply_error(r, seq, ENOMEM, "out of memory");
		srv->regions.v = g;
		srv->regions.cap = cap;
	}
	g = &srv->regions.v[srv->regions.n++];
	*g = (struct srv_region){ .id = ++srv->regions.next_id, .model = mi,
				  .generation = srv->models[mi].generation, .kind = (int)q->kind,
				  .fingerprint = q->fingerprint, .bytes = q->bytes, .writer = s->id,
				  .writer_pid = (uint32_t)s->cred.pid, .writer_uid = s->cred.uid, .fd = -1, .holders = 1,
				  .created = mono_now() };
	snprintf(g->device, sizeof(g->device), "%s", q->device);
	snprintf(g->model_name, sizeof(g->model_name), "%s", srv->models[mi].lm->model->name);
	srv->regions.bytes += g->bytes;
	s->holds[s->nholds++] = g->id;
	log_info("client %llu (pid %d) fills device region %u: model %s on %s, %llu bytes",
		 (unsigned long long)s->id, (int)s->cred.pid, g->id, esc(srv->models[mi].lm->model->name),
		 esc(g->device), (unsigned long long)g->bytes);
	reply_region(r, seq, g, WSRV__REGION_ROLE__REGION_WRITER);
	return 0;
}

int region_open(struct server *srv, struct session *s, const Wsrv__RegionOpen *q, uint64_t seq,
		struct reply *r)
{
	struct srv_region *g = NULL;
	uint32_t mi;
	int ret;

	if ((ret = attach_model(s, q->attach_id)) < 0)
		return srv_reply_error(r, seq, EBADF, "attach id %u is not one of this client's", q->attach_id);
	mi = (uint32_t)ret;
	if ((ret = check_key(srv, &srv->models[mi], q, seq, r)) < 0)
		return ret;
	for (uint32_t i = 0; i < srv->regions.n && !g; i++)
		if (key_is(&srv->regions.v[i], mi, srv->models[mi].generation, q))
			g = &srv->regions.v[i];
	if ((g && !g->committed) || (!g && q->read_only)) {
		if (g)
			g->waits++;
		reply_region(r, seq, g, WSRV__REGION_ROLE__REGION_WAIT);
		return 0;
	}
	if ((ret = client_limits(srv, s, q->bytes, seq, r)) < 0)
		return ret;
	if (!g)
		return open_new(srv, s, mi, q, seq, r);
	if (r->fd_room < 1)
		return srv_reply_error(r, seq, EAGAIN, "%u file descriptors sent to this client are still unread; read the replies first",
				       s->fds_unread);
	g->holders++;
	s->holds[s->nholds++] = g->id;
	r->fds[0] = g->fd;
	r->nfds = 1;
	reply_region(r, seq, g, WSRV__REGION_ROLE__REGION_READER);
	return 0;
}

/* Is fd a handle of the region's kind and size? 0 or an error reply. */
static int check_handle(const struct srv_region *g, int fd, uint64_t seq, struct reply *r)
{
	struct stat st;

	if (fstat(fd, &st) < 0)
		return srv_reply_error(r, seq, EBADF, "the region's handle cannot be examined: %s", strerror(errno));
	if (S_ISDIR(st.st_mode) || S_ISSOCK(st.st_mode) || S_ISFIFO(st.st_mode))
		return srv_reply_error(r, seq, EBADF, "the region's handle is a directory, socket or pipe");
	if (g->kind != WSRV__REGION_KIND__REGION_HOST)
		return 0;   /* a CUDA handle is the driver's: nothing more to see */
	/* F_SEAL_WRITE, not F_SEAL_FUTURE_WRITE: under the latter a writable
	 * mapping made before the seal keeps working, and the writer could
	 * change what readers see after the commit. */
	if (memfd_check(fd, g->bytes, true, F_SEAL_SEAL | F_SEAL_WRITE, NULL, NULL) < 0)
		return srv_reply_error(r, seq, EBADF, "a host region's handle is a memfd of %llu bytes sealed with F_SEAL_WRITE (no writable mapping left) and against resizing",
				       (unsigned long long)g->bytes);
	return 0;
}

int region_commit(struct server *srv, struct session *s, const Wsrv__RegionCommit *q,
		  int *commit_fd, uint64_t seq, struct reply *r)
{
	struct srv_region *g = find_id(srv, q->region_id);
	int ret;

	if (!g || g->writer != s->id || g->committed)
		return srv_reply_error(r, seq, EPERM, "device region %u is not one this client is filling", q->region_id);
	if (*commit_fd < 0)
		return srv_reply_error(r, seq, EINVAL, "RegionCommit comes with the region's handle as its one fd");
	if ((ret = check_handle(g, *commit_fd, seq, r)) < 0)
		return ret;
	g->fd = *commit_fd;
	*commit_fd = -1;
	g->committed = true;
	log_info("client %llu committed device region %u after %.3f s", (unsigned long long)s->id, g->id,
		 mono_now() - g->created);
	srv_reply_ok(r, seq);
	return 0;
}

/* Drops s's hold number i of its region. */
static void let_go(struct server *srv, struct session *s, uint32_t i)
{
	struct srv_region *g = find_id(srv, s->holds[i]);

	s->holds[i] = s->holds[--s->nholds];
	if (!g)
		return;     /* dropped already */
	g->holders--;
	if (g->writer == s->id && !g->committed) {
		g->holders = 0;
		log_warn("device region %u: its writer (client %llu, pid %d) left before committing; the next worker to ask fills it",
			 g->id, (unsigned long long)s->id, (int)s->cred.pid);
	}
	region_settle(srv, g);
}

int region_close(struct server *srv, struct session *s, const Wsrv__RegionClose *q, uint64_t seq,
		 struct reply *r)
{

	for (uint32_t i = 0; i < s->nholds; i++) {
		if (s->holds[i] != q->region_id)
			continue;
		let_go(srv, s, i);
		srv_reply_ok(r, seq);
		return 0;
	}
	return srv_reply_error(r, seq, ENOENT, "device region %u is not held by this client", q->region_id);
}

/* The writer of g, if it is still connected. */
static struct session *writer_of(struct server *srv, const struct srv_region *g)
{
	for (struct session *s = srv->sessions; s; s = s->next)
		if (s->id == g->writer)
			return s;
	return NULL;
}

void region_tick(struct server *srv, double now)
{
	for (uint32_t i = 0; i < srv->regions.n;) {
		struct srv_region *g = &srv->regions.v[i];
		struct session *w;
		if (g->committed || now - g->created <= srv->cfg.region_fill_timeout) {
			i++;
			continue;
		}
		/* The slot goes back: the writer's commit is refused from now
		 * on (it keeps its own copy), and the next worker to ask
		 * fills it again. */
		if ((w = writer_of(srv, g)))
			for (uint32_t k = 0; k < w->nholds; k++)
				if (w->holds[k] == g->id) {
					w->holds[k] = w->holds[--w->nholds];
					break;
				}
		log_warn("device region %u: its writer (client %llu, pid %u) did not commit it within %.0f s (--region-fill-timeout); its slot goes back",
			 g->id, (unsigned long long)g->writer, g->writer_pid, srv->cfg.region_fill_timeout);
		region_drop(srv, g, "its fill ran out of time");
	}
}

void region_release_session(struct server *srv, struct session *s)
{
	while (s->nholds)
		let_go(srv, s, s->nholds - 1);
	free(s->holds);
	s->holds = NULL;
}

int region_stats(const struct server *srv, Wsrv__StatsReply *st)
{
	uint32_t n = srv->regions.n;
	Wsrv__RegionInfo *v = calloc(n + 1, sizeof(*v));
	Wsrv__RegionInfo **p = calloc(n + 1, sizeof(*p));
	double now = mono_now();

	if (!v || !p) {
		free(v);
		free(p);
		return -ENOMEM;
	}
	for (uint32_t i = 0; i < n; i++) {
		const struct srv_region *g = &srv->regions.v[i];
		wsrv__region_info__init(&v[i]);
		v[i].id = g->id;
		v[i].model = (char *)g->model_name;
		v[i].device = (char *)g->device;
		v[i].kind = g->kind;
		v[i].bytes = g->bytes;
		v[i].holders = g->holders;
		v[i].state = g->committed ? WSRV__REGION_STATE__REGION_COMMITTED : WSRV__REGION_STATE__REGION_FILLING;
		v[i].writer_pid = g->writer_pid;
		v[i].fingerprint = g->fingerprint;
		v[i].generation = g->generation;
		v[i].age_seconds = now - g->created;
		v[i].waits = g->waits;
		p[i] = &v[i];
	}
	p[n] = v;   /* the block itself, for region_stats_free */
	st->n_regions = n;
	st->regions = p;
	st->region_bytes = srv->regions.bytes;
	return 0;
}

void region_stats_free(Wsrv__StatsReply *st)
{
	if (st->regions)
		free(st->regions[st->n_regions]);
	free(st->regions);
	st->regions = NULL;
	st->n_regions = 0;
}

void region_free_all(struct server *srv)
{
	for (uint32_t i = 0; i < srv->regions.n; i++)
		if (srv->regions.v[i].fd >= 0)
			close(srv->regions.v[i].fd);
	free(srv->regions.v);
	srv->regions = (struct srv_regions){ 0 };
}
