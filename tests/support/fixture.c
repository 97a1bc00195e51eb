// SPDX-License-Identifier: MIT
/* fixture.c - the test programs' fixture and a case's served model
 * (fixture.h). */
#include <stdbool.h>

#include "fixture.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "dev_bytes.h"
#include "wsrv.h"
#include "wsrv.pb-c.h"

/* Detaches s->m and disconnects s->cl (either may be NULL). */
static void served_drop(struct served *s)
{
	wsrv_detach(s->m);
	s->m = NULL;
	wsrv_disconnect(s->cl);
	s->cl = NULL;
}

static int make_dirs(struct fixture *f)
{
	for (int i = 0; i < FIXTURE_MODELS; i++) {
		const struct fixture_model *m = &f->models[i];
		char tag[64];
		if (!m->preset)
			continue;
		snprintf(tag, sizeof(tag), "%s-model%d", f->tag, i);
		if (!(f->dir[i] = test_tmpdir(tag)))
			return -1;
		if (m->preset[0] && make_model_moe(f->dir[i], m->preset, m->size, m->layers, m->shards,
						m->seed, m->experts, m->topk) < 0)
			return -1;
		if (f->world_readable && chmod(f->dir[i], 0755) < 0)
			return -1;
	}
	return 0;
}

int fixture_setup(struct fixture *f)
{
	signal(SIGPIPE, SIG_IGN);
	f->fds = count_fds();
	if (make_dirs(f) < 0)
		return -1;
	if (f->serve && server_start_argv(&f->srv.ts, f->serve, f->dir[0], f->serve_args) < 0)
		return -1;
	if (f->two_models && two_models_start(&f->two, f->tag, f->two_models) < 0)
		return -1;
	return f->setup ? f->setup() : 0;
}

int fixture_case_setup(struct fixture *f)
{
	if (f->serve && (wsrv_connect(f->srv.ts.sock, NULL, &f->srv.cl) < 0 ||
			 wsrv_attach(f->srv.cl, f->serve, &f->srv.m) < 0)) {
		fprintf(stderr, "a client of the fixture's wsrvd: %s (log: %s)\n", wsrv_last_error(),
			f->srv.ts.log);
		return -1;
	}
	if (f->device && dev_test_open(f->srv.m, &f->dev) < 0)
		return -1;
	if (f->two_models && two_models_open(&f->two) < 0)
		return -1;
	return f->case_setup ? f->case_setup() : 0;
}

int fixture_case_teardown(struct fixture *f)
{
	int kept = 0;

	if (f->case_teardown)
		f->case_teardown();
	if (f->device && f->dev)
		kept = dev_test_close(f->dev);
	f->dev = NULL;
	if (f->two_models)
		two_models_close(&f->two);
	served_drop(&f->srv);
	return kept;
}

int fixture_teardown(struct fixture *f)
{
	int st = 0;

	if (f->teardown)
		f->teardown();
	if (f->two_models)
		two_models_stop(&f->two);
	if (f->serve && f->srv.ts.pid > 0 && (st = served_close(&f->srv)) != 0)
		fprintf(stderr, "wsrvd exited with %d; its log is in %s\n", st, f->srv.ts.log);
	for (int i = 0; i < FIXTURE_MODELS; i++) {
		if (f->dir[i])
			rm_rf(f->dir[i]);
		free(f->dir[i]);
		f->dir[i] = NULL;
	}
	return fd_leak_check(f->fds) < 0 || st != 0 ? -1 : 0;
}

int served_open(struct served *s, const char *name, const char *dir, const char *const *extra)
{
	int r = server_start_argv(&s->ts, name, dir, extra);

	s->m = NULL;
	s->cl = NULL;
	if (r == 0 && wsrv_connect(s->ts.sock, NULL, &s->cl) < 0)
		r = -ECONNREFUSED;
	return r;
}

int served_close(struct served *s)
{
	int st;

	served_drop(s);
	st = server_stop(&s->ts, SIGTERM);
	if (st == 0)
		rm_rf(s->ts.dir);
	return st;
}

void served_start(struct served *s, const char *name, const char *dir, ...)
{
	const char *args[32];
	va_list ap;

	va_start(ap, dir);
	args_collect(ap, args, 32);
	va_end(ap);
	if (served_open(s, name, dir, args) < 0)
		fail_msg("wsrvd serving %s: %s (log: %s)", dir, wsrv_last_error(), s->ts.log);
}

void served_attach(struct served *s, const char *name)
{
	if (wsrv_attach(s->cl, name, &s->m) < 0)
		fail_msg("attach %s: %s", name, wsrv_last_error());
}

void served_stop(struct served *s)
{
	assert_int_equal(served_close(s), 0);
}

void hogs_open(const char *sock, int *fds, int nhogs, int n)
{
	Wsrv__Request q = WSRV__REQUEST__INIT;
	Wsrv__Attach a = WSRV__ATTACH__INIT;

	a.model = "m";
	q.body_case = WSRV__REQUEST__BODY_ATTACH;
	q.attach = &a;
	for (int i = 0; i < nhogs; i++) {
		fds[i] = raw_connect(sock);
		assert_true(fds[i] >= 0);
		raw_hello(fds[i], "never-reads");
		for (int k = 0; k < n; k++)
			raw_send(fds[i], &q, NULL, 0);
	}
	sleep_ms(300);
}

void hogs_close(int *fds, int nhogs)
{
	for (int i = 0; i < nhogs; i++)
		close(fds[i]);
}

void reader_not_cut_off(const char *sock)
{
	struct wsrv_client *good;
	struct wsrv_model *gm;

	assert_int_equal(wsrv_connect(sock, NULL, &good), 0);
	for (int i = 0; i < 3; i++) {
		if (wsrv_attach(good, "m", &gm) < 0)
			fail_msg("the reading client was cut off: %s", wsrv_last_error());
		wsrv_detach(gm);
	}
	wsrv_disconnect(good);
}
