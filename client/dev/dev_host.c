// SPDX-License-Identifier: MIT
/* dev_host.c - the host device backend: "device" memory is this process's
 * own memory, placed on the worker's NUMA node; copies run in order on a
 * copy thread that plays the DMA engine, optionally paced to a bandwidth cap
 * so a PCIe link can be studied on a machine without an accelerator. */
#include <errno.h>
#include <numa.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#include "wire.h"
#include "clock.h"
#include "dev_host_share.h"
#include "device.h"

#define QUEUE 256
#define CHUNK (1u << 20)

struct job {
	void *dst;
	const void *src;
	size_t len;                 /* bytes per row */
	size_t height, pitch;       /* rows, and their distance in src */
	double *timing;             /* start, end; written before completion */
};

struct host_dev {
	struct wsrv_device dev;
	int node;
	char name[48];              /* its identity for device regions; "": by node */
	double bw;                  /* bytes per second; 0: no cap */
	pthread_t thread;
	pthread_mutex_t lock;
	pthread_cond_t more, progress;
	struct job q[QUEUE];
	int64_t submitted, completed;
	bool stop;
};

/* Copies in chunks; with a cap, each chunk waits for the time a link of
 * that bandwidth would take. */
/* Returns the copy's start time; its end is mono_now(). Uncapped, one memcpy
 * (large copies then use non-temporal stores); capped, chunks of about half
 * a millisecond of the link's time, each released when the link would have
 * carried it. */
static void copy_rows(struct host_dev *h, const struct job *j, double t0);

static double run_copy(struct host_dev *h, const struct job *j)
{
	double t0 = mono_now();

	if (j->height > 1) {
		copy_rows(h, j, t0);
		return t0;
	}
	size_t chunk = h->bw > 0 ? (size_t)(h->bw * 0.0005) : j->len;

	if (chunk < CHUNK)
		chunk = CHUNK;
	for (size_t off = 0; off < j->len; off += chunk) {
		size_t n = j->len - off < chunk ? j->len - off : chunk;
		memcpy((uint8_t *)j->dst + off, (const uint8_t *)j->src + off, n);
		if (h->bw > 0) {
			double due = t0 + (double)(off + n) / h->bw;
			double t = mono_now();
			if (due > t) {
				struct timespec ts = { (time_t)(due - t), (long)((due - t - (time_t)(due - t)) * 1e9) };
				nanosleep(&ts, NULL);
			}
		}
	}
	return t0;
}

/* A strided copy: row by row, paced like a flat one. */
static void copy_rows(struct host_dev *h, const struct job *j, double t0)
{
	for (size_t r = 0; r < j->height; r++) {
		memcpy((uint8_t *)j->dst + r * j->len, (const uint8_t *)j->src + r * j->pitch, j->len);
		if (h->bw > 0) {
			double due = t0 + (double)((r + 1) * j->len) / h->bw, t = mono_now();
			if (due > t + 0.0002) {
				struct timespec ts = { (time_t)(due - t), (long)((due - t - (time_t)(due - t)) * 1e9) };
				nanosleep(&ts, NULL);
			}
		}
	}
}

static void *engine(void *arg)
{
	struct host_dev *h = arg;

	pthread_mutex_lock(&h->lock);
	for (;;) {
		while (!h->stop && h->completed == h->submitted)
			pthread_cond_wait(&h->more, &h->lock);
		if (h->completed == h->submitted)
			break;
		struct job j = h->q[h->completed % QUEUE];
		pthread_mutex_unlock(&h->lock);
		double t0 = run_copy(h, &j), t1 = mono_now();
		pthread_mutex_lock(&h->lock);
		if (j.timing) {
			j.timing[0] = t0;
			j.timing[1] = t1;
		}
		h->completed++;
		pthread_cond_broadcast(&h->progress);
	}
	pthread_mutex_unlock(&h->lock);
	return NULL;
}

