// SPDX-License-Identifier: MIT
/* peer_fill_io.c - the filling side's UCX connections and messages. */
#include "peer_fill_io.h"

#include "lifecycle.h"

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "clock.h"
#include "log.h"
#include "peer_ucx.h"
#include "utf8.h"

static bool send_to(struct fio *f, size_t i, unsigned id, const void *hdr, size_t hlen,
		    const void *data, size_t len);

static const char *const fpeer_names[FPEER_STATE_MAX] = {
	[FP_IDLE] = "idle", [FP_HELLO] = "hello sent", [FP_PROVED] = "proved",
	[FP_READY] = "ready", [FP_DEAD] = "dead",
};

static const unsigned fpeer_moves[FPEER_STATE_MAX] = {
	[FP_IDLE] = LIFE_BIT(FP_HELLO) | LIFE_BIT(FP_IDLE) | LIFE_BIT(FP_DEAD),
	[FP_HELLO] = LIFE_BIT(FP_PROVED) | LIFE_BIT(FP_READY) | LIFE_BIT(FP_IDLE) | LIFE_BIT(FP_DEAD),
	[FP_PROVED] = LIFE_BIT(FP_READY) | LIFE_BIT(FP_IDLE) | LIFE_BIT(FP_DEAD),
	[FP_READY] = LIFE_BIT(FP_READY) | LIFE_BIT(FP_IDLE) | LIFE_BIT(FP_DEAD),
	[FP_DEAD] = LIFE_BIT(FP_DEAD),
};

static const struct lifecycle fpeer_life = { "fill peer", FPEER_STATE_MAX, fpeer_names, fpeer_moves };

/* The one place a fill peer's state changes. */
static void fpeer_to(struct fio *f, struct fpeer *fp, enum fpeer_state to)
{
	if (life_check(&fpeer_life, (uint64_t)(fp - f->peers), fp->st, to) == 0)
		fp->st = to;
}

static const char *const fslot_names[FSLOT_STATE_MAX] = {
	[FS_FREE] = "free", [FS_WAIT] = "asked", [FS_RECV] = "receiving",
};

static const unsigned fslot_moves[FSLOT_STATE_MAX] = {
	[FS_FREE] = LIFE_BIT(FS_WAIT),
	[FS_WAIT] = LIFE_BIT(FS_RECV) | LIFE_BIT(FS_FREE),
	[FS_RECV] = LIFE_BIT(FS_FREE),
};

static const struct lifecycle fslot_life = { "fill slot", FSLOT_STATE_MAX, fslot_names, fslot_moves };

/* The one place a slot's state changes. */
static void fslot_to(struct fslot *s, enum fslot_state to)
{
	if (life_check(&fslot_life, s->id & 0xffff, s->st, to) == 0)
		s->st = to;
}

static struct fpeer *peer_of(struct fio *f, const ucp_am_recv_param_t *p, size_t *idx)
{
	if (!(p->recv_attr & UCP_AM_RECV_ATTR_FIELD_REPLY_EP))
		return NULL;
	for (size_t i = 0; i < f->npeers; i++)
		if (f->peers[i].ep == p->reply_ep && f->peers[i].st != FP_DEAD) {
			*idx = i;
			return &f->peers[i];
		}
	return NULL;
}

static void slot_done(struct fio *f, struct fslot *s, int status)
{
	s->status = status;
	s->done = true;
	f->peers[s->peer].slots--;
	f->done_slots[f->ndone++] = (uint32_t)(s - f->slots);
}

static void refuse(struct fio *f, size_t i, const char *why);

