// SPDX-License-Identifier: MIT
/* test_peer_auth.c - the peer token never travels (issue 23): a real
 * wsrvd --peer-listen, spoken to by a raw UCX client, refuses a protocol 1
 * Hello (the token in the clear) with a sentence and a wrong proof as
 * "wrong token", and proves it knows the token itself; and the proofs
 * depend on the token, both nonces, the model, the layout and the side. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "clock.h"
#include "fixture.h"
#include "model.h"
#include "peer_auth.h"
#include "peer_proto.h"
#include "peer_table.h"
#include "peer_ucx.h"

#define TOKEN "the-fleet-token-0123456789"

static struct fixture F = { .tag = "peer-auth",
			    .models = { { "llama-mini", 4u << 20, .layers = 2, .shards = 1, .seed = 3 } } };

static struct peer_trust trust_of(const char *tok)
{
	struct peer_trust t = { .token_len = strlen(tok) };

	memcpy(t.token, tok, t.token_len);
	return t;
}

static void ctx_fill(struct peer_auth_ctx *c, uint8_t fb, uint8_t sb)
{
	memset(c, 0, sizeof(*c));
	memset(c->filler_nonce, fb, PEER_NONCE_LEN);
	memset(c->server_nonce, sb, PEER_NONCE_LEN);
	snprintf(c->model, sizeof(c->model), "m");
	c->layout = 42;
}

/* A proof holds for its own token, side, nonces, model and layout only. */
static void proofs_bind_everything(void **s)
{
	struct peer_trust t = trust_of(TOKEN), other = trust_of("another-token-9876543210"), none = { 0 };
	struct peer_auth_ctx c, d;
	uint8_t mac[PEER_MAC_LEN], n1[PEER_NONCE_LEN], n2[PEER_NONCE_LEN];

	(void)s;
	ctx_fill(&c, 1, 2);
	assert_int_equal(peer_auth_mac(&t, PEER_SIDE_FILLER, &c, mac), 0);
	assert_true(peer_auth_ok(&t, PEER_SIDE_FILLER, &c, mac));
	assert_false(peer_auth_ok(&other, PEER_SIDE_FILLER, &c, mac));
	assert_false(peer_auth_ok(&t, PEER_SIDE_SERVER, &c, mac)); /* not reflected */
	d = c;
	d.server_nonce[31] ^= 1;
	assert_false(peer_auth_ok(&t, PEER_SIDE_FILLER, &d, mac));
	d = c;
	d.filler_nonce[0] ^= 1;
	assert_false(peer_auth_ok(&t, PEER_SIDE_FILLER, &d, mac));
	d = c;
	d.layout = 43;
	assert_false(peer_auth_ok(&t, PEER_SIDE_FILLER, &d, mac));
	d = c;
	snprintf(d.model, sizeof(d.model), "n");
	assert_false(peer_auth_ok(&t, PEER_SIDE_FILLER, &d, mac));
	/* No token: no proof, and nothing proven. */
	assert_int_equal(peer_auth_mac(&none, PEER_SIDE_FILLER, &c, mac), -EINVAL);
	assert_false(peer_auth_ok(&none, PEER_SIDE_FILLER, &c, mac));
	/* Nonces differ each time. */
	assert_int_equal(peer_auth_nonce(n1), 0);
	assert_int_equal(peer_auth_nonce(n2), 0);
	assert_memory_not_equal(n1, n2, PEER_NONCE_LEN);
}

/* A raw client: one UCX worker, an endpoint to the server, and the last
 * Challenge and table it received. */
struct raw {
	ucp_context_h ctx;
	ucp_worker_h w;
	ucp_ep_h ep;
	bool got_chal, got_table, lost;
	struct peer_challenge chal;
	struct peer_table_hdr table;
};

static ucs_status_t rawc_on_chal(void *arg, const void *hdr, size_t hlen, void *data, size_t len,
			     const ucp_am_recv_param_t *p)
{
	struct raw *r = arg;

	(void)hdr, (void)hlen, (void)p;
	if (len == sizeof(r->chal)) {
		memcpy(&r->chal, data, len);
		r->got_chal = true;
	}
	return UCS_OK;
}

