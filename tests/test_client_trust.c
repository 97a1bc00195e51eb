// SPDX-License-Identifier: MIT
/* test_client_trust.c - libwsrv against a lying server: unsealed or short
 * memfds, a corrupt manifest, the wrong number of fds, garbage replies and
 * extents that disagree with the manifest. Each gets an error with a
 * sentence, never a crash, and no fd is left open. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "arena.h"
#include "arena_struct.h"
#include "helpers.h"
#include "manifest.h"
#include "model_load.h"
#include "packet.h"
#include "ready.h"
#include "wsrv.h"
#include "wsrv.pb-c.h"
#include <xxhash.h>

enum lie { GOOD, UNSEALED, BAD_MAGIC, SHORT_SEGMENT, FEW_FDS, GARBAGE, BAD_EXTENT, EVENT_FLOOD, NAME_TWICE, LIST_FAILS };

static int fds_before;
static char *tmp;
static struct loaded_model *lm;
static char sock[200];
static int lfd;

/* A sealed (or not) memfd holding a copy of src's first len bytes, with
 * `patch` applied at offset 0 when given. */
static int copy_memfd(int src, size_t len, size_t size, bool seal, const char *patch)
{
	int fd = memfd_create("fake", MFD_CLOEXEC | MFD_ALLOW_SEALING);
	uint8_t *buf = calloc(1, len + 1);

	assert_int_equal(pread(src, buf, len, 0), (ssize_t)len);
	if (patch)
		memcpy(buf, patch, strlen(patch));
	assert_int_equal(ftruncate(fd, (off_t)size), 0);
	assert_int_equal(pwrite(fd, buf, len < size ? len : size, 0), (ssize_t)(len < size ? len : size));
	free(buf);
	if (seal)
		assert_int_equal(fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE | F_SEAL_SEAL), 0);
	return fd;
}

/* A sealed copy of the manifest whose tensor 1 has tensor 0's name. */
static int manifest_name_twice(void)
{
	uint8_t *buf = malloc(lm->manifest_size);
	uint64_t size = lm->arena->seg[0].size;
	struct mf_view v;
	char err[128];
	int fd = memfd_create("fake", MFD_CLOEXEC | MFD_ALLOW_SEALING);

	assert_int_equal(pread(lm->manifest_fd, buf, lm->manifest_size, 0), (ssize_t)lm->manifest_size);
	assert_int_equal(manifest_check(buf, lm->manifest_size, &size, 1, &v, err, sizeof(err)), 0);
	struct mf_tensor *t = (struct mf_tensor *)(void *)(buf + ((const uint8_t *)v.tensors - buf));
	t[1].name_off = t[0].name_off;
	t[1].name_len = t[0].name_len;
	assert_int_equal(ftruncate(fd, (off_t)lm->manifest_size), 0);
	assert_int_equal(pwrite(fd, buf, lm->manifest_size, 0), (ssize_t)lm->manifest_size);
	assert_int_equal(fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE | F_SEAL_SEAL), 0);
	free(buf);
	return fd;
}

static void client_trust_reply(int c, Wsrv__Response *r, const int *fds, int n)
{
	uint8_t buf[4096];
	size_t len = wsrv__response__pack(r, buf);

	pkt_send(c, buf, len, fds, n);
}

static Wsrv__Request *next_req(int c)
{
	static uint8_t buf[WSRV_MAX_PACKET];
	int fds[4], n;
	long len = pkt_recv(c, buf, sizeof(buf), fds, 4, &n);

	return len > 0 ? wsrv__request__unpack(NULL, (size_t)len, buf) : NULL;
}