static int h_alloc(struct wsrv_device *d, size_t len, void **out)
{
	struct host_dev *h = (struct host_dev *)d;
	void *p = mmap(NULL, len ? len : 1, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

	if (p == MAP_FAILED)
		return cl_err(-ENOMEM, "host device: cannot allocate %zu bytes", len);
	if (h->node >= 0 && numa_available() >= 0)
		numa_tonode_memory(p, len ? len : 1, h->node);
	/* Touched now, on its node, so no copy pays for page faults (as a
	 * real device's memory is there when allocated). */
	memset(p, 0, len);
	*out = p;
	return 0;
}

static void h_free(struct wsrv_device *d, void *p, size_t len)
{
	if (p)
		munmap(p, len ? len : 1);
}

static int64_t h_copy2d(struct wsrv_device *d, void *dst, const void *src, size_t width,
			size_t height, size_t pitch, double *timing)
{
	struct host_dev *h = (struct host_dev *)d;
	int64_t fence;

	pthread_mutex_lock(&h->lock);
	while (h->submitted - h->completed >= QUEUE)
		pthread_cond_wait(&h->progress, &h->lock);
	h->q[h->submitted % QUEUE] = (struct job){ dst, src, width, height, pitch, timing };
	fence = ++h->submitted;
	pthread_cond_signal(&h->more);
	pthread_mutex_unlock(&h->lock);
	return fence;
}

static int64_t h_copy(struct wsrv_device *d, void *dst, const void *src, size_t len,
		      double *timing)
{
	return h_copy2d(d, dst, src, len, 1, len, timing);
}

static int h_done(struct wsrv_device *d, int64_t fence)
{
	struct host_dev *h = (struct host_dev *)d;
	int r;

	pthread_mutex_lock(&h->lock);
	r = h->completed >= fence;
	pthread_mutex_unlock(&h->lock);
	return r;
}

static int h_wait(struct wsrv_device *d, int64_t fence)
{
	struct host_dev *h = (struct host_dev *)d;

	pthread_mutex_lock(&h->lock);
	while (h->completed < fence)
		pthread_cond_wait(&h->progress, &h->lock);
	pthread_mutex_unlock(&h->lock);
	return 0;
}

static void h_destroy(struct wsrv_device *d)
{
	struct host_dev *h = (struct host_dev *)d;

	pthread_mutex_lock(&h->lock);
	h->stop = true;
	pthread_cond_signal(&h->more);
	pthread_mutex_unlock(&h->lock);
	pthread_join(h->thread, NULL);
	pthread_mutex_destroy(&h->lock);
	pthread_cond_destroy(&h->more);
	pthread_cond_destroy(&h->progress);
	free(h);
}

static int h_share_info(struct wsrv_device *d, struct dev_share_info *out)
{
	struct host_dev *h = (struct host_dev *)d;

	host_share_info(h->node, h->name, out);
	return 0;
}

static int h_share_create(struct wsrv_device *d, size_t len, struct dev_share *sh)
{
	return host_share_create(((struct host_dev *)d)->node, len, sh);
}

static int h_share_seal(struct wsrv_device *d, struct dev_share *sh)
{
	return host_share_seal(sh);
}

static int h_share_import(struct wsrv_device *d, int fd, size_t len, struct dev_share *sh)
{
	return host_share_import(fd, len, sh);
}

static void h_share_free(struct wsrv_device *d, struct dev_share *sh)
{
	host_share_free(sh);
}

static const struct device_ops host_ops = {
	.name = "host", .alloc = h_alloc, .free = h_free, .copy = h_copy, .copy2d = h_copy2d, .copy_peer = h_copy,
	.done = h_done, .wait = h_wait, .share_info = h_share_info,
	.share_create = h_share_create, .share_seal = h_share_seal,
	.share_import = h_share_import, .share_free = h_share_free, .destroy = h_destroy,
};

/* A device name: printable, no spaces or slashes, at most 40 bytes. */
static bool name_ok(const char *n)
{
	size_t len = strlen(n);

	for (size_t i = 0; i < len; i++)
		if ((unsigned char)n[i] <= 0x20 || n[i] == 0x7f || n[i] == '/')
			return false;
	return len <= 40;
}

WSRV_EXPORT int wsrv_device_host(const struct wsrv_host_opts *o, struct wsrv_device **out)
{
	struct wsrv_host_opts ho;
	struct host_dev *h;
	int r;

	CL_NEED(out);
	if ((r = CL_OPTS(o, &ho)) < 0)
		return r;
	if (!o)
		ho.numa_node = -1;
	if (ho.bandwidth_gbps < 0 || ho.bandwidth_gbps != ho.bandwidth_gbps)
		return cl_err(-EINVAL, "host device: bandwidth_gbps must be 0 or more");
	if (ho.numa_node < -1)
		return cl_err(-EINVAL, "host device: numa_node %d is not a node (-1: anywhere)", ho.numa_node);
	if (ho.device_name && !name_ok(ho.device_name))
		return cl_err(-EINVAL, "host device: device_name is 1 to 40 printable bytes without spaces or '/'");
	if (!(h = calloc(1, sizeof(*h))))
		return cl_err(-ENOMEM, "out of memory");
	h->dev.ops = &host_ops;
	h->node = ho.numa_node;
	if (ho.device_name)
		snprintf(h->name, sizeof(h->name), "%s", ho.device_name);
	h->bw = ho.bandwidth_gbps > 0 ? ho.bandwidth_gbps * 1e9 : 0;
	pthread_mutex_init(&h->lock, NULL);
	pthread_cond_init(&h->more, NULL);
	pthread_cond_init(&h->progress, NULL);
	if (pthread_create(&h->thread, NULL, engine, h) != 0) {
		free(h);
		return cl_err(-EAGAIN, "host device: cannot start its copy thread");
	}
	*out = &h->dev;
	return 0;
}

WSRV_EXPORT void wsrv_device_destroy(struct wsrv_device *d)
{
	if (d)
		d->ops->destroy(d);
}
