// SPDX-License-Identifier: MIT
/* peer_engine.c - the serving side of host-to-host fills, in the peer
 * process (peer_child.c): UCX, the connections, the tables offered. */
#include "peer_engine.h"

#include <assert.h>
#include <errno.h>
#include <poll.h>
#include <stdarg.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <ucp/api/ucp.h>
#include <unistd.h>

#include "clock.h"
#include "log.h"
#include "peer_bounce.h"
#include "peer_proto.h"
#include "peer_thread.h"
#include "peer_ucx.h"
#include "utf8.h"
#include "lifecycle.h"
#include "test_seam.h"

struct ptab {
	struct peer_table *t;
	uint32_t users;             /* connections bound + replies in flight */
	bool retired;               /* replaced; freed when users reaches 0 */
};

/* A filler's connection: CS_HELLO (its Hello awaited) -> CS_CHALLENGED
 * (Challenge sent) -> CS_SERVING (its Proof right, a model bound); any of
 * them -> CS_REFUSING (a refusal sent: closed once it is out and
 * PEER_REFUSE_GRACE has passed) -> CS_CLOSING, or straight to CS_CLOSING.
 * Its moves: conn_to. */
enum conn_state { CS_HELLO, CS_CHALLENGED, CS_SERVING, CS_REFUSING, CS_CLOSING, CONN_STATE_MAX };

struct conn {
	ucp_ep_h ep;
	enum conn_state st;
	char addr[64];
	double since;
	struct ptab *tab;           /* bound once its Proof is right */
	struct peer_auth_ctx auth;  /* both nonces, the model, its layout */
	uint32_t ntensors;          /* the filler's, from its Hello */
	struct peer_challenge chal; /* alive while sent */
	uint32_t sends;             /* replies in flight */
	double close_at;            /* CS_REFUSING: when to close (0: its refusal not out yet) */
	uint64_t bytes;
};

struct send_ctx {
	struct peer_engine *ps;
	struct conn *c;
	struct ptab *tab;
	void *copy;                 /* owned: a corrupted copy (tests) */
	int buf;                    /* the bounce buffer sent from, or -1 */
	struct peer_data h;
};

struct peer_engine {
	struct peer_trust trust;
	ucp_context_h ctx;
	ucp_worker_h worker;
	ucp_listener_h listener;    /* NULL while the address is busy */
	struct sockaddr_storage addr;
	socklen_t addr_len;
	char addr_str[64];
	double listen_until;        /* while busy: when to give up, else 0 */
	int efd;
	struct peer_thread th;      /* the serving thread */
	struct conn *conns[PEER_MAX_CONNS];
	struct ptab *tabs[PEER_MAX_TABLES * 2]; /* current and retired */
	pthread_mutex_t lock;       /* guards pending, withdraw and expect */
	struct peer_table *pending[PEER_MAX_TABLES];
	size_t npending;
	char withdraw[PEER_MAX_TABLES][128]; /* guarded by lock: models no longer offered */
	size_t nwithdraw;
	struct peer_serve_counters *cnt; /* shared with wsrvd (peer_child.h) */
	char expect[PEER_MAX_TABLES][128]; /* guarded by lock: models to come */
	size_t nexpect;
	unsigned offer_delay_ms;    /* WSRV_TEST_PEER_OFFER_DELAY_MS: before every offer */
	bool corrupt;               /* WSRV_TEST_PEER_CORRUPT: flip a byte in every piece */
	struct bounce_pool bounce;  /* serve thread: pieces read from 4 KiB arenas */
	double idle_since;          /* no send in flight since (0: some are) */
	uint32_t sends;             /* replies in flight, all connections */
	unsigned delay_ms;          /* WSRV_TEST_PEER_DELAY_MS: before every piece */
};

/* The counters live in memory wsrvd reads, and the accept filter
 * (peer_accept.c) adds to refused from UCX's own thread: every change is
 * atomic, none under the engine's lock. */
static void serve_count(uint64_t *field, uint64_t n)
{
	__atomic_add_fetch(field, n, __ATOMIC_RELAXED);
}

