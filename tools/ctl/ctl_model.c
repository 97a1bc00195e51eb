// SPDX-License-Identifier: MIT
/* ctl_model.c - wsrvctl's commands that read a served model through
 * libwsrv: tensors, layers, verify, dump. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <xxhash.h>

#include "ctl.h"
#include "cliarg.h"
#include "escape.h"
#include "units.h"
#include "wsrv.h"

/* Connects and attaches to argv[1]; prints the reason and returns 1 on
 * failure. */
static int open_model(const struct ctl_ctx *c, const char *name, struct wsrv_client **cl,
		      struct wsrv_model **m)
{
	if (ctl_connect(c, cl))
		return 1;
	if (wsrv_attach(*cl, name, m) < 0) {
		fprintf(stderr, "wsrvctl: %s\n", wsrv_last_error());
		wsrv_disconnect(*cl);
		return 1;
	}
	return 0;
}

/* Starts a listing command: open_model, and the JSON array its rows go
 * into (the caller ends with close_listing). 1 on failure, said. */
static int open_listing(const struct ctl_ctx *c, const char *name, struct wsrv_client **cl,
			struct wsrv_model **m, json_t **a)
{
	if (open_model(c, name, cl, m))
		return 1;
	*a = json_array();
	return 0;
}

/* Ends a listing command: prints the JSON array a (--json) or drops it,
 * detaches m and disconnects cl. */
static int close_listing(const struct ctl_ctx *c, json_t *a, struct wsrv_client *cl, struct wsrv_model *m)
{
	if (c->json)
		ctl_print_json(a);
	else
		json_decref(a);
	wsrv_detach(m);
	wsrv_disconnect(cl);
	return 0;
}

/* Whether m has a layer group numbered layer (-1: the global group);
 * when not, says which it has. */
static bool has_layer(const struct wsrv_model *m, const char *name, long layer)
{
	struct wsrv_layer l;
	int32_t lo = INT32_MAX, hi = -1;

	for (size_t i = 0; wsrv_model_layer_info(m, i, &l) == 0; i++) {
		if (l.index == layer)
			return true;
		if (l.index >= 0) {
			lo = l.index < lo ? l.index : lo;
			hi = l.index > hi ? l.index : hi;
		}
	}
	fprintf(stderr, "wsrvctl: model %s has no layer %ld (its layers: %d to %d, and -1, the global group)\n",
		esc(name), layer, hi < 0 ? 0 : lo, hi);
	return false;
}

int ctl_tensors(const struct ctl_ctx *c, int argc, char **argv)
{
	struct wsrv_client *cl;
	struct wsrv_model *m;
	bool filter = false;
	long layer = 0;
	json_t *a;
	char shape[96];

	if (argc == 4 && strcmp(argv[2], "--layer") == 0) {
		filter = true;
		layer = cliarg_long("wsrvctl", "--layer", argv[3], -1, INT32_MAX);
	} else if (argc != 2) {
		fprintf(stderr, "usage: wsrvctl tensors MODEL [--layer N]\n");
		return 2;
	}
	if (open_listing(c, argv[1], &cl, &m, &a))
		return 1;
	if (filter && !has_layer(m, argv[1], layer)) {
		json_decref(a);
		wsrv_detach(m);
		wsrv_disconnect(cl);
		return 1;
	}
	if (!c->json)
		printf("%-60s %-8s %-20s %6s %12s %7s %12s %16s\n", "TENSOR", "DTYPE", "SHAPE", "LAYER", "BYTES",
		       "SEGMENT", "OFFSET", "XXH3");
	for (size_t i = 0; i < wsrv_model_tensor_count(m); i++) {
		struct wsrv_tensor t;
		wsrv_model_tensor(m, i, &t);
		if (filter && t.layer != layer)
			continue;
		fmt_shape(t.shape, t.rank, shape, sizeof(shape));
		if (c->json) {
			json_t *dims = json_array();
			char sum[17];
			for (uint32_t d = 0; d < t.rank; d++)
				json_array_append_new(dims, json_integer((json_int_t)t.shape[d]));
			snprintf(sum, sizeof(sum), "%016" PRIx64, t.xxh3);
			json_array_append_new(a, json_pack("{s:o, s:s, s:o, s:i, s:I, s:i, s:I, s:s}", "name",
				ctl_peer_str(t.name), "dtype", wsrv_dtype_name(t.dtype), "shape", dims, "layer", t.layer,
				"bytes", (json_int_t)t.size, "segment", (int)t.segment, "offset", (json_int_t)t.offset,
				"xxh3", sum));
		} else
			printf("%-60s %-8s %-20s %6d %12" PRIu64 " %7u %12" PRIu64 " %016" PRIx64 "\n", esc(t.name),
			       wsrv_dtype_name(t.dtype), shape, t.layer, t.size, t.segment, t.offset, t.xxh3);
	}
	return close_listing(c, a, cl, m);
}