static void answer_attach(int c, uint64_t seq, enum lie lie)
{
	Wsrv__Response r = WSRV__RESPONSE__INIT;
	Wsrv__AttachReply ar = WSRV__ATTACH_REPLY__INIT;
	uint64_t sizes[1] = { lm->arena->seg[0].size };
	int fds[2], nfds = 2;

	fds[0] = lie == NAME_TWICE ? manifest_name_twice()
				   : copy_memfd(lm->manifest_fd, lm->manifest_size, lm->manifest_size, lie != UNSEALED,
						lie == BAD_MAGIC ? "BADMAGIC" : NULL);
	fds[1] = lie == SHORT_SEGMENT ? copy_memfd(lm->arena->seg[0].fd, 4096, 4096, true, NULL)
				      : dup(lm->arena->seg[0].fd);
	if (lie == FEW_FDS)
		nfds = 1;
	ar.attach_id = 1;
	ar.manifest_size = lm->manifest_size;
	ar.n_segment_sizes = 1;
	ar.segment_sizes = sizes;
	r.seq = seq;
	r.body_case = WSRV__RESPONSE__BODY_ATTACH;
	r.attach = &ar;
	if (lie == GARBAGE) {
		pkt_send(c, "\xff\xff\xff garbage", 12, fds, 2);
	} else {
		client_trust_reply(c, &r, fds, nfds);
	}
	close(fds[0]);
	close(fds[1]);
}

static void answer_fetch(int c, uint64_t seq)
{
	Wsrv__Response r = WSRV__RESPONSE__INIT;
	Wsrv__FetchReply fr = WSRV__FETCH_REPLY__INIT;
	Wsrv__Extent ext = WSRV__EXTENT__INIT, *pe = &ext;

	ext.segment = 0;
	ext.offset = 12345; /* not where the manifest says */
	ext.length = 4096;
	fr.lease = 1;
	fr.n_extents = 1;
	fr.extents = &pe;
	r.seq = seq;
	r.body_case = WSRV__RESPONSE__BODY_FETCH;
	r.fetch = &fr;
	client_trust_reply(c, &r, NULL, 0);
}

/* Events, unasked, and never the reply: the client gives up after a
 * bound instead of reading forever. */
static void flood(int c)
{
	Wsrv__Response r = WSRV__RESPONSE__INIT;
	Wsrv__Event ev = WSRV__EVENT__INIT;
	uint8_t buf[256];
	size_t len;

	ev.model = "m";
	ev.generation = 2;
	r.body_case = WSRV__RESPONSE__BODY_EVENT;
	r.event = &ev;
	len = wsrv__response__pack(&r, buf);
	for (int i = 0; i < 5000; i++)
		if (send(c, buf, len, MSG_NOSIGNAL) < 0)
			break; /* the client left */
}

/* The fake server: one connection, Hello answered properly, then lies. */
static void *fake(void *arg)
{
	enum lie lie = (enum lie)(intptr_t)arg;
	int c = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
	Wsrv__Request *q;

	while ((q = next_req(c))) {
		Wsrv__Response r = WSRV__RESPONSE__INIT;
		Wsrv__HelloReply h = WSRV__HELLO_REPLY__INIT;
		Wsrv__Ok ok = WSRV__OK__INIT;
		r.seq = q->seq;
		if (q->body_case == WSRV__REQUEST__BODY_HELLO) {
			h.protocol = WSRV_PROTOCOL_VERSION;
			h.max_packet = WSRV_MAX_PACKET;
			r.body_case = WSRV__RESPONSE__BODY_HELLO;
			r.hello = &h;
			client_trust_reply(c, &r, NULL, 0);
		} else if (q->body_case == WSRV__REQUEST__BODY_ATTACH && lie == EVENT_FLOOD) {
			flood(c);
		} else if (q->body_case == WSRV__REQUEST__BODY_ATTACH) {
			answer_attach(c, q->seq, lie);
		} else if (q->body_case == WSRV__REQUEST__BODY_FETCH_LAYER) {
			answer_fetch(c, q->seq);
		} else if (q->body_case == WSRV__REQUEST__BODY_STATS) {
			Wsrv__StatsReply st = WSRV__STATS_REPLY__INIT;
			r.body_case = WSRV__RESPONSE__BODY_STATS;
			r.stats = &st;
			client_trust_reply(c, &r, NULL, 0);
		} else if (q->body_case == WSRV__REQUEST__BODY_LIST_MODELS && lie == LIST_FAILS) {
			Wsrv__Error e = WSRV__ERROR__INIT;
			e.code = EIO;
			e.message = "the list failed";
			r.body_case = WSRV__RESPONSE__BODY_ERROR;
			r.error = &e;
			client_trust_reply(c, &r, NULL, 0);
		} else {
			r.body_case = WSRV__RESPONSE__BODY_OK;
			r.ok = &ok;
			client_trust_reply(c, &r, NULL, 0);
		}
		wsrv__request__free_unpacked(q, NULL);
	}
	close(c);
	return NULL;
}

