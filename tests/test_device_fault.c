// SPDX-License-Identifier: MIT
/* test_device_fault.c - a device whose operations fail: the stream says so
 * (acquire, open) instead of handing out a slot whose copy never landed,
 * and recovers once the device does. The device is a stand-in built on
 * libwsrv's backend interface (client/device.h), handed to the shared
 * library like any backend. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>

#include "device.h"
#include "fixture.h"
#include "wsrv.h"

static int device_fault_aliases(void);
/* One wsrvd for every case, serving the model as "m", a client attached. */
static struct fixture F = { .tag = "devfault", .serve = "m", .case_setup = device_fault_aliases, .models = {
	{ "tiny", 1 << 20, .layers = 3, .shards = 1, .seed = 5 } } };

enum fault { OK, COPY_FAILS, WAIT_FAILS };

struct faulty {
	struct wsrv_device dev;
	enum fault fault;
	int64_t queued;              /* copies done synchronously so far */
};

static int f_alloc(struct wsrv_device *d, size_t len, void **out)
{
	return (*out = malloc(len ? len : 1)) ? 0 : -ENOMEM;
}

static void f_free(struct wsrv_device *d, void *p, size_t len)
{
	free(p);
}

static int64_t f_copy2d(struct wsrv_device *d, void *dst, const void *src, size_t width,
			size_t height, size_t pitch, double *timing)
{
	struct faulty *f = (struct faulty *)d;

	if (f->fault == COPY_FAILS)
		return -EIO;
	for (size_t r = 0; r < height; r++)
		memcpy((char *)dst + r * width, (const char *)src + r * pitch, width);
	if (timing)
		timing[0] = timing[1] = 0;
	return ++f->queued;
}

static int64_t f_copy(struct wsrv_device *d, void *dst, const void *src, size_t len, double *timing)
{
	return f_copy2d(d, dst, src, len, 1, len, timing);
}

/* A failing device never reports a copy done: acquire has to wait. */
static int f_done(struct wsrv_device *d, int64_t fence)
{
	return ((struct faulty *)d)->fault == OK;
}

static int f_wait(struct wsrv_device *d, int64_t fence)
{
	return ((struct faulty *)d)->fault == WAIT_FAILS ? -EIO : 0;
}

static void f_destroy(struct wsrv_device *d)
{
	free(d);
}

static const struct device_ops faulty_ops = {
	.name = "faulty", .alloc = f_alloc, .free = f_free, .copy = f_copy, .copy2d = f_copy2d,
	.done = f_done, .wait = f_wait, .destroy = f_destroy,
};

static struct wsrv_client *cl;
static struct wsrv_model *m;

static struct faulty *faulty_new(enum fault fault)
{
	struct faulty *f = calloc(1, sizeof(*f));

	assert_non_null(f);
	f->dev.ops = &faulty_ops;
	f->fault = fault;
	return f;
}

/* The first numbered layer. */
static int32_t first_layer(void)
{
	struct wsrv_layer l;

	assert_int_equal(wsrv_model_layer_at(m, 1, &l), 0);
	return l.index;
}

static void acquire_reports_a_failed_wait(void **st)
{
	struct faulty *f = faulty_new(OK);
	struct wsrv_stream *s;
	int32_t l = first_layer();
	void *d;

	assert_int_equal(wsrv_stream_open(m, &f->dev, NULL, NULL, &s), 0);
	f->fault = WAIT_FAILS;
	assert_int_equal(wsrv_stream_acquire(s, l), -EIO);
	assert_non_null(strstr(wsrv_last_error(), "its copy failed"));
	/* Not acquired: its tensors have no address yet. */
	struct wsrv_tensor t;
	for (size_t i = 0; i < wsrv_model_tensor_count(m); i++)
		if (wsrv_model_tensor(m, i, &t) == 0 && t.layer == l)
			assert_int_equal(wsrv_stream_tensor_at(s, i, &d), -EAGAIN);
	/* The device recovers: the same layer can be acquired. */
	f->fault = OK;
	assert_int_equal(wsrv_stream_acquire(s, l), 0);
	assert_int_equal(wsrv_stream_release(s, l), 0);
	wsrv_stream_close(s);
	wsrv_device_destroy(&f->dev);
}

static void acquire_reports_a_copy_that_cannot_queue(void **st)
{
	struct faulty *f = faulty_new(OK);
	struct wsrv_stream_opts o = { .struct_size = sizeof(o), .slots = 1 };
	struct wsrv_stream *s;
	struct wsrv_layer a, b;

	assert_int_equal(wsrv_model_layer_at(m, 1, &a), 0);
	assert_int_equal(wsrv_model_layer_at(m, 2, &b), 0);
	assert_int_equal(wsrv_stream_open(m, &f->dev, NULL, &o, &s), 0);
	/* One slot, holding the first layer: the second needs a new copy. */
	f->fault = COPY_FAILS;
	assert_true(wsrv_stream_acquire(s, b.index) < 0);
	f->fault = OK;
	assert_int_equal(wsrv_stream_acquire(s, b.index), 0);
	assert_int_equal(wsrv_stream_release(s, b.index), 0);
	wsrv_stream_close(s);
	wsrv_device_destroy(&f->dev);
}

static void open_reports_a_failed_upload(void **st)
{
	struct wsrv_stream *s = NULL;
	struct faulty *f = faulty_new(WAIT_FAILS);

	/* The global group is resident by default: its upload is waited for. */
	assert_int_equal(wsrv_stream_open(m, &f->dev, NULL, NULL, &s), -EIO);
	assert_null(s);
	assert_non_null(strstr(wsrv_last_error(), "resident"));
	f->fault = COPY_FAILS;
	assert_int_equal(wsrv_stream_open(m, &f->dev, NULL, NULL, &s), -EIO);
	assert_null(s);
	wsrv_device_destroy(&f->dev);
}

static int device_fault_aliases(void)
{
	cl = F.srv.cl;
	m = F.srv.m;
	return 0;
}

FIXTURE_MAIN(F,
	cmocka_unit_test(acquire_reports_a_failed_wait),
	cmocka_unit_test(acquire_reports_a_copy_that_cannot_queue),
	cmocka_unit_test(open_reports_a_failed_upload),
)
