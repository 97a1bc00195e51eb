// SPDX-License-Identifier: MIT
/* fuzz_proto.c - libFuzzer target for the server's protocol handling: the
 * input is a sequence of packets (2-byte little-endian length, then the
 * bytes), each decoded and dispatched in one session against a real loaded
 * model, as wsrvd would. Whatever comes in, every reply must be a valid
 * Response of UTF-8 text that fits in a packet, and the session's books
 * must balance. */
#include <fcntl.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "mkmodel.h"
#include "pb_text.h"
#include "srv.h"
#include "wsrv.pb-c.h"

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static struct server srv;
static uint8_t reply_buf[WSRV_MAX_PACKET];
static char model_dir[] = "/tmp/wsrv-fuzz-proto-XXXXXX";

static int rm_one(const char *p, const struct stat *sb, int flag, struct FTW *ftw)
{
	return remove(p);
}

static void cleanup(void)
{
	nftw(model_dir, rm_one, 8, FTW_DEPTH | FTW_PHYS);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	char *dir = model_dir;
	struct load_opts lo = { 0 };
	struct loaded_model *lm;
	struct mk_spec spec;
	struct errinfo e;

	lo.arena.lock = LOCK_OFF;
	lo.arena.hugepages = HUGEPAGES_OFF;
	if (!mkdtemp(dir) || mk_preset("tiny", 1 << 20, 2, &spec, &e) < 0 ||
	    mk_write(&spec, dir, 2, 1, &e) < 0 || model_load("m", dir, &lo, &lm, &e) < 0) {
		fprintf(stderr, "fuzz_proto: cannot set up a model: %s\n", e.msg);
		abort();
	}
	atexit(cleanup);
	mk_spec_free(&spec);
	srv.models = calloc(1, sizeof(*srv.models));
	srv.models[0].lm = lm;
	srv.models[0].generation = 1;
	srv.nmodels = 1;
	srv.cfg = (struct srv_config){ .max_clients = 8, .max_leases = 16, .max_attach = 4,
				       .max_message = WSRV_MAX_PACKET, .max_errors = 1000,
				       .max_regions = 4, .max_client_regions = 3,
				       .max_region_bytes = 64 << 20, .max_client_region_bytes = 32 << 20 };
	srv.fd_budget = 8;
	srv.lfd = srv.lock = -1; /* no socket: a TakeOver is refused */
	srv.reload_efd = -1;     /* no loop: a Reload is refused */
	return 0;
}

static void check_reply(const struct reply *r)
{
	Wsrv__Response *resp;

	if (r->len > r->cap)
		__builtin_trap();
	resp = wsrv__response__unpack(NULL, r->len, r->buf);
	if (!resp)
		__builtin_trap();
	/* Every string the server sends is text, or the client refuses the
	 * reply (pb_text.h): whatever a request carried. */
	char why[160];
	if (pb_text_check(&resp->base, why, sizeof(why)) < 0)
		__builtin_trap();
	wsrv__response__free_unpacked(resp, NULL);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct reply r = { .buf = reply_buf, .cap = sizeof(reply_buf) };
	struct session *s = session_new(&srv, open("/dev/null", O_RDONLY | O_CLOEXEC));

	if (!s)
		return 0;
	while (size >= 2 && !session_closing(s)) {
		size_t len = (size_t)data[0] | (size_t)data[1] << 8;
		data += 2;
		size -= 2;
		if (len > size)
			len = size;
		/* An odd length sends an fd along (a RegionCommit's handle). */
		srv_dispatch(&srv, s, data, len, len & 1 ? open("/dev/null", O_RDONLY | O_CLOEXEC) : -1, &r);
		check_reply(&r);
		if (r.owned_fd >= 0)
			close(r.owned_fd);
		data += len;
		size -= len;
	}
	session_free(&srv, s);
	if (srv.models[0].attached || srv.models[0].leases || srv.regions.n || srv.regions.bytes)
		__builtin_trap(); /* a freed session left something behind */
	return 0;
}