static void client_trust_expect(enum lie lie, int err, const char *needle)
{
	struct wsrv_client *c;
	struct wsrv_model *m = NULL;
	pthread_t th;
	int r;

	pthread_create(&th, NULL, fake, (void *)(intptr_t)lie);
	assert_int_equal(wsrv_connect(sock, NULL, &c), 0);
	r = wsrv_attach(c, "m", &m);
	if (lie == BAD_EXTENT) {
		struct wsrv_lease l;
		assert_int_equal(r, 0);
		r = wsrv_fetch_layer(m, 0, &l);
		wsrv_detach(m);
	}
	/* The name index is built at the first lookup by name, not at
	 * attach: a name listed twice is an error there, every time. */
	if (lie == NAME_TWICE) {
		struct wsrv_tensor t;
		assert_int_equal(r, 0);
		assert_int_equal(wsrv_model_find(m, "nothing.at.all", &t), -EBADMSG);
		r = wsrv_model_find(m, wsrv_model_tensor_name(m, 0), &t);
		wsrv_detach(m);
	}
	if (r != err || !strstr(wsrv_last_error(), needle))
		fail_msg("lie %d: got %d '%s', want %d '%s'", lie, r, wsrv_last_error(), err, needle);
	wsrv_disconnect(c);
	pthread_join(th, NULL);
}

/* Accepts `byes` connections, answers each Hello with Goodbye (a server
 * handing its socket over), then serves as a good server. */
static void *goodbye_first(void *arg)
{
	int byes = (int)(intptr_t)arg;

	for (int i = 0; i < byes; i++) {
		int c = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
		Wsrv__Request *q = next_req(c);
		Wsrv__Response r = WSRV__RESPONSE__INIT;
		Wsrv__Goodbye g = WSRV__GOODBYE__INIT;
		g.reason = "the server was replaced; connect again";
		r.seq = q ? q->seq : 0;
		r.body_case = WSRV__RESPONSE__BODY_GOODBYE;
		r.goodbye = &g;
		client_trust_reply(c, &r, NULL, 0);
		if (q)
			wsrv__request__free_unpacked(q, NULL);
		close(c);
	}
	return byes <= 2 ? fake((void *)(intptr_t)GOOD) : NULL;
}

/* A Hello answered with Goodbye (wsrvd --take-over: accepted by the old
 * server as it handed over) is a connect made again, to the successor;
 * three in a row are the server stopping. CI's test_takeover saw a client
 * refused this way. */
static void goodbye_to_hello_connects_again(void **s)
{
	struct wsrv_client *c;
	struct wsrv_model *m;
	pthread_t th;

	pthread_create(&th, NULL, goodbye_first, (void *)(intptr_t)2);
	assert_int_equal(wsrv_connect(sock, NULL, &c), 0);
	assert_int_equal(wsrv_attach(c, "m", &m), 0);
	wsrv_detach(m);
	wsrv_disconnect(c);
	pthread_join(th, NULL);
	pthread_create(&th, NULL, goodbye_first, (void *)(intptr_t)3);
	assert_int_equal(wsrv_connect(sock, NULL, &c), -ENOTCONN);
	assert_non_null(strstr(wsrv_last_error(), "stopping"));
	pthread_join(th, NULL);
}