/* A table (Hello's answer or Status's) from peer i, checked whole. */
static void take_table(struct fio *f, size_t i, const void *buf, size_t len)
{
	struct fpeer *fp = &f->peers[i];
	struct peer_table_hdr hh, *h = &hh;
	char why[200];

	fp->asking = false;
	f->changed = true;
	/* Message bytes come unaligned: copied before use. */
	if (len < sizeof(*h))
		return fio_kill(f, i, "sent a malformed table");
	memcpy(h, buf, sizeof(*h));
	h->msg[sizeof(h->msg) - 1] = 0;
	if (h->magic != PEER_MAGIC)
		return fio_kill(f, i, "sent a malformed table");
	if (h->status < 0) {
		snprintf(why, sizeof(why), "refused: %.*s", UTF8_CUT(h->msg, 160));
		/* Not loaded there yet: asked again until --fill-wait is up. */
		return h->status == -EAGAIN ? fio_kill(f, i, why) : refuse(f, i, why);
	}
	if (h->ntensors != f->ntensors || len != sizeof(*h) + (size_t)h->ntensors * sizeof(struct peer_tstate))
		return fio_kill(f, i, "sent a table of another size");
	if (fp->st == FP_HELLO ||
	    (fp->st == FP_PROVED && !peer_auth_ok(f->trust, PEER_SIDE_SERVER, &fp->auth, h->mac)))
		return refuse(f, i, "does not know the peer token (its proof is wrong)");
	memcpy(fp->tab, (const uint8_t *)buf + sizeof(*h), (size_t)h->ntensors * sizeof(struct peer_tstate));
	if (fp->st == FP_PROVED)
		log_info("peer %s: connected", fp->name);
	fpeer_to(f, fp, FP_READY);
}

struct table_recv {
	struct fio *f;
	size_t peer;
	void *buf;
	size_t len;
	ucp_ep_h ep;                /* the peer's ep when it answered */
};

static void table_recv_done(void *req, ucs_status_t st, size_t len, void *arg)
{
	struct table_recv *t = arg;

	(void)len;
	if (t->f->peers[t->peer].ep == t->ep && t->f->peers[t->peer].st != FP_DEAD) {
		if (st == UCS_OK)
			take_table(t->f, t->peer, t->buf, t->len);
		else
			fio_kill(t->f, t->peer, "lost while sending its table");
	}
	free(t->buf);
	free(t);
	if (req)
		ucp_request_free(req);
}

static ucs_status_t on_table(void *arg, const void *hdr, size_t hlen, void *data, size_t len,
			     const ucp_am_recv_param_t *p)
{
	struct fio *f = arg;
	ucp_request_param_t rp = { .op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA };
	struct table_recv *t;
	size_t i;
	void *req;

	(void)hdr;
	if (!peer_of(f, p, &i) || hlen)
		return UCS_OK;
	if (!(p->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV)) {
		take_table(f, i, data, len);
		return UCS_OK;
	}
	if (len > sizeof(struct peer_table_hdr) + (size_t)f->ntensors * sizeof(struct peer_tstate) ||
	    !(t = calloc(1, sizeof(*t))) || !(t->buf = malloc(len))) {
		if (len <= sizeof(struct peer_table_hdr) + (size_t)f->ntensors * sizeof(struct peer_tstate))
			free(t);
		fio_kill(f, i, "sent a table too large");
		return UCS_OK;
	}
	t->f = f;
	t->peer = i;
	t->len = len;
	t->ep = f->peers[i].ep;
	rp.cb.recv_am = table_recv_done;
	rp.user_data = t;
	req = ucp_am_recv_data_nbx(f->worker, data, t->buf, len, &rp);
	if (req == NULL)
		table_recv_done(NULL, UCS_OK, len, t);
	else if (UCS_PTR_IS_ERR(req))
		table_recv_done(NULL, UCS_PTR_STATUS(req), 0, t);
	return UCS_OK;
}

/* A Challenge: answered with our Proof. */
static ucs_status_t on_challenge(void *arg, const void *hdr, size_t hlen, void *data, size_t len,
				 const ucp_am_recv_param_t *p)
{
	struct fio *f = arg;
	struct peer_challenge ch;
	struct fpeer *fp;
	size_t i;

	(void)hdr;
	if (!(fp = peer_of(f, p, &i)))
		return UCS_OK;
	if (hlen || fp->st != FP_HELLO ||
	    !peer_ucx_record(p, data, len, &ch, sizeof(ch)) || ch.magic != PEER_MAGIC) {
		fio_kill(f, i, "sent a malformed Challenge");
		return UCS_OK;
	}
	memcpy(fp->auth.server_nonce, ch.nonce, PEER_NONCE_LEN);
	fp->proof = (struct peer_proof){ .magic = PEER_MAGIC };
	if (peer_auth_mac(f->trust, PEER_SIDE_FILLER, &fp->auth, fp->proof.mac) < 0) {
		refuse(f, i, "no peer token to prove");
		return UCS_OK;
	}
	fpeer_to(f, fp, FP_PROVED);
	send_to(f, i, PEER_AM_PROOF, NULL, 0, &fp->proof, sizeof(fp->proof));
	return UCS_OK;
}

/* A piece is in s->dst: written into the arena when that is a landing
 * buffer. 0 or a negative errno. */