static void tab_put(struct peer_engine *ps, struct ptab *pt)
{
	if (!pt || --pt->users || !pt->retired)
		return;
	for (size_t i = 0; i < PEER_MAX_TABLES * 2; i++)
		if (ps->tabs[i] == pt)
			ps->tabs[i] = NULL;
	peer_table_free(pt->t);
	free(pt);
}

static struct ptab *tab_find(struct peer_engine *ps, const char *name)
{
	for (size_t i = 0; i < PEER_MAX_TABLES * 2; i++)
		if (ps->tabs[i] && !ps->tabs[i]->retired && strcmp(ps->tabs[i]->t->name, name) == 0)
			return ps->tabs[i];
	return NULL;
}

/* Takes the tables offered since the last turn (serve thread only). */
static void retire(struct peer_engine *ps, struct ptab *old)
{
	if (!old)
		return;
	old->retired = true;
	old->users++;
	tab_put(ps, old);
}

static void install_pending(struct peer_engine *ps)
{
	pthread_mutex_lock(&ps->lock);
	for (size_t k = 0; k < ps->nwithdraw; k++)
		retire(ps, tab_find(ps, ps->withdraw[k]));
	ps->nwithdraw = 0;
	for (size_t k = 0; k < ps->npending; k++) {
		struct peer_table *t = ps->pending[k];
		struct ptab *old = tab_find(ps, t->name), *pt = calloc(1, sizeof(*pt));
		size_t i = 0;

		while (i < PEER_MAX_TABLES * 2 && ps->tabs[i])
			i++;
		if (!pt || i == PEER_MAX_TABLES * 2) {
			log_warn("peers: no room to offer model %s", t->name);
			peer_table_free(t);
			free(pt);
			continue;
		}
		retire(ps, old);
		pt->t = t;
		pt->users = 1; /* the offer itself, until retired */
		ps->tabs[i] = pt;
	}
	ps->npending = 0;
	pthread_mutex_unlock(&ps->lock);
}

static const char *const conn_names[CONN_STATE_MAX] = {
	[CS_HELLO] = "hello", [CS_CHALLENGED] = "challenged", [CS_SERVING] = "serving",
	[CS_REFUSING] = "refusing", [CS_CLOSING] = "closing",
};

static const unsigned conn_moves[CONN_STATE_MAX] = {
	[CS_HELLO] = LIFE_BIT(CS_CHALLENGED) | LIFE_BIT(CS_REFUSING) | LIFE_BIT(CS_CLOSING),
	[CS_CHALLENGED] = LIFE_BIT(CS_SERVING) | LIFE_BIT(CS_REFUSING) | LIFE_BIT(CS_CLOSING),
	[CS_SERVING] = LIFE_BIT(CS_REFUSING) | LIFE_BIT(CS_CLOSING),
	[CS_REFUSING] = LIFE_BIT(CS_CLOSING),
	[CS_CLOSING] = 0,
};

static const struct lifecycle conn_life = { "peer connection", CONN_STATE_MAX, conn_names, conn_moves };

/* The one place a peer connection's state changes (lifecycle.h). */
static void conn_to(struct conn *c, enum conn_state to)
{
	if (life_check(&conn_life, c->bytes, c->st, to) == 0)
		c->st = to;
}

static struct conn *conn_of(struct peer_engine *ps, ucp_ep_h ep)
{
	for (size_t i = 0; i < PEER_MAX_CONNS; i++)
		if (ps->conns[i] && ps->conns[i]->ep == ep && ps->conns[i]->st != CS_CLOSING)
			return ps->conns[i];
	return NULL;
}

/* The open connection a message came on (its reply endpoint), or NULL. */
static struct conn *sender(struct peer_engine *ps, const ucp_am_recv_param_t *p)
{
	return (p->recv_attr & UCP_AM_RECV_ATTR_FIELD_REPLY_EP) ? conn_of(ps, p->reply_ep) : NULL;
}

static void conn_close(struct conn *c)
{
	void *req;

	if (c->st == CS_CLOSING)
		return;
	conn_to(c, CS_CLOSING);
	if ((req = peer_ucx_close(c->ep)))
		ucp_request_free(req);
}