static void good_server_works(void **s)
{
	struct wsrv_client *c;
	struct wsrv_model *m;
	struct wsrv_tensor t;
	pthread_t th;

	pthread_create(&th, NULL, fake, (void *)(intptr_t)GOOD);
	assert_int_equal(wsrv_connect(sock, NULL, &c), 0);
	assert_int_equal(wsrv_attach(c, "m", &m), 0);
	/* Every tensor the server loaded, with its bytes and checksum. */
	assert_int_equal(wsrv_model_tensor_count(m), lm->model->ntensors);
	for (size_t i = 0; i < lm->model->ntensors; i++) {
		const struct model_tensor *want = model_find(lm->model, lm->model->tensors[i].name);
		assert_int_equal(wsrv_model_find(m, want->name, &t), 0);
		assert_int_equal(t.size, want->size);
		assert_int_equal(t.xxh3, want->xxh3);
		assert_memory_equal(t.data, arena_ptr(lm->arena, want->segment, want->offset), want->size);
		assert_int_equal(XXH3_64bits(t.data, t.size), t.xxh3);
	}
	wsrv_detach(m);
	wsrv_disconnect(c);
	pthread_join(th, NULL);
}

static void lies_are_errors(void **s)
{
	client_trust_expect(UNSEALED, -EBADMSG, "not sealed");
	client_trust_expect(BAD_MAGIC, -EBADMSG, "bad manifest: manifest has no WSRVMAN magic");
	client_trust_expect(SHORT_SEGMENT, -EBADMSG, "promised");
	client_trust_expect(FEW_FDS, -EBADMSG, "fds for 1 segments");
	client_trust_expect(GARBAGE, -EBADMSG, "malformed reply");
	client_trust_expect(BAD_EXTENT, -EBADMSG, "disagrees with its manifest");
	client_trust_expect(EVENT_FLOOD, -EBADMSG, "events and no reply");
	client_trust_expect(NAME_TWICE, -EBADMSG, "lists a tensor name twice");
}

/* Issue 60 item 9: wsrvctl status leaked its stats object when the model
 * list failed after the stats came (LeakSanitizer, in the sanitizer
 * build: exit 23 instead of 1). */
static void status_survives_a_failed_list(void **s)
{
	const char *argv[] = { getenv("WSRV_CTL"), "--socket", sock, "status", NULL };
	char out[300], err[300];
	uint8_t *text;
	size_t len;
	pthread_t th;

	assert_non_null(argv[0]);
	snprintf(out, sizeof(out), "%s/status.out", tmp);
	snprintf(err, sizeof(err), "%s/status.err", tmp);
	pthread_create(&th, NULL, fake, (void *)(intptr_t)LIST_FAILS);
	int rc = run_prog(argv, NULL, out, err, 0, 30);
	pthread_join(th, NULL);
	assert_non_null(text = read_file(err, &len));
	if (rc != 1 || !strstr((char *)text, "the list failed"))
		fail_msg("wsrvctl status: exit %d\n%s", rc, (char *)text);
	free(text);
}

/* What a view manifest_check accepted must hold for a client to read it
 * blindly: every tensor, layer, shape and name inside its bounds. */
