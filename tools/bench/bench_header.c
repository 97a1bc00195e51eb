// SPDX-License-Identifier: MIT
/* bench_header.c - `wsrv-bench header`: the reader's cost on a large header.
 *
 * Builds a header of N tensors (default 100,000, names as a real model's) and
 * times the full reader (UTF-8 check, JSON, schema, the ten rules) against a
 * bare jansson parse of the same bytes, the floor any JSON-based reader pays.
 */
#include <getopt.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cliarg.h"
#include "bench.h"
#include "progress.h"
#include "format_door.h"

static uint8_t *build(size_t n, size_t *len)
{
	size_t cap = n * 128 + 64, k = 8;
	uint8_t *b = malloc(cap + n);
	uint64_t hl;

	if (!b)
		return NULL;
	k += (size_t)snprintf((char *)b + k, cap - k, "{\"__metadata__\":{\"format\":\"pt\"}");
	for (size_t i = 0; i < n; i++)
		k += (size_t)snprintf((char *)b + k, cap - k,
				      ",\"model.layers.%zu.mlp.experts.%zu.up_proj.weight\":{\"dtype\":\"F8_E4M3\",\"shape\":[1],\"data_offsets\":[%zu,%zu]}",
				      i / 256, i % 256, i, i + 1);
	k += (size_t)snprintf((char *)b + k, cap - k, "}");
	hl = k - 8;
	memcpy(b, &hl, 8);
	memset(b + k, 0, n);
	*len = k + n;
	return b;
}

int bench_header(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "tensors", required_argument, NULL, 't' },
		{ "json", no_argument, NULL, 'j' },
		{ 0 },
	};
	size_t n = 100000, len;
	int json = 0, c, reps = 5;
	double best_reader = 1e9, best_json = 1e9;
	uint8_t *buf;

	optind = 1;
	while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		if (c == 't')
			n = (size_t)cliarg_long("wsrv-bench header", "--tensors", optarg, 1, 10000000);
		else if (c == 'j')
			json = 1;
		else
			return 2;
	}
	if (optind != argc) {
		fprintf(stderr, "wsrv-bench header: unexpected argument '%s'\n", argv[optind]);
		return 2;
	}
	if (!(buf = build(n, &len))) {
		fprintf(stderr, "wsrv-bench header: out of memory\n");
		return 1;
	}
	for (int r = 0; r < reps; r++) {
		struct st_file *f;
		struct errinfo e;
		json_error_t je;
		uint64_t hl;
		double t0 = mono_now();

		if (st_file_parse_buffer("bench", buf, len, &f, &e) < 0) {
			fprintf(stderr, "wsrv-bench header: %s\n", e.msg);
			return 1;
		}
		double t1 = mono_now();
		st_file_free(f);
		memcpy(&hl, buf, 8);
		double t2 = mono_now();
		json_t *j = json_loadb((const char *)buf + 8, hl, 0, &je);
		double t3 = mono_now();
		json_decref(j);
		best_reader = t1 - t0 < best_reader ? t1 - t0 : best_reader;
		best_json = t3 - t2 < best_json ? t3 - t2 : best_json;
	}
	if (json)
		printf("{\"tensors\": %zu, \"header_bytes\": %zu, \"reader_s\": %.6f, \"jansson_s\": %.6f, \"ratio\": %.3f}\n",
		       n, len - n - 8, best_reader, best_json, best_reader / best_json);
	else
		printf("header of %zu tensors (%.1f MB), best of %d:\n"
		       "  jansson parse alone (floor)   %8.1f ms\n"
		       "  wsrv reader, all rules        %8.1f ms   %.2fx the floor\n",
		       n, (double)(len - n - 8) / 1e6, reps, best_json * 1e3, best_reader * 1e3,
		       best_reader / best_json);
	free(buf);
	return 0;
}
