// SPDX-License-Identifier: MIT
/* fixture.h - what a test program and its cases stand on, written once:
 *
 * - the program's fixture: SIGPIPE ignored, the fd baseline taken before
 *   anything is opened and checked after the last case, the models it
 *   generates once for all its cases (removed afterwards), and the one
 *   wsrvd they may share;
 * - each case's own, in the process the runner forks for it (runner.h):
 *   a client of that wsrvd, attached, and the test device;
 * - a case's served model: a wsrvd serving a model with options, and a
 *   client connected (and attached) to it, stopped with exit status 0.
 *
 * A program names its fixture and cases once:
 *
 *     static struct fixture F = { .tag = "restart", .models = {
 *             { "llama-mini", 16 << 20, .layers = 2, .shards = 2, .seed = 3 } } };
 *     ...cases using F.dir[0]...
 *     FIXTURE_MAIN(F, cmocka_unit_test(restart_adopts), ...)
 */
#ifndef WSRV_TEST_FIXTURE_H
#define WSRV_TEST_FIXTURE_H

#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include "helpers.h"

#define FIXTURE_MODELS 4

/* A model generated with tools/mkmodel (make_model). */
struct fixture_model {
	const char *preset;         /* NULL: nothing in this place; "": an
	                             * empty directory (a tmp dir, or to fill) */
	uint64_t size;
	unsigned layers, shards;
	uint64_t seed;
	unsigned experts, topk;     /* deepseek-v3-mini's MoE; 0: the preset's */
};

/* A case's wsrvd and its client. */
struct served {
	struct test_server ts;      /* set nofile, uid, env... before served_start */
	struct wsrv_client *cl;     /* connected by served_start */
	struct wsrv_model *m;       /* attached by served_attach, or NULL */
};

struct fixture {
	const char *tag;            /* names its temp dirs: /tmp/wsrv-test-TAG-... */
	struct fixture_model models[FIXTURE_MODELS];
	bool world_readable;        /* the models' dirs 0755: for servers not root */
	/* Non-NULL: one wsrvd for every case, serving dir[0] as this name
	 * with serve_args (NULL-terminated, or NULL), in srv.ts; the teardown
	 * wants it to exit 0. Each case has a client of its own attached to
	 * it, srv.cl and srv.m. */
	const char *serve;
	const char *serve_args[8];
	struct served srv;
	/* Each case opens the test device (dev_test_open, WSRV_TEST_DEVICE)
	 * over srv.m, as dev: a CUDA context does not cross a fork. */
	bool device;
	struct wsrv_device *dev;
	/* Nonzero: two_models_start with this many layers, in two (each
	 * case opens its client and host device). */
	unsigned two_models;
	struct two_models two;
	int (*setup)(void);         /* more of the program's own, or NULL */
	void (*teardown)(void);     /* undoes setup, or NULL */
	int (*case_setup)(void);    /* more of each case's own, or NULL */
	void (*case_teardown)(void); /* undoes case_setup, or NULL */
	/* Set by fixture_setup: */
	char *dir[FIXTURE_MODELS];  /* the models' directories (owned) */
	int fds;                    /* the fd baseline */
};

/* The program's group setup and teardown: 0, or -1 (cmocka fails the group;
 * the teardown prints the leak). */
int fixture_setup(struct fixture *f);
int fixture_teardown(struct fixture *f);

/* A case's own, in its process: 0 or -1; the teardown returns the fds
 * a real CUDA driver keeps (dev_test_close), or -1. */
int fixture_case_setup(struct fixture *f);
int fixture_case_teardown(struct fixture *f);

/* The main of a program whose cases (cmocka_unit_test...) share f. */
#define FIXTURE_MAIN(f, ...)                                                     \
	static int fixture_group_setup(void **st) { return fixture_setup(&(f)); }   \
	static int fixture_group_teardown(void **st) { return fixture_teardown(&(f)); } \
	static int fixture_case_begin(void) { return fixture_case_setup(&(f)); }   \
	static int fixture_case_end(void) { return fixture_case_teardown(&(f)); }  \
	int main(void)                                                           \
	{                                                                        \
		const struct CMUnitTest tests[] = { __VA_ARGS__ };               \
		return test_group_main(&(struct test_group){ (f).tag, tests,     \
			sizeof(tests) / sizeof(tests[0]), fixture_group_setup,  \
			fixture_group_teardown, fixture_case_begin,              \
			fixture_case_end, false });                              \
	}

/* Starts wsrvd serving name=dir with extra arguments (NULL-terminated) and
 * connects a client; a failure fails the case. */
void served_start(struct served *s, const char *name, const char *dir, ...);
/* The same, returning 0 or a negative errno (for group setups). */
int served_open(struct served *s, const char *name, const char *dir, const char *const *extra);
/* The same as served_stop, returning the server's exit status. */
int served_close(struct served *s);
/* Attaches s->m to name (a failure fails the case). */
void served_attach(struct served *s, const char *name);
/* Detaches, disconnects, stops the server with SIGTERM and checks that it
 * exits 0, and removes its directory. */
void served_stop(struct served *s);

/* Clients that send n Attach requests each and never read the replies,
 * against a server that serves "m": nhogs of them, closed by hogs_close. */
void hogs_open(const char *sock, int *fds, int nhogs, int n);
void hogs_close(int *fds, int nhogs);
/* A client that reads its replies attaches "m" three times all the same. */
void reader_not_cut_off(const char *sock);

#endif