/* Frees closed connections once their replies are done (serve thread). */
static void reap(struct peer_engine *ps)
{
	double now = mono_now();

	for (size_t i = 0; i < PEER_MAX_CONNS; i++) {
		struct conn *c = ps->conns[i];
		if (!c)
			continue;
		if (c->st == CS_REFUSING && c->close_at && now >= c->close_at)
			conn_close(c);
		if (!c->tab && c->st != CS_CLOSING && now - c->since > PEER_HELLO_TIMEOUT) {
			log_info("peer %s: no proven Hello within %.0f s; closed", c->addr, PEER_HELLO_TIMEOUT);
			conn_close(c);
		}
		if (c->st != CS_CLOSING || c->sends)
			continue;
		tab_put(ps, c->tab);
		ps->conns[i] = NULL;
		__atomic_sub_fetch(&ps->cnt->conns, 1, __ATOMIC_RELAXED);
		free(c);
	}
}

static void send_done(void *req, ucs_status_t st, void *arg)
{
	struct send_ctx *s = arg;

	(void)st;
	s->c->sends--;
	s->ps->sends--;
	bounce_put(&s->ps->bounce, s->buf);
	/* Not at once: a forced close resets the connection, and the filler's
	 * side dropped the refusal it had not read yet (test_peer_auth saw
	 * "connection lost" instead of the sentence, one run in ten). */
	if (s->c->st == CS_REFUSING && s->c->sends == 0)
		s->c->close_at = mono_now() + PEER_REFUSE_GRACE;
	tab_put(s->ps, s->tab);
	free(s->copy);
	free(s);
	if (req)
		ucp_request_free(req);
}

/* A send's context, or NULL when out of memory. */
static struct send_ctx *send_ctx_new(struct peer_engine *ps)
{
	struct send_ctx *s = calloc(1, sizeof(*s));

	if (s) {
		s->ps = ps;
		s->buf = -1;
	}
	return s;
}

/* Sends header + data (data may be NULL) to c; s is owned by the send. */
static void send_am(struct conn *c, unsigned id, struct send_ctx *s, size_t hlen,
		    const void *data, size_t len)
{
	/* REPLY: the filler learns which of its peers answered. */
	ucp_request_param_t p = { .op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK |
				  UCP_OP_ATTR_FIELD_USER_DATA | UCP_OP_ATTR_FIELD_FLAGS |
				  UCP_OP_ATTR_FLAG_NO_IMM_CMPL,
				  .cb.send = send_done, .user_data = s, .flags = UCP_AM_SEND_FLAG_REPLY };
	void *req;

	s->c = c;
	c->sends++;
	s->ps->sends++;
	if (s->tab)
		s->tab->users++;
	req = ucp_am_send_nbx(c->ep, id, hlen ? &s->h : NULL, hlen, data, len, &p);
	if (UCS_PTR_IS_ERR(req)) {
		log_info("peer %s: send failed: %s", c->addr, ucs_status_string(UCS_PTR_STATUS(req)));
		send_done(NULL, UCS_PTR_STATUS(req), s);
		conn_close(c);
	}
}

/* The table of c's model: what is ready or coming, and the checksums, as
 * of now; one message, a peer_table_hdr and the entries. */
static void send_table(struct peer_engine *ps, struct conn *c, int status, const char *msg)
{
	struct send_ctx *s = send_ctx_new(ps);
	uint32_t n = status == 0 ? c->tab->t->ntensors : 0;
	size_t len = sizeof(struct peer_table_hdr) + (size_t)n * sizeof(struct peer_tstate);
	struct peer_table_hdr *h = malloc(len);
	struct peer_tstate *st = (struct peer_tstate *)(h + 1);

	if (!s || !h) {
		free(s);
		free(h);
		conn_close(c);
		return;
	}
	s->copy = h;
	*h = (struct peer_table_hdr){ .magic = PEER_MAGIC, .status = status, .ntensors = n };
	snprintf(h->msg, sizeof(h->msg), "%s", msg ? msg : "");
	if (status == 0 && peer_auth_mac(&ps->trust, PEER_SIDE_SERVER, &c->auth, h->mac) < 0) {
		free(h);
		free(s);
		conn_close(c);
		return;
	}
	for (uint32_t i = 0; i < n; i++) {
		st[i].ready = peer_table_state(c->tab->t, i);
		st[i].xxh3 = st[i].ready == PEER_READY ? c->tab->t->xxh3[i] : 0;
	}
	send_am(c, PEER_AM_TABLE, s, 0, h, len);
}