static ucs_status_t rawc_on_table(void *arg, const void *hdr, size_t hlen, void *data, size_t len,
			      const ucp_am_recv_param_t *p)
{
	struct raw *r = arg;

	(void)hdr, (void)hlen;
	/* A refusal or a small table comes eagerly; the header is all we read. */
	if (!(p->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV) && len >= sizeof(r->table)) {
		memcpy(&r->table, data, sizeof(r->table));
		r->got_table = true;
	}
	return UCS_OK;
}

static void rawc_on_lost(void *arg, ucp_ep_h ep, ucs_status_t st)
{
	(void)ep, (void)st;
	((struct raw *)arg)->lost = true;
}

static void rawc_open(struct raw *r, int port)
{
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port) };
	struct errinfo e;
	ucp_ep_params_t ep = { .field_mask = UCP_EP_PARAM_FIELD_FLAGS | UCP_EP_PARAM_FIELD_SOCK_ADDR |
			       UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE | UCP_EP_PARAM_FIELD_ERR_HANDLER,
			       .flags = UCP_EP_PARAMS_FLAGS_CLIENT_SERVER,
			       .sockaddr = { (const struct sockaddr *)&sa, sizeof(sa) },
			       .err_mode = UCP_ERR_HANDLING_MODE_PEER,
			       .err_handler = { .cb = rawc_on_lost, .arg = r } };

	memset(r, 0, sizeof(*r));
	inet_pton(AF_INET, "127.0.0.1", &sa.sin_addr);
	assert_int_equal(peer_ucx_open(false, &r->ctx, &r->w, &e), 0);
	assert_int_equal(peer_ucx_handler(r->w, PEER_AM_CHALLENGE, rawc_on_chal, r), 0);
	assert_int_equal(peer_ucx_handler(r->w, PEER_AM_TABLE, rawc_on_table, r), 0);
	assert_int_equal(ucp_ep_create(r->w, &ep, &r->ep), UCS_OK);
}

/* Sends an active message and progresses until it has gone. */
static void rawc_send(struct raw *r, unsigned id, const void *data, size_t len)
{
	ucp_request_param_t p = { .op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS, .flags = UCP_AM_SEND_FLAG_REPLY };
	void *req = ucp_am_send_nbx(r->ep, id, NULL, 0, data, len, &p);

	assert_false(UCS_PTR_IS_ERR(req));
	while (req && ucp_request_check_status(req) == UCS_INPROGRESS)
		ucp_worker_progress(r->w);
	if (req)
		ucp_request_free(req);
}

/* Progresses until *flag, the connection is lost, or 10 s. */
static void rawc_wait(struct raw *r, const bool *flag)
{
	double until = mono_now() + 10;

	while (!*flag && !r->lost && mono_now() < until)
		if (!ucp_worker_progress(r->w))
			usleep(100);
	assert_true(*flag);
}

static void rawc_close(struct raw *r)
{
	ucp_request_param_t p = { .op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS, .flags = UCP_EP_CLOSE_FLAG_FORCE };
	void *req = ucp_ep_close_nbx(r->ep, &p);

	while (UCS_PTR_IS_PTR(req) && ucp_request_check_status(req) == UCS_INPROGRESS)
		ucp_worker_progress(r->w);
	if (UCS_PTR_IS_PTR(req))
		ucp_request_free(req);
	ucp_worker_destroy(r->w);
	ucp_cleanup(r->ctx);
}

static char token_path[300];