int ctl_layers(const struct ctl_ctx *c, int argc, char **argv)
{
	struct wsrv_client *cl;
	struct wsrv_model *m;
	json_t *a;

	if (argc != 2) {
		fprintf(stderr, "usage: wsrvctl layers MODEL\n");
		return 2;
	}
	if (open_listing(c, argv[1], &cl, &m, &a))
		return 1;
	if (!c->json)
		printf("%-8s %8s %14s %8s %14s %14s\n", "LAYER", "TENSORS", "BYTES", "SEGMENT", "OFFSET", "LENGTH");
	for (size_t i = 0; i < wsrv_model_layer_count(m); i++) {
		struct wsrv_layer l;
		wsrv_model_layer_at(m, i, &l);
		if (c->json)
			json_array_append_new(a, json_pack("{s:i, s:i, s:I, s:i, s:I, s:I}", "layer", l.index,
				"tensors", (int)l.count, "bytes", (json_int_t)l.bytes, "segment", (int)l.segment,
				"offset", (json_int_t)l.offset, "length", (json_int_t)l.length));
		else if (l.index == WSRV_LAYER_GLOBAL)
			printf("%-8s %8u %14" PRIu64 " %8u %14" PRIu64 " %14" PRIu64 "\n", "global", l.count,
			       l.bytes, l.segment, l.offset, l.length);
		else
			printf("%-8d %8u %14" PRIu64 " %8u %14" PRIu64 " %14" PRIu64 "\n", l.index, l.count,
			       l.bytes, l.segment, l.offset, l.length);
	}
	return close_listing(c, a, cl, m);
}

/* Layer group i's checksums, against its bytes in the shared mapping. A
 * disk tier's layer is mapped for it (wsrv_model_wait, which holds it
 * until detach: the model is attached again after each such layer, so
 * that a model larger than its budget is verified within it); a layer the
 * server cannot read again counts its tensors as bad, naming the first. */
static int verify_layer(const struct ctl_ctx *c, const char *name, struct wsrv_client *cl, struct wsrv_model **mp,
			size_t i, uint64_t *bytes, size_t *bad)
{
	struct wsrv_model *m = *mp;
	struct wsrv_layer l;
	bool tiered;

	wsrv_model_layer_info(m, i, &l);
	tiered = !l.data;
	if (wsrv_model_wait(m, l.index, -1) < 0) {
		fprintf(stderr, "wsrvctl: layer %d: %s\n", l.index, wsrv_last_error());
		*bad += l.count;
	}
	for (uint32_t k = l.first; k < l.first + l.count; k++) {
		struct wsrv_tensor t;
		wsrv_model_tensor(m, k, &t);
		*bytes += t.held_size; /* a partial load's checksum is of its held part */
		if (t.data && XXH3_64bits((const uint8_t *)t.data + t.held_offset, t.held_size) != t.xxh3 &&
		    (*bad)++ < 10)
			fprintf(stderr, "wsrvctl: tensor %s: checksum mismatch\n", t.name);
	}
	if (tiered) {
		wsrv_detach(m);
		if (wsrv_attach(cl, name, mp) < 0) {
			fprintf(stderr, "wsrvctl: %s\n", wsrv_last_error());
			wsrv_disconnect(cl);
			return -1;
		}
	}
	(void)c;
	return 0;
}

int ctl_verify(const struct ctl_ctx *c, int argc, char **argv)
{
	struct wsrv_client *cl;
	struct wsrv_model *m;
	size_t bad = 0, n;
	uint64_t bytes = 0;
	long hold = 0;
	char b[32];

	if (argc == 4 && strcmp(argv[2], "--hold") == 0)
		hold = cliarg_long("wsrvctl", "--hold", argv[3], 0, 86400 * 365);
	else if (argc != 2) {
		fprintf(stderr, "usage: wsrvctl verify MODEL [--hold SECONDS]\n");
		return 2;
	}
	if (open_model(c, argv[1], &cl, &m))
		return 1;
	n = wsrv_model_tensor_count(m);
	for (size_t i = 0; i < wsrv_model_layer_count(m); i++)
		if (verify_layer(c, argv[1], cl, &m, i, &bytes, &bad) < 0)
			return 1;
	if (c->json)
		ctl_print_json(json_pack("{s:s, s:I, s:I, s:I, s:b}", "model", argv[1], "tensors", (json_int_t)n,
				     "bytes", (json_int_t)bytes, "mismatches", (json_int_t)bad, "ok", bad == 0));
	else
		printf("%s: %zu tensors, %s checked in the shared mapping: %s\n", argv[1], n,
		       fmt_bytes(bytes, b, sizeof(b)), bad ? "MISMATCH" : "all checksums match");
	fflush(stdout);
	if (hold > 0)
		sleep((unsigned)hold);
	wsrv_detach(m);
	wsrv_disconnect(cl);
	return bad ? 1 : 0;
}