static int land(struct fio *f, struct fslot *s)
{
	struct errinfo e;
	int r;

	if (!arena_fills_by_write(f->dest.arena))
		return 0;
	if ((r = arena_write(f->dest.arena, s->seg, s->seg_off, s->dst, s->len, &e)) < 0)
		log_warn("peers: %s", e.msg);
	return r;
}

static void data_recv_done(void *req, ucs_status_t st, size_t len, void *arg)
{
	struct fslot *s = arg;

	(void)len;
	slot_done(s->f, s, st == UCS_OK ? land(s->f, s) : -ECONNRESET);
	if (req)
		ucp_request_free(req);
}

static struct fslot *slot_of(struct fio *f, uint64_t id, size_t peer)
{
	struct fslot *s = &f->slots[id & 0xffff];

	if ((id & 0xffff) >= FIO_MAX_SLOTS || s->id != id || s->st != FS_WAIT || s->done ||
	    s->peer != (int)peer)
		return NULL;
	return s;
}

static ucs_status_t on_data(void *arg, const void *hdr, size_t hlen, void *data, size_t len,
			    const ucp_am_recv_param_t *p)
{
	struct fio *f = arg;
	ucp_request_param_t rp = { .op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA };
	struct peer_data dd, *d = &dd;
	struct fslot *s;
	size_t i;
	void *req;

	if (hlen != sizeof(dd))
		return UCS_OK;
	memcpy(&dd, hdr, sizeof(dd)); /* unaligned in the message */
	if (!peer_of(f, p, &i) || !(s = slot_of(f, d->req, i)))
		return UCS_OK; /* late, or not ours: dropped */
	if (d->status < 0 || d->len != s->len || len != s->len) {
		slot_done(f, s, d->status < 0 ? d->status : -EBADMSG);
		return UCS_OK;
	}
	if (!(p->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV)) {
		memcpy(s->dst, data, len);
		slot_done(f, s, land(f, s));
		return UCS_OK;
	}
	fslot_to(s, FS_RECV);
	rp.cb.recv_am = data_recv_done;
	rp.user_data = s;
	req = ucp_am_recv_data_nbx(f->worker, data, s->dst, len, &rp);
	if (req == NULL)
		slot_done(f, s, land(f, s));
	else if (UCS_PTR_IS_ERR(req))
		slot_done(f, s, -ECONNRESET);
	return UCS_OK;
}

static void on_ep_error(void *arg, ucp_ep_h ep, ucs_status_t st)
{
	struct fio *f = arg;
	char why[96];

	/* An ep being closed to try again (refused "not loaded yet") is
	 * reset by the peer as it closes: that is not a failure. */
	for (size_t i = 0; i < f->npeers; i++)
		if (f->peers[i].ep == ep && f->peers[i].st != FP_DEAD && f->peers[i].st != FP_IDLE) {
			snprintf(why, sizeof(why), "connection lost (%s)", ucs_status_string(st));
			fio_kill(f, i, why);
		}
}

int fio_init(struct fio *f, struct fpeer *peers, size_t npeers, const struct peer_hello *hello,
	     const struct peer_trust *trust, const struct fio_dest *dest, struct errinfo *e)
{
	int r;

	memset(f, 0, sizeof(*f));
	f->peers = peers;
	f->npeers = npeers;
	f->hello = hello;
	f->trust = trust;
	f->dest = *dest;
	bounce_init(&f->bounce, dest->chunk, npeers * FIO_SLOTS_PER_PEER * (size_t)dest->chunk);
	f->ntensors = hello->ntensors;
	for (uint32_t i = 0; i < FIO_MAX_SLOTS; i++) {
		f->slots[i] = (struct fslot){ .f = f, .id = i, .buf = -1 };
		f->free_slots[f->nfree++] = FIO_MAX_SLOTS - 1 - i;
	}
	if ((r = peer_ucx_open(true, &f->ctx, &f->worker, e)) < 0)
		return r;
	if (ucp_worker_get_efd(f->worker, &f->efd) != UCS_OK)
		return err_set(e, -EIO, "peers: UCX: cannot get the worker's event fd");
	if (peer_ucx_handler(f->worker, PEER_AM_TABLE, on_table, f) < 0 ||
	    peer_ucx_handler(f->worker, PEER_AM_CHALLENGE, on_challenge, f) < 0 ||
	    peer_ucx_handler(f->worker, PEER_AM_DATA, on_data, f) < 0)
		return err_set(e, -EIO, "peers: UCX: cannot set the message handlers");
	return 0;
}