/* wsrvd serving "m" to peers on 127.0.0.1:port with TOKEN. */
static void serve_peers(struct served *sv, int *port)
{
	char listen[64];
	int fd;

	snprintf(token_path, sizeof(token_path), "%s/token", F.dir[0]);
	fd = open(token_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	assert_true(fd >= 0);
	assert_int_equal(write(fd, TOKEN "\n", strlen(TOKEN) + 1), (ssize_t)strlen(TOKEN) + 1);
	close(fd);
	*port = free_tcp_port();
	assert_true(*port > 0);
	snprintf(listen, sizeof(listen), "127.0.0.1:%d", *port);
	memset(sv, 0, sizeof(*sv));
	setenv("UCX_TLS", "tcp", 1);
	setenv("UCX_WARN_UNUSED_ENV_VARS", "n", 1);
	served_start(sv, "m", F.dir[0], "--peer-listen", listen, "--peer-allow", "127.0.0.0/8",
		     "--peer-token", token_path, NULL);
	served_attach(sv, "m");
}

/* The Hello of protocol 1, as a filler before this change sent it. */
struct hello_v1 {
	uint64_t magic;
	uint32_t version, token_len;
	uint8_t token[PEER_TOKEN_MAX];
	char model[128];
	uint64_t layout;
	uint32_t ntensors, reserved;
};

static void v1_refused_with_a_sentence(void **s)
{
	struct hello_v1 h = { .magic = PEER_MAGIC, .version = 1, .token_len = strlen(TOKEN) };
	struct served sv;
	struct raw r;
	int port;

	(void)s;
	serve_peers(&sv, &port);
	memcpy(h.token, TOKEN, strlen(TOKEN));
	snprintf(h.model, sizeof(h.model), "m");
	rawc_open(&r, port);
	rawc_send(&r, PEER_AM_HELLO, &h, sizeof(h));
	rawc_wait(&r, &r.got_table);
	assert_int_equal(r.table.status, -EPROTONOSUPPORT);
	assert_non_null(strstr(r.table.msg, "protocol 1 sends the token in the clear"));
	assert_false(r.got_chal);
	rawc_close(&r);
	served_stop(&sv);
}

/* Hello, Challenge, then a Proof made with key; the table's header. */
static void handshake(int port, const char *key, struct raw *r, struct peer_auth_ctx *c)
{
	struct peer_trust t = trust_of(key);
	struct peer_hello h = { .magic = PEER_MAGIC, .version = PEER_VERSION };
	struct peer_proof q = { .magic = PEER_MAGIC };
	struct model_opts o = { 0 };
	struct model *m;
	struct errinfo e;

	memset(c, 0, sizeof(*c));
	/* Laid out as wsrvd lays it out by default: the same layout hash. */
	assert_int_equal(model_open("m", F.dir[0], &o, &m, &e), 0);
	h.layout = peer_layout_hash(m);
	h.ntensors = (uint32_t)m->ntensors;
	model_free(m);
	assert_int_equal(peer_auth_nonce(h.nonce), 0);
	snprintf(h.model, sizeof(h.model), "m");
	rawc_open(r, port);
	rawc_send(r, PEER_AM_HELLO, &h, sizeof(h));
	rawc_wait(r, &r->got_chal);
	assert_int_equal(r->chal.magic, PEER_MAGIC);
	memcpy(c->filler_nonce, h.nonce, PEER_NONCE_LEN);
	memcpy(c->server_nonce, r->chal.nonce, PEER_NONCE_LEN);
	snprintf(c->model, sizeof(c->model), "m");
	c->layout = h.layout;
	assert_int_equal(peer_auth_mac(&t, PEER_SIDE_FILLER, c, q.mac), 0);
	rawc_send(r, PEER_AM_PROOF, &q, sizeof(q));
	rawc_wait(r, &r->got_table);
}

/* A wrong proof is "wrong token"; a right one gets the table, which
 * carries the server's proof of the same token (and of no other). */
static void proof_checked(void **s)
{
	struct peer_trust t = trust_of(TOKEN), other;
	struct peer_auth_ctx c;
	struct served sv;
	struct raw r;
	int port;

	(void)s;
	serve_peers(&sv, &port);
	handshake(port, "another-token-9876543210", &r, &c);
	assert_int_equal(r.table.status, -EACCES);
	assert_string_equal(r.table.msg, "wrong token");
	rawc_close(&r);
	handshake(port, TOKEN, &r, &c);
	assert_int_equal(r.table.status, 0);
	assert_true(peer_auth_ok(&t, PEER_SIDE_SERVER, &c, r.table.mac));
	assert_false(peer_auth_ok(&t, PEER_SIDE_FILLER, &c, r.table.mac));
	other = trust_of("another-token-9876543210");
	assert_false(peer_auth_ok(&other, PEER_SIDE_SERVER, &c, r.table.mac));
	rawc_close(&r);
	served_stop(&sv);
}

FIXTURE_MAIN(F,
	cmocka_unit_test(proofs_bind_everything),
	cmocka_unit_test(v1_refused_with_a_sentence),
	cmocka_unit_test(proof_checked),
)