static void serve_refuse(struct peer_engine *ps, struct conn *c, int status, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));
static void serve_refuse(struct peer_engine *ps, struct conn *c, int status, const char *fmt, ...)
{
	char msg[160];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	log_warn("peer %s: refused: %s", c->addr, msg);
	serve_count(&ps->cnt->refused, 1);
	if (c->st < CS_REFUSING) /* one closing already stays so */
		conn_to(c, CS_REFUSING);
	send_table(ps, c, status, msg);
}

static bool expected(struct peer_engine *ps, const char *name)
{
	bool yes = false;

	pthread_mutex_lock(&ps->lock);
	for (size_t i = 0; i < ps->nexpect && !yes; i++)
		yes = strcmp(ps->expect[i], name) == 0;
	pthread_mutex_unlock(&ps->lock);
	return yes;
}

/* The model c's proven Hello named: bound, or refused with why. */
static int bind_model(struct peer_engine *ps, struct conn *c)
{
	const char *name = c->auth.model;
	struct ptab *pt = tab_find(ps, name);

	if (!pt && expected(ps, name))
		return serve_refuse(ps, c, -EAGAIN, "model '%.*s' is not loaded here yet", UTF8_CUT(name, 100)), -1;
	if (!pt)
		return serve_refuse(ps, c, -ENOENT, "no model '%.*s' here", UTF8_CUT(name, 100)), -1;
	if (pt->t->layout != c->auth.layout || pt->t->ntensors != c->ntensors)
		return serve_refuse(ps, c, -ESTALE, "model '%.*s' here is another generation or layout (other files, a published generation, or other load options)", UTF8_CUT(name, 100)), -1;
	c->tab = pt;
	pt->users++;
	return 0;
}

static void malformed(struct peer_engine *ps, struct conn *c, const char *what)
{
	log_warn("peer %s: refused: a malformed %s", c->addr, what);
	serve_count(&ps->cnt->refused, 1);
	conn_close(c);
}

/* Hello: a protocol 1 filler (the token in the clear) is told why not;
 * a protocol 2 one gets a Challenge. */
static ucs_status_t on_hello(void *arg, const void *hdr, size_t hlen, void *data, size_t len,
			     const ucp_am_recv_param_t *p)
{
	struct peer_engine *ps = arg;
	struct conn *c = sender(ps, p);
	struct peer_hello_start hs;
	struct send_ctx *sc;
	struct peer_hello h;

	(void)hdr;
	if (!c)
		return UCS_OK;
	if (c->st != CS_HELLO || hlen || len < sizeof(hs) || (p->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV))
		return malformed(ps, c, "Hello"), UCS_OK;
	memcpy(&hs, data, sizeof(hs));
	if (hs.magic == PEER_MAGIC && hs.version == 1)
		return serve_refuse(ps, c, -EPROTONOSUPPORT, "%s",
			      "peer protocol 1 sends the token in the clear; this host wants protocol 2 "
			      "(a challenge and response): update wsrvd on the filling host"), UCS_OK;
	if (hs.magic != PEER_MAGIC || hs.version != PEER_VERSION)
		return serve_refuse(ps, c, -EPROTONOSUPPORT, "%s", "another peer protocol version"), UCS_OK;
	if (!peer_ucx_record(p, data, len, &h, sizeof(h)) || !memchr(h.model, 0, sizeof(h.model)))
		return malformed(ps, c, "Hello"), UCS_OK;
	memcpy(c->auth.filler_nonce, h.nonce, PEER_NONCE_LEN);
	memcpy(c->auth.model, h.model, sizeof(h.model));
	c->auth.layout = h.layout;
	c->ntensors = h.ntensors;
	if (peer_auth_nonce(c->auth.server_nonce) < 0)
		return serve_refuse(ps, c, -EIO, "%s", "no random bytes for a challenge here"), UCS_OK;
	c->chal = (struct peer_challenge){ .magic = PEER_MAGIC };
	memcpy(c->chal.nonce, c->auth.server_nonce, PEER_NONCE_LEN);
	conn_to(c, CS_CHALLENGED);
	if (!(sc = send_ctx_new(ps)))
		return conn_close(c), UCS_OK;
	send_am(c, PEER_AM_CHALLENGE, sc, 0, &c->chal, sizeof(c->chal));
	return UCS_OK;
}