/* Closes ep and waits: its landing pieces fail during this progress. */
static void close_ep(struct fio *f, ucp_ep_h ep)
{
	void *req = peer_ucx_close(ep);

	while (req && ucp_request_check_status(req) == UCS_INPROGRESS)
		ucp_worker_progress(f->worker);
	if (req)
		ucp_request_free(req);
}

void fio_fini(struct fio *f)
{
	for (size_t i = 0; i < f->npeers; i++)
		if (f->peers[i].ep) {
			close_ep(f, f->peers[i].ep);
			f->peers[i].ep = NULL;
		}
	if (f->worker)
		ucp_worker_destroy(f->worker);
	if (f->ctx)
		ucp_cleanup(f->ctx);
	f->worker = NULL;
	f->ctx = NULL;
	bounce_fini(&f->bounce);
}

static void send_free(void *req, ucs_status_t st, void *arg)
{
	(void)st;
	(void)arg;
	ucp_request_free(req);
}

/* Sends an active message to peer i; false (and the peer killed) when it
 * cannot be sent. The header and data must live until sent: they are the
 * peer's or the slot's. */
static bool send_to(struct fio *f, size_t i, unsigned id, const void *hdr, size_t hlen,
		    const void *data, size_t len)
{
	ucp_request_param_t p = { .op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_FLAGS,
				  .cb.send = send_free, .flags = UCP_AM_SEND_FLAG_REPLY };
	void *req = ucp_am_send_nbx(f->peers[i].ep, id, hdr, hlen, data, len, &p);

	if (UCS_PTR_IS_ERR(req)) {
		fio_kill(f, i, ucs_status_string(UCS_PTR_STATUS(req)));
		return false;
	}
	return true;
}

void fio_connect(struct fio *f, size_t i)
{
	struct fpeer *fp = &f->peers[i];
	ucp_ep_params_t ep = { .field_mask = UCP_EP_PARAM_FIELD_FLAGS | UCP_EP_PARAM_FIELD_SOCK_ADDR |
			       UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE | UCP_EP_PARAM_FIELD_ERR_HANDLER,
			       .flags = UCP_EP_PARAMS_FLAGS_CLIENT_SERVER,
			       .sockaddr = { (const struct sockaddr *)&fp->ss, fp->sl },
			       .err_mode = UCP_ERR_HANDLING_MODE_PEER,
			       .err_handler = { .cb = on_ep_error, .arg = f } };
	ucs_status_t st = ucp_ep_create(f->worker, &ep, &fp->ep);

	if (st != UCS_OK) {
		fp->ep = NULL;
		fp->next_try = mono_now() + 0.2;
		snprintf(fp->why, sizeof(fp->why), "cannot connect: %s", ucs_status_string(st));
		return;
	}
	fp->hello = *f->hello;
	if (peer_auth_nonce(fp->hello.nonce) < 0) {
		refuse(f, i, "no random bytes for a nonce");
		return;
	}
	fp->auth = (struct peer_auth_ctx){ .layout = fp->hello.layout };
	memcpy(fp->auth.filler_nonce, fp->hello.nonce, PEER_NONCE_LEN);
	memcpy(fp->auth.model, fp->hello.model, sizeof(fp->auth.model));
	fpeer_to(f, fp, FP_HELLO);
	fp->asking = true;
	fp->asked = mono_now();
	send_to(f, i, PEER_AM_HELLO, NULL, 0, &fp->hello, sizeof(fp->hello));
}

void fio_status(struct fio *f, size_t i)
{
	static const struct peer_status_req req = { PEER_MAGIC };

	if (f->peers[i].st != FP_READY || f->peers[i].asking)
		return;
	f->peers[i].asking = true;
	f->peers[i].asked = mono_now();
	send_to(f, i, PEER_AM_STATUS, &req, sizeof(req), NULL, 0);
}

/* Peer i is dead (why), or, again_ok, tried again while its time to
 * come up lasts. */