/* len bytes into the file outp, or onto standard output for "-" (a pipe
 * takes them in parts): 0, or <0 having said why. */
static int write_out(const char *outp, const void *src, size_t len)
{
	bool out = strcmp(outp, "-") == 0;
	int fd = out ? STDOUT_FILENO : open(outp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	const char *p = src;
	int r = fd < 0 ? -errno : 0;

	for (size_t done = 0; r == 0 && done < len;) {
		ssize_t n = write(fd, p + done, len - done);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			r = n < 0 ? -errno : -EIO;
		else
			done += (size_t)n;
	}
	if (fd >= 0 && !out && close(fd) < 0 && r == 0)
		r = -errno;
	if (r < 0)
		fprintf(stderr, "wsrvctl: %s: %s\n", out ? "standard output" : outp, strerror(-r));
	return r;
}

/* The bytes of tensor name as rank of world sees them under plan_path:
 * through a stream on the host device, as a worker would have them. */
static int dump_view(struct wsrv_model *m, const char *name, const char *plan_path, int rank,
		     int world, const char *outp)
{
	struct wsrv_stream_opts so = { .struct_size = sizeof(so), .slots = 1, .rank = rank, .world = world };
	struct wsrv_plan *p = NULL;
	struct wsrv_device *d = NULL;
	struct wsrv_stream *s = NULL;
	struct wsrv_tensor t;
	struct wsrv_view v = { 0 };
	void *dev;
	int r = 1;

	if (wsrv_model_find(m, name, &t) < 0 || wsrv_plan_load(plan_path, &p) < 0 ||
	    wsrv_device_host(NULL, &d) < 0 || wsrv_stream_open(m, d, p, &so, &s) < 0 ||
	    wsrv_stream_acquire(s, t.layer) < 0 || wsrv_stream_tensor(s, name, &dev) < 0) {
		fprintf(stderr, "wsrvctl: %s\n", wsrv_last_error());
	} else {
		/* By name: an empty tensor can share its address with the next. */
		for (size_t i = 0; i < wsrv_model_tensor_count(m); i++) {
			struct wsrv_tensor x;
			wsrv_model_tensor(m, i, &x);
			if (strcmp(x.name, name) == 0) {
				wsrv_stream_view(s, i, &v);
				break;
			}
		}
		r = write_out(outp, dev, v.bytes) < 0 ? 1 : 0;
	}
	wsrv_stream_close(s);
	wsrv_device_destroy(d);
	wsrv_plan_free(p);
	return r;
}

int ctl_dump(const struct ctl_ctx *c, int argc, char **argv)
{
	const char *outp = NULL, *plan = NULL;
	struct wsrv_client *cl;
	struct wsrv_model *m;
	struct wsrv_tensor t;
	int r = 0, rank = 0, world = 1;
	bool tp = false;

	for (int i = 3; i + 1 < argc; i += 2) {
		if (strcmp(argv[i], "-o") == 0)
			outp = argv[i + 1];
		else if (strcmp(argv[i], "--plan") == 0)
			plan = argv[i + 1];
		else if (strcmp(argv[i], "--rank") == 0)
			rank = (int)cliarg_long("wsrvctl", "--rank", argv[i + 1], 0, 4095), tp = true;
		else if (strcmp(argv[i], "--world") == 0)
			world = (int)cliarg_long("wsrvctl", "--world", argv[i + 1], 1, 4096), tp = true;
		else
			outp = NULL, i = argc;
	}
	if (argc < 5 || argc % 2 == 0 || !outp || world < 1 || rank < 0 || rank >= world) {
		fprintf(stderr, "usage: wsrvctl dump MODEL TENSOR [--plan FILE --rank R --world W] -o FILE (-: stdout)\n");
		return 2;
	}
	if (tp && !plan) {
		fprintf(stderr, "wsrvctl: dump: --rank and --world need --plan (without it the whole tensor is dumped)\n");
		return 2;
	}
	if (open_model(c, argv[1], &cl, &m))
		return 1;
	if (plan) {
		r = dump_view(m, argv[2], plan, rank, world, outp);
	} else if (wsrv_model_find(m, argv[2], &t) < 0 ||
		   /* a disk tier's layer: mapped (and held) until detach */
		   (!t.data && (wsrv_model_wait(m, t.layer, -1) < 0 || wsrv_model_find(m, argv[2], &t) < 0))) {
		fprintf(stderr, "wsrvctl: %s\n", wsrv_last_error());
		r = 1;
	} else if (t.held_size < t.size) {
		fprintf(stderr, "wsrvctl: dump: this server loaded only bytes %llu-%llu of %s (a partial load); dump a rank's view with --plan --rank --world\n",
			(unsigned long long)t.held_offset, (unsigned long long)(t.held_offset + t.held_size), argv[2]);
		r = 1;
	} else if (write_out(outp, t.data, t.size) < 0) {
		r = 1;
	}
	wsrv_detach(m);
	wsrv_disconnect(cl);
	return r;
}