/* Proof: the token is proven, or the filler is refused. */
static ucs_status_t on_proof(void *arg, const void *hdr, size_t hlen, void *data, size_t len,
			     const ucp_am_recv_param_t *p)
{
	struct peer_engine *ps = arg;
	struct conn *c = sender(ps, p);
	struct peer_proof q;

	(void)hdr;
	if (!c)
		return UCS_OK;
	if (c->st != CS_CHALLENGED || hlen || !peer_ucx_record(p, data, len, &q, sizeof(q)) || q.magic != PEER_MAGIC)
		return malformed(ps, c, "Proof"), UCS_OK;
	if (!peer_auth_ok(&ps->trust, PEER_SIDE_FILLER, &c->auth, q.mac))
		return serve_refuse(ps, c, -EACCES, "%s", "wrong token"), UCS_OK;
	if (bind_model(ps, c) < 0)
		return UCS_OK;
	conn_to(c, CS_SERVING);
	log_info("peer %s: filling model %s", c->addr, c->tab->t->name);
	send_table(ps, c, 0, NULL);
	return UCS_OK;
}

static ucs_status_t on_status(void *arg, const void *hdr, size_t hlen, void *data, size_t len,
			      const ucp_am_recv_param_t *p)
{
	struct peer_engine *ps = arg;
	struct conn *c = sender(ps, p);
	struct peer_status_req q = { 0 };

	(void)data;
	if (hlen == sizeof(q))
		memcpy(&q, hdr, sizeof(q));
	if (c && (!c->tab || hlen != sizeof(q) || len || q.magic != PEER_MAGIC || c->sends >= PEER_MAX_SENDS))
		conn_close(c);
	else if (c)
		send_table(ps, c, 0, NULL);
	return UCS_OK;
}

/* A piece's answer: its bytes, or a status. */
static void serve_get(struct peer_engine *ps, struct conn *c, const struct peer_get *g)
{
	const struct peer_table *t = c->tab->t;
	struct send_ctx *s = send_ctx_new(ps);
	const uint8_t *src = NULL;
	uint8_t *b;
	int status = 0;

	if (!s)
		return conn_close(c);
	if (g->tensor >= t->ntensors || g->len > PEER_MAX_CHUNK || g->len == 0 ||
	    g->off > t->t[g->tensor].size || g->len > t->t[g->tensor].size - g->off)
		status = -ERANGE;
	else if (peer_table_state(t, g->tensor) != PEER_READY)
		status = -EAGAIN;
	else
		src = peer_table_ptr(t, g->tensor, g->off);
	s->h = (struct peer_data){ .req = g->req, .status = status, .len = status ? 0 : g->len };
	if (src && t->fd && (s->buf = bounce_get(&ps->bounce, g->len, &b)) >= 0) {
		/* Busy pool or a failed read: sent from the mapping. */
		if (peer_table_read(t, g->tensor, g->off, b, g->len) == 0)
			src = b;
		else
			bounce_put(&ps->bounce, s->buf), s->buf = -1;
	}
	if (src && ps->corrupt && (s->copy = malloc(g->len))) {
		memcpy(s->copy, src, g->len);
		((uint8_t *)s->copy)[g->len / 2] ^= 0x5a;
		src = s->copy;
	}
	if (src && ps->delay_ms)
		usleep(ps->delay_ms * 1000u);
	s->tab = src ? c->tab : NULL;
	send_am(c, PEER_AM_DATA, s, sizeof(s->h), src, src ? g->len : 0);
	if (src) {
		c->bytes += g->len;
		serve_count(&ps->cnt->bytes_served, g->len);
		serve_count(&ps->cnt->gets, 1);
	}
}

static ucs_status_t on_get(void *arg, const void *hdr, size_t hlen, void *data, size_t len,
			   const ucp_am_recv_param_t *p)
{
	struct peer_engine *ps = arg;
	struct conn *c = sender(ps, p);
	struct peer_get g;

	(void)data;
	if (!c)
		return UCS_OK;
	if (!c->tab || hlen != sizeof(g) || len || c->sends >= PEER_MAX_SENDS) {
		log_info("peer %s: a request out of turn or over the limit; closed", c->addr);
		conn_close(c);
		return UCS_OK;
	}
	memcpy(&g, hdr, sizeof(g));
	serve_get(ps, c, &g);
	return UCS_OK;
}