static void kill_peer(struct fio *f, size_t i, const char *why, bool again_ok)
{
	struct fpeer *fp = &f->peers[i];

	if (fp->st == FP_DEAD)
		return;
	/* Not up yet (a fleet starting together): try again until its time
	 * is up. */
	if ((fp->st == FP_HELLO || fp->st == FP_PROVED) && again_ok && mono_now() < fp->connect_until) {
		log_debug("peer %s: %s; trying again", fp->name, why);
		if (why != fp->why)
			snprintf(fp->why, sizeof(fp->why), "%s", why);
		fpeer_to(f, fp, FP_IDLE);
		fp->asking = false;
		fp->next_try = mono_now() + 0.25;
		fp->close_pending = fp->ep != NULL;
		return;
	}
	log_warn("peer %s: %s", fp->name, why);
	fp->src->failures++;
	if (why != fp->why)
		snprintf(fp->why, sizeof(fp->why), "%s", why);
	fpeer_to(f, fp, FP_DEAD);
	fp->asking = false;
	f->changed = true;
	/* Gets not answered fail now; landing ones fail when the forced
	 * close completes them. */
	for (uint32_t k = 0; k < FIO_MAX_SLOTS; k++) {
		struct fslot *s = &f->slots[k];
		if (s->st == FS_WAIT && !s->done && s->peer == (int)i)
			slot_done(f, s, -ECONNRESET);
	}
	/* Closed by fio_progress: this may run inside a UCX callback, where
	 * progress must not be called. */
	fp->close_pending = fp->ep != NULL;
}

void fio_kill(struct fio *f, size_t i, const char *why)
{
	kill_peer(f, i, why, true);
}

/* Peer i said no, or cannot be proved to: dead for good. */
static void refuse(struct fio *f, size_t i, const char *why)
{
	kill_peer(f, i, why, false);
}

int fio_get(struct fio *f, int peer, uint32_t tensor, uint64_t off, uint32_t len, uint32_t seg,
	    uint64_t seg_off)
{
	struct fslot *s;
	uint8_t *dst;
	int buf = -1;

	if (f->nfree == 0 || f->peers[peer].slots >= FIO_SLOTS_PER_PEER)
		return -EBUSY;
	if (!arena_fills_by_write(f->dest.arena))
		dst = f->dest.map[seg] + seg_off;
	else if ((buf = bounce_get(&f->bounce, len, &dst)) < 0)
		return -EBUSY;
	s = &f->slots[f->free_slots[--f->nfree]];
	s->id += 1u << 16;
	fslot_to(s, FS_WAIT);
	s->tensor = tensor;
	s->off = off;
	s->len = len;
	s->peer = peer;
	s->seg = seg;
	s->seg_off = seg_off;
	s->dst = dst;
	s->buf = buf;
	s->status = 0;
	s->sent = mono_now();
	s->done = false;
	s->get = (struct peer_get){ .req = s->id, .tensor = tensor, .len = len, .off = off };
	f->peers[peer].slots++;
	send_to(f, (size_t)peer, PEER_AM_GET, &s->get, sizeof(s->get), NULL, 0);
	return 0;
}

void fio_release(struct fio *f, struct fslot *s)
{
	bounce_put(&f->bounce, s->buf);
	s->buf = -1;
	fslot_to(s, FS_FREE);
	s->done = false;
	f->free_slots[f->nfree++] = (uint32_t)(s - f->slots);
}

void fio_wait(struct fio *f, int ms)
{
	struct pollfd pf = { .fd = f->efd, .events = POLLIN };

	/* BUSY: events came after the last progress; go round again. */
	if (ucp_worker_arm(f->worker) == UCS_OK)
		(void)poll(&pf, 1, ms);
}

bool fio_progress(struct fio *f)
{
	double now = mono_now();
	bool any = false;

	while (ucp_worker_progress(f->worker))
		any = true;
	/* A piece not landed in time: its peer is as good as dead (one that
	 * sends each piece just in time would keep a fill going for ever). */
	for (uint32_t k = 0; k < FIO_MAX_SLOTS; k++) {
		const struct fslot *s = &f->slots[k];
		if (s->st != FS_FREE && !s->done && now - s->sent > FIO_PIECE_TIMEOUT)
			fio_kill(f, (size_t)s->peer, "sent no piece within 10 s of asking; the rest from other peers or the files");
	}
	for (size_t i = 0; i < f->npeers; i++) {
		struct fpeer *fp = &f->peers[i];
		if (fp->asking && now - fp->asked > FIO_REPLY_TIMEOUT)
			fio_kill(f, i, "did not answer within 10 s");
		if (fp->close_pending) {
			fp->close_pending = false;
			close_ep(f, fp->ep);
			fp->ep = NULL;
			any = true;
		}
	}
	return any;
}