static void view_in_bounds(const struct mf_view *v, uint64_t msize, uint64_t seg, size_t byte, int bit)
{
	const struct mf_header *h = v->h;

	if (h->strings_size == 0 || v->strings[h->strings_size - 1] != 0)
		fail_msg("byte %zu bit %d: accepted strings that do not end in NUL", byte, bit);
	for (uint32_t i = 0; i < h->ntensors; i++) {
		const struct mf_tensor *t = &v->tensors[i];
		if (t->segment != 0 || t->offset > seg || t->size > seg - t->offset ||
		    t->dims_index > h->ndims || t->rank > h->ndims - t->dims_index ||
		    t->name_off >= h->strings_size || t->name_len >= h->strings_size - t->name_off)
			fail_msg("byte %zu bit %d: accepted tensor %u out of bounds", byte, bit, i);
	}
	for (uint32_t i = 0; i < h->nlayers; i++) {
		const struct mf_layer *l = &v->layers[i];
		if (l->segment != 0 || l->offset > seg || l->length > seg - l->offset ||
		    l->first > h->ntensors || l->count > h->ntensors - l->first)
			fail_msg("byte %zu bit %d: accepted layer %u out of bounds", byte, bit, i);
	}
	if (h->config_size && (h->config_off > msize || h->config_size > msize - h->config_off))
		fail_msg("byte %zu bit %d: accepted a config out of bounds", byte, bit);
	for (uint32_t i = 0; v->parts && i < h->ntensors; i++)
		if (v->parts[i].offset > v->tensors[i].size ||
		    v->parts[i].length > v->tensors[i].size - v->parts[i].offset)
			fail_msg("byte %zu bit %d: accepted a held part outside tensor %u", byte, bit, i);
	if (v->parts && (h->held_first > h->held_last || h->held_last >= h->held_world))
		fail_msg("byte %zu bit %d: accepted ranks held outside the world", byte, bit);
}

/* Flips every bit of [from, to) of the manifest m in turn: each is caught
 * (-EBADMSG) or leaves a view in bounds. Returns how many were caught. */
static size_t flip_range(uint8_t *m, size_t len, uint64_t seg, size_t from, size_t to)
{
	struct mf_view v;
	char err[256];
	size_t caught = 0;

	for (size_t i = from; i < to && i < len; i++) {
		uint8_t save = m[i];
		for (int bit = 0; bit < 8; bit++) {
			m[i] = save ^ (uint8_t)(1u << bit);
			int r = manifest_check(m, len, &seg, 1, &v, err, sizeof(err));
			if (r == 0)
				view_in_bounds(&v, len, seg, i, bit);
			else if (r != -EBADMSG)
				fail_msg("byte %zu bit %d: manifest_check returned %d", i, bit, r);
			caught += r < 0;
		}
		m[i] = save;
	}
	return caught;
}

/* A partial load's manifest (version 2: parts, ranks held): its header,
 * its parts table and every part's bounds are checked as closely. */
static void partial_manifest_corruptions(void **s)
{
	struct load_opts lo = { 0 };
	struct loaded_model *pm;
	struct errinfo e;
	struct mf_view v;
	char err[256];
	json_t *plan = json_pack("{s:i}", "stages", 2);
	const struct mf_header *h;
	uint8_t *orig;
	uint64_t seg;

	lo.arena.lock = LOCK_OFF;
	lo.arena.hugepages = HUGEPAGES_OFF;
	lo.model.plan = plan;
	lo.model.rank_last = 1;
	lo.model.world = 4;
	assert_int_equal(model_load("p", tmp, &lo, &pm, &e), 0);
	json_decref(plan);
	orig = malloc(pm->manifest_size);
	seg = pm->arena->seg[0].size;
	assert_int_equal(pread(pm->manifest_fd, orig, pm->manifest_size, 0), (ssize_t)pm->manifest_size);
	assert_int_equal(manifest_check(orig, pm->manifest_size, &seg, 1, &v, err, sizeof(err)), 0);
	h = (const struct mf_header *)orig;
	assert_int_equal(h->version, MF_VERSION_PARTIAL);
	assert_non_null(v.parts);
	assert_true(pm->model->held->bytes < pm->model->data_bytes); /* stage 0 of 2 */
	assert_true(flip_range(orig, pm->manifest_size, seg, 0, sizeof(*h)) > 0);
	assert_true(flip_range(orig, pm->manifest_size, seg, h->parts_off, pm->manifest_size) > 0);
	free(orig);
	loaded_model_free(pm);
}

/* Every single-bit corruption of the manifest's header and first records
 * is either caught (-EBADMSG) or leaves a view whose every record is in
 * bounds; none crashes the client. */