static void on_ep_error(void *arg, ucp_ep_h ep, ucs_status_t st)
{
	struct peer_engine *ps = arg;
	struct conn *c = conn_of(ps, ep);

	if (c) {
		log_info("peer %s: connection lost (%s)", c->addr, ucs_status_string(st));
		conn_close(c);
	}
}

static void accept_conn(struct peer_engine *ps, ucp_conn_request_h req, const char *addr)
{
	ucp_ep_params_t ep = { .field_mask = UCP_EP_PARAM_FIELD_CONN_REQUEST |
			       UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE | UCP_EP_PARAM_FIELD_ERR_HANDLER,
			       .conn_request = req, .err_mode = UCP_ERR_HANDLING_MODE_PEER,
			       .err_handler = { .cb = on_ep_error, .arg = ps } };
	struct conn *c = calloc(1, sizeof(*c));
	size_t i = 0;

	while (i < PEER_MAX_CONNS && ps->conns[i])
		i++;
	if (!c || i == PEER_MAX_CONNS || ucp_ep_create(ps->worker, &ep, &c->ep) != UCS_OK) {
		if (!c || i == PEER_MAX_CONNS)
			ucp_listener_reject(ps->listener, req);
		log_warn("peer %s: refused: %s", addr, c ? "too many peer connections" : "out of memory");
		serve_count(&ps->cnt->refused, 1);
		free(c);
		return;
	}
	snprintf(c->addr, sizeof(c->addr), "%s", addr);
	c->since = mono_now();
	ps->conns[i] = c;
	__atomic_add_fetch(&ps->cnt->conns, 1, __ATOMIC_RELAXED);
}

static void on_conn(ucp_conn_request_h req, void *arg)
{
	struct peer_engine *ps = arg;
	ucp_conn_request_attr_t a = { .field_mask = UCP_CONN_REQUEST_ATTR_FIELD_CLIENT_ADDR };
	char addr[64] = "?";

	if (ucp_conn_request_query(req, &a) != UCS_OK ||
	    !peer_trust_allowed(&ps->trust, (const struct sockaddr *)&a.client_address)) {
		if (a.field_mask)
			peer_addr_str((const struct sockaddr *)&a.client_address, addr, sizeof(addr));
		peer_refusal_log(addr, "by UCX");
		serve_count(&ps->cnt->refused, 1);
		ucp_listener_reject(ps->listener, req);
		return;
	}
	peer_addr_str((const struct sockaddr *)&a.client_address, addr, sizeof(addr));
	accept_conn(ps, req, addr);
}

static int setup_ucx(struct peer_engine *ps, struct errinfo *e)
{
	ucs_status_t st;
	int r;

	if ((r = peer_ucx_open(true, &ps->ctx, &ps->worker, e)) < 0)
		return r;
	if (peer_ucx_handler(ps->worker, PEER_AM_HELLO, on_hello, ps) < 0 ||
	    peer_ucx_handler(ps->worker, PEER_AM_PROOF, on_proof, ps) < 0 ||
	    peer_ucx_handler(ps->worker, PEER_AM_STATUS, on_status, ps) < 0 ||
	    peer_ucx_handler(ps->worker, PEER_AM_GET, on_get, ps) < 0)
		return err_set(e, -EIO, "peers: UCX: cannot set the message handlers");
	if ((st = ucp_worker_get_efd(ps->worker, &ps->efd)) != UCS_OK)
		return err_set(e, -EIO, "peers: UCX: ucp_worker_get_efd: %s", ucs_status_string(st));
	return 0;
}

