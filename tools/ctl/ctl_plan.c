// SPDX-License-Identifier: MIT
/* ctl_plan.c - `wsrvctl plan MODEL --plan FILE [--rank R] [--slots D]`:
 * where every tensor lives under a plan (nothing left out), and what the
 * device memory and the copy volume per pass come to. */
#include <getopt.h>
#include <inttypes.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ctl.h"
#include "cliarg.h"
#include "escape.h"
#include "units.h"
#include "wsrv.h"

static int plan_report(const struct ctl_ctx *c, struct wsrv_model *m, struct wsrv_stream *s, int rank)
{
	struct wsrv_stream_stats st;
	json_t *ts = json_array();
	char b[4][32];

	wsrv_stream_stats(s, &st);
	if (!c->json)
		printf("%-64s %6s %12s %12s  %s\n", "TENSOR", "LAYER", "BYTES", "THIS RANK", "WHERE");
	for (size_t i = 0; i < wsrv_model_tensor_count(m); i++) {
		struct wsrv_tensor t;
		const char *where;
		wsrv_model_tensor(m, i, &t);
		struct wsrv_view v;
		int res = wsrv_stream_residency(s, i);
		wsrv_stream_view(s, i, &v);
		where = res == WSRV_RESIDENT ? "resident" : res == WSRV_STREAMED ? "streamed" : "not in this rank's view";
		if (c->json)
			json_array_append_new(ts, json_pack("{s:o, s:i, s:I, s:I, s:s}", "name", ctl_peer_str(t.name),
				"layer", t.layer, "bytes", (json_int_t)t.size, "view_bytes", (json_int_t)v.bytes,
				"where", where));
		else
			printf("%-64s %6d %12" PRIu64 " %12" PRIu64 "  %s\n", esc(t.name), t.layer, t.size,
			       v.present ? v.bytes : 0, where);
	}
	if (c->json) {
		json_t *o = json_pack("{s:i, s:i, s:I, s:I, s:I, s:I, s:o}", "rank", rank,
			"slots", (int)st.slots, "resident_bytes", (json_int_t)st.resident_bytes,
			"slot_bytes", (json_int_t)st.slot_bytes, "device_bytes", (json_int_t)st.device_bytes,
			"pass_copy_bytes", (json_int_t)st.pass_copy_bytes, "tensors", ts);
		json_dumpf(o, stdout, JSON_INDENT(2));
		putchar('\n');
		json_decref(o);
		return 0;
	}
	json_decref(ts);
	printf("\nrank %d: resident %s + %u slots of %s = %s of device memory; %s copied per pass\n",
	       rank, fmt_bytes(st.resident_bytes, b[0], 32), st.slots, fmt_bytes(st.slot_bytes, b[1], 32),
	       fmt_bytes(st.device_bytes, b[2], 32), fmt_bytes(st.pass_copy_bytes, b[3], 32));
	return 0;
}

int ctl_plan(const struct ctl_ctx *c, int argc, char **argv)
{
	static const struct option opts[] = {
		{ "plan", required_argument, NULL, 'p' },
		{ "rank", required_argument, NULL, 'r' },
		{ "world", required_argument, NULL, 'w' },
		{ "slots", required_argument, NULL, 's' },
		{ 0 },
	};
	struct wsrv_stream_opts so = { .struct_size = sizeof(so), .slots = 2 };
	const char *plan_path = NULL;
	struct wsrv_plan *p = NULL;
	struct wsrv_client *cl;
	struct wsrv_model *m;
	struct wsrv_stream *s;
	int o, world = 1, r = 1;

	optind = 1;
	while ((o = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		if (o == 'p') plan_path = optarg;
		else if (o == 'r') so.rank = (int)cliarg_long("wsrvctl", "--rank", optarg, 0, 4095);
		else if (o == 'w') so.world = world = (int)cliarg_long("wsrvctl", "--world", optarg, 1, 4096);
		else if (o == 's') so.slots = (unsigned)cliarg_long("wsrvctl", "--slots", optarg, 1, 64);
		else return 2;
	}
	if (optind + 1 != argc || !plan_path || world < 1 || so.rank < 0 || so.rank >= world) {
		fprintf(stderr, "usage: wsrvctl plan MODEL --plan FILE [--rank R --world W] [--slots D]\n");
		return 2;
	}
	if (wsrv_plan_load(plan_path, &p) < 0) {
		fprintf(stderr, "wsrvctl: %s\n", wsrv_last_error());
		return 1;
	}
	if (ctl_connect(c, &cl)) {
		wsrv_plan_free(p);
		return 1;
	}
	if (wsrv_attach(cl, argv[optind], &m) < 0) {
		fprintf(stderr, "wsrvctl: %s\n", wsrv_last_error());
		wsrv_disconnect(cl);
		wsrv_plan_free(p);
		return 1;
	}
	if (wsrv_stream_open(m, NULL, p, &so, &s) < 0) {
		fprintf(stderr, "wsrvctl: %s\n", wsrv_last_error());
	} else {
		r = plan_report(c, m, s, so.rank);
		wsrv_stream_close(s);
	}
	wsrv_plan_free(p);
	wsrv_detach(m);
	wsrv_disconnect(cl);
	return r;
}