static void manifest_corruptions(void **s)
{
	size_t n = lm->manifest_size < 4096 ? lm->manifest_size : 4096;
	uint8_t *orig = malloc(lm->manifest_size);
	uint64_t seg = lm->arena->seg[0].size;
	struct mf_view v;
	char err[256];

	assert_int_equal(pread(lm->manifest_fd, orig, lm->manifest_size, 0), (ssize_t)lm->manifest_size);
	size_t caught = 0, magic_caught = 0;
	assert_int_equal(manifest_check(orig, lm->manifest_size, &seg, 1, &v, err, sizeof(err)), 0);
	for (size_t i = 0; i < n; i++) {
		uint8_t save = orig[i];
		for (int bit = 0; bit < 8; bit++) {
			orig[i] = save ^ (uint8_t)(1u << bit);
			int r = manifest_check(orig, lm->manifest_size, &seg, 1, &v, err, sizeof(err));
			if (r == 0)
				view_in_bounds(&v, lm->manifest_size, seg, i, bit);
			else if (r != -EBADMSG)
				fail_msg("byte %zu bit %d: manifest_check returned %d", i, bit, r);
			caught += r < 0;
			magic_caught += r < 0 && i < 8;
		}
		orig[i] = save;
	}
	/* The magic, the version and the header's size are always checked. */
	assert_int_equal(magic_caught, 8 * 8);
	assert_true(caught > n);
	assert_int_equal(manifest_check(orig, lm->manifest_size - 1, &seg, 1, &v, err, sizeof(err)), -EBADMSG);
	free(orig);
}

/* Issue 60 item 11: a readiness page is the server's to write after the
 * client checked it. libwsrv read the unit count from the page again,
 * and a server that raised it made libwsrv read past the page. The view
 * keeps the counts as checked; a page changed afterwards changes them
 * not. */
static void readiness_counts_read_once(void **s)
{
	uint32_t nseg = 2, nt = 3, nunits = 2;
	size_t len = (size_t)ready_size_tiered(nseg, nt, nunits);
	uint8_t *page = calloc(1, len);
	struct rd_header *h = (struct rd_header *)page;
	struct rd_view v;
	char err[256];

	(void)s;
	assert_non_null(page);
	ready_init(page, nseg, nt, 4096, true, nunits);
	assert_int_equal(ready_check(page, len, nseg, nt, &v, err, sizeof(err)), 0);
	h->nunits = 1u << 20;  /* the lie, after the check */
	h->nsegments = 1u << 20;
	assert_int_equal(v.nunits, nunits);
	assert_int_equal(v.nsegments, nseg);
	assert_int_equal(ready_check(page, len, nseg, nt, &v, err, sizeof(err)), -EBADMSG);
	free(page);
}

static int client_trust_setup(void **s)
{
	struct sockaddr_un a = { .sun_family = AF_UNIX };
	struct load_opts lo = { 0 };
	struct errinfo e;

	fds_before = count_fds();
	tmp = test_tmpdir("trust");
	if (!tmp || make_model(tmp, "tiny", 1 << 20, 2, 1, 1) < 0)
		return -1;
	lo.arena.lock = LOCK_OFF;
	lo.arena.hugepages = HUGEPAGES_OFF;
	if (model_load("m", tmp, &lo, &lm, &e) < 0)
		return -1;
	snprintf(sock, sizeof(sock), "%s/fake.sock", tmp);
	strcpy(a.sun_path, sock);
	lfd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	if (bind(lfd, (struct sockaddr *)&a, sizeof(a)) < 0 || listen(lfd, 4) < 0)
		return -1;
	return 0;
}

static int client_trust_teardown(void **s)
{
	close(lfd);
	loaded_model_free(lm);
	rm_rf(tmp);
	free(tmp);
	return fd_leak_check(fds_before);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(good_server_works),
		cmocka_unit_test(goodbye_to_hello_connects_again),
		cmocka_unit_test(lies_are_errors),
		cmocka_unit_test(manifest_corruptions),
		cmocka_unit_test(partial_manifest_corruptions),
		cmocka_unit_test(readiness_counts_read_once),
		cmocka_unit_test(status_survives_a_failed_list),
	};
	return test_group_run(tests, client_trust_setup, client_trust_teardown);
}