static int listen_on(struct peer_engine *ps, struct errinfo *e)
{
	ucp_listener_params_t lp = { .field_mask = UCP_LISTENER_PARAM_FIELD_SOCK_ADDR |
				     UCP_LISTENER_PARAM_FIELD_CONN_HANDLER,
				     .sockaddr = { (const struct sockaddr *)&ps->addr, ps->addr_len },
				     .conn_handler = { on_conn, ps } };
	ucs_status_t st = ucp_listener_create(ps->worker, &lp, &ps->listener);

	if (st != UCS_OK)
		return err_set(e, st == UCS_ERR_BUSY ? -EADDRINUSE : -EIO, "peers: cannot listen on %s: %s",
			       ps->addr_str, st == UCS_ERR_BUSY ? "the address is in use" : ucs_status_string(st));
	log_info("peers: serving on %s", ps->addr_str);
	return 0;
}

/* Whether something listens on the address still: a plain bind (with
 * SO_REUSEADDR, as UCX's own) asked first, so that UCX does not log an
 * error for every try. */
static bool addr_busy(const struct peer_engine *ps)
{
	int fd = socket(ps->addr.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0), one = 1;
	bool busy;

	if (fd < 0)
		return false;
	(void)setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	busy = bind(fd, (const struct sockaddr *)&ps->addr, ps->addr_len) < 0 && errno == EADDRINUSE;
	close(fd);
	return busy;
}

/* On the thread, while the address is busy (a server taken over still
 * holds it): tries again; gives up, logged, past listen_until. */
static void listen_again(struct peer_engine *ps)
{
	struct errinfo e;
	int r;

	if (ps->listener || !ps->listen_until)
		return;
	if (addr_busy(ps) && mono_now() < ps->listen_until)
		return;
	r = listen_on(ps, &e);
	if (r == 0 || (r == -EADDRINUSE && mono_now() < ps->listen_until))
		return;
	log_warn("%s; serving no peers", e.msg);
	ps->listen_until = 0;
}

/* Frees the bounce buffers once no reply has been in flight for a while. */
static void trim(struct peer_engine *ps)
{
	double now = mono_now();

	if (ps->sends) {
		ps->idle_since = 0;
	} else if (ps->idle_since == 0) {
		ps->idle_since = now;
	} else if (now - ps->idle_since > PEER_BOUNCE_IDLE_S && ps->bounce.bytes) {
		bounce_trim(&ps->bounce);
	}
}

static void *serve_main(void *arg)
{
	struct peer_engine *ps = arg;
	struct pollfd pf[2] = { { .fd = ps->efd, .events = POLLIN }, { .fd = ps->th.stopfd, .events = POLLIN } };

	while (!(pf[1].revents & POLLIN)) {
		listen_again(ps);
		install_pending(ps);
		while (ucp_worker_progress(ps->worker))
			;
		reap(ps);
		trim(ps);
		if (ucp_worker_arm(ps->worker) == UCS_ERR_BUSY)
			continue;
		/* A timeout for the Hello deadline and new offers. */
		poll(pf, 2, 100);
	}
	return NULL;
}

/* Listens now, or (busy_wait_s) once the address is free. */
static int first_listen(struct peer_engine *ps, const char *addr, double busy_wait_s,
			struct errinfo *e)
{
	int r = peer_parse_addr(addr, &ps->addr, &ps->addr_len, e);

	if (r < 0) { /* not err_set with e->msg: it would format it into itself */
		err_prefix(e, "--peer-listen");
		return r;
	}
	snprintf(ps->addr_str, sizeof(ps->addr_str), "%s", addr);
	if ((r = setup_ucx(ps, e)) < 0)
		return r;
	if (busy_wait_s > 0 && addr_busy(ps))
		r = -EADDRINUSE;
	else
		r = listen_on(ps, e);
	if (r != -EADDRINUSE || busy_wait_s <= 0)
		return r;
	log_info("peers: %s is still in use (a server taken over, or a peer process before this one); listening once it is free", addr);
	ps->listen_until = mono_now() + busy_wait_s;
	return 0;
}

int peer_engine_start(const char *addr, const struct peer_trust *trust, double busy_wait_s,
		      struct peer_serve_counters *cnt, struct peer_engine **out, struct errinfo *e)
{
	struct peer_engine *ps = calloc(1, sizeof(*ps));
	const char *v;
	int r;

	if (!ps)
		return err_set(e, -ENOMEM, "out of memory");
	ps->trust = *trust;
	ps->cnt = cnt;
	ps->efd = -1;
	bounce_init(&ps->bounce, 1u << 20, PEER_BOUNCE_BYTES);
	pthread_mutex_init(&ps->lock, NULL);
	ps->corrupt = (v = test_seam("WSRV_TEST_PEER_CORRUPT")) && *v == '1';
	ps->delay_ms = (v = test_seam("WSRV_TEST_PEER_DELAY_MS")) ? (unsigned)atoi(v) : 0;
	ps->offer_delay_ms = (v = test_seam("WSRV_TEST_PEER_OFFER_DELAY_MS")) ? (unsigned)atoi(v) : 0;
	r = peer_thread_init(&ps->th, e);
	if (r == 0)
		r = first_listen(ps, addr, busy_wait_s, e);
	if (r == 0)
		r = peer_thread_start(&ps->th, serve_main, ps, e);
	if (r < 0) {
		peer_engine_stop(ps);
		return r;
	}
	if (ps->corrupt || ps->delay_ms || ps->offer_delay_ms)
		log_warn("peers: test faults on (corrupt %d, delay %u ms, offer delay %u ms)", ps->corrupt,
			 ps->delay_ms, ps->offer_delay_ms);
	*out = ps;
	return 0;
}

int peer_engine_offer(struct peer_engine *ps, struct peer_table *t, struct errinfo *e)
{
	if (ps->offer_delay_ms) /* tests only: a model that comes late */
		usleep(ps->offer_delay_ms * 1000u);
	/* The thread takes it within its 100 ms poll. */
	pthread_mutex_lock(&ps->lock);
	if (ps->npending == PEER_MAX_TABLES) {
		pthread_mutex_unlock(&ps->lock);
		peer_table_free(t);
		return err_set(e, -E2BIG, "peers: too many models offered at once");
	}
	ps->pending[ps->npending++] = t;
	pthread_mutex_unlock(&ps->lock);
	return 0;
}

void peer_engine_withdraw(struct peer_engine *ps, const char *name)
{
	pthread_mutex_lock(&ps->lock);
	for (size_t k = 0; k < ps->npending; k++)
		if (strcmp(ps->pending[k]->name, name) == 0) {
			peer_table_free(ps->pending[k]);
			ps->pending[k--] = ps->pending[--ps->npending];
		}
	if (ps->nwithdraw < PEER_MAX_TABLES)
		snprintf(ps->withdraw[ps->nwithdraw++], sizeof(ps->withdraw[0]), "%s", name);
	pthread_mutex_unlock(&ps->lock);
}

void peer_engine_expect(struct peer_engine *ps, const char *const *names, size_t n)
{
	pthread_mutex_lock(&ps->lock);
	ps->nexpect = 0;
	for (size_t i = 0; i < n && i < PEER_MAX_TABLES; i++)
		snprintf(ps->expect[ps->nexpect++], sizeof(ps->expect[0]), "%s", names[i]);
	pthread_mutex_unlock(&ps->lock);
}

/* Closes every connection and waits (2 s at most) for their replies. */
static void close_all(struct peer_engine *ps)
{
	double until = mono_now() + 2.0;
	bool left = true;

	for (size_t i = 0; i < PEER_MAX_CONNS; i++)
		if (ps->conns[i])
			conn_close(ps->conns[i]);
	while (left && mono_now() < until) {
		ucp_worker_progress(ps->worker);
		reap(ps);
		left = false;
		for (size_t i = 0; i < PEER_MAX_CONNS; i++)
			left |= ps->conns[i] != NULL;
	}
}

void peer_engine_stop(struct peer_engine *ps)
{
	if (!ps)
		return;
	peer_thread_end(&ps->th);
	if (ps->worker)
		close_all(ps);
	if (ps->listener)
		ucp_listener_destroy(ps->listener);
	if (ps->worker)
		ucp_worker_destroy(ps->worker);
	if (ps->ctx)
		ucp_cleanup(ps->ctx);
	for (size_t i = 0; i < PEER_MAX_TABLES * 2; i++)
		if (ps->tabs[i]) {
			peer_table_free(ps->tabs[i]->t);
			free(ps->tabs[i]);
		}
	for (size_t i = 0; i < ps->npending; i++)
		peer_table_free(ps->pending[i]);
	bounce_fini(&ps->bounce);
	pthread_mutex_destroy(&ps->lock);
	free(ps);
}
