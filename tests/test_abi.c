// SPDX-License-Identifier: MIT
/* test_abi.c - libwsrv's promises about its ABI: the shared library
 * exports exactly the header's functions, each under its version in the
 * map; the version macros agree with wsrv_version(); option structs are
 * read by their size (older and newer callers) and refuse what this
 * library does not know; every function refuses NULL with -EINVAL and a
 * sentence instead of crashing. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>
#include <regex.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "helpers.h"
#include "wsrv.h"

#define MAX_NAMES 128

struct names {
	char *v[MAX_NAMES];
	size_t n;
};

static void add(struct names *s, const char *name, size_t len)
{
	for (size_t i = 0; i < s->n; i++)
		if (strlen(s->v[i]) == len && strncmp(s->v[i], name, len) == 0)
			return;
	assert_true(s->n < MAX_NAMES);
	s->v[s->n++] = strndup(name, len);
}

static int abi_cmp(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Every match of the regex's first group in the file (or command output). */
static void collect(FILE *f, const char *re, struct names *out)
{
	char line[1024];
	regmatch_t mt[2];
	regex_t rx;

	assert_int_equal(regcomp(&rx, re, REG_EXTENDED), 0);
	while (fgets(line, sizeof(line), f)) {
		const char *p = line;
		line[strcspn(line, "\n")] = 0;
		while (regexec(&rx, p, 2, mt, 0) == 0) {
			add(out, p + mt[1].rm_so, (size_t)(mt[1].rm_eo - mt[1].rm_so));
			p += mt[0].rm_eo;
		}
	}
	regfree(&rx);
	qsort(out->v, out->n, sizeof(char *), abi_cmp);
}

static void names_free(struct names *s)
{
	for (size_t i = 0; i < s->n; i++)
		free(s->v[i]);
}

static void same_names(const struct names *a, const char *an, const struct names *b, const char *bn)
{
	for (size_t i = 0, j = 0; i < a->n || j < b->n;) {
		int c = i == a->n ? 1 : j == b->n ? -1 : strcmp(a->v[i], b->v[j]);
		if (c < 0)
			fail_msg("%s is in %s but not in %s", a->v[i], an, bn);
		if (c > 0)
			fail_msg("%s is in %s but not in %s", b->v[j], bn, an);
		i++, j++;
	}
}

static FILE *open_env(const char *var)
{
	const char *p = getenv(var);
	FILE *f;

	if (!p)
		fail_msg("%s is not set (meson test sets it)", var);
	f = fopen(p, "re");
	if (!f)
		fail_msg("%s: cannot open %s", var, p);
	return f;
}

/* Each "name@@NODE" of lib is under NODE in libwsrv.map, the last node
 * that names it, and each "name@NODE" (an older version kept, when a
 * result struct grew) under an earlier one: a symbol never moves. lib is
 * left holding the names alone, once each. */
static void versioned_as_in_map(struct names *lib)
{
	char line[256], node[64] = "", want[200];
	struct names map = { 0 }, seen = { 0 }, names = { 0 };
	FILE *f = open_env("WSRV_MAP");

	while (fgets(line, sizeof(line), f)) {
		char name[128];
		if (sscanf(line, "%63[A-Z0-9_.] {", node) == 1 && strchr(line, '{'))
			continue;
		if (sscanf(line, " %127[a-z0-9_];", name) != 1 || strncmp(name, "wsrv_", 5) != 0)
			continue;
		/* Named in an earlier node: that one becomes an old version. */
		for (size_t i = 0; i < seen.n; i++) {
			size_t n = strlen(name);
			if (strncmp(seen.v[i], name, n) == 0 && strncmp(seen.v[i] + n, "@@", 2) == 0)
				memmove(seen.v[i] + n + 1, seen.v[i] + n + 2, strlen(seen.v[i] + n + 2) + 1);
		}
		snprintf(want, sizeof(want), "%s@@%s", name, node);
		seen.v[seen.n++] = strdup(want);
		assert_true(seen.n < MAX_NAMES);
	}
	fclose(f);
	for (size_t i = 0; i < seen.n; i++)
		add(&map, seen.v[i], strlen(seen.v[i]));
	names_free(&seen);
	qsort(map.v, map.n, sizeof(char *), abi_cmp);
	same_names(lib, "libwsrv.so's exports", &map, "libwsrv.map's version nodes");
	names_free(&map);
	for (size_t i = 0; i < lib->n; i++)
		add(&names, lib->v[i], strcspn(lib->v[i], "@"));
	names_free(lib);
	*lib = names;
	qsort(lib->v, lib->n, sizeof(char *), abi_cmp);
}

static void exports_are_the_header(void **st)
{
	struct names header = { 0 }, map = { 0 }, lib = { 0 }, other = { 0 };
	char cmd[1200];
	FILE *f;

	f = open_env("WSRV_HEADER");
	collect(f, "\\b(wsrv_[a-z0-9_]+)\\(", &header);
	fclose(f);
	f = open_env("WSRV_MAP");
	collect(f, "^[[:space:]]+(wsrv_[a-z0-9_]+);", &map);
	fclose(f);
	snprintf(cmd, sizeof(cmd), "nm -D --defined-only '%s'", getenv("WSRV_LIB"));
	assert_non_null(f = popen(cmd, "r"));
	collect(f, " [TDBRW] (wsrv_[a-z0-9_]+@@?LIBWSRV_[0-9.]+)$", &lib);
	pclose(f);
	versioned_as_in_map(&lib);
	/* Nothing else is exported (the version node itself is an A symbol). */
	assert_non_null(f = popen(cmd, "r"));
	collect(f, " [TDBRWV] ([^@ ]+)", &other);
	pclose(f);
	assert_true(header.n > 40);
	same_names(&header, "wsrv.h", &map, "libwsrv.map");
	same_names(&header, "wsrv.h", &lib, "libwsrv.so's versioned exports");
	same_names(&header, "wsrv.h", &other, "libwsrv.so's exports");
	names_free(&header);
	names_free(&map);
	names_free(&lib);
	names_free(&other);
}

static void version_agrees(void **st)
{
	char want[64];

	snprintf(want, sizeof(want), "%d.%d.%d", WSRV_VERSION_MAJOR, WSRV_VERSION_MINOR,
		 WSRV_VERSION_PATCH);
	assert_string_equal(WSRV_VERSION, want);
	assert_string_equal(wsrv_version(), WSRV_VERSION);
}

/* A struct from a newer header: this library's, then fields it does not
 * know. */
struct newer_host_opts {
	struct wsrv_host_opts known;
	uint64_t unknown;
};

static void options_read_by_size(void **st)
{
	struct newer_host_opts n = { .known = { .struct_size = sizeof(n), .numa_node = -1 } };
	struct wsrv_host_opts o = { .numa_node = -1 };
	struct wsrv_device *d = NULL;

	/* A caller who forgot struct_size. */
	assert_int_equal(wsrv_device_host(&o, &d), -EINVAL);
	assert_non_null(strstr(wsrv_last_error(), "wsrv_device_host: the options' struct_size is 0"));
	/* Larger than this library knows, the rest zero: fine. */
	assert_int_equal(wsrv_device_host(&n.known, &d), 0);
	wsrv_device_destroy(d);
	/* ... but a field this library does not know is set: refused. */
	n.unknown = 1;
	assert_int_equal(wsrv_device_host(&n.known, &d), -E2BIG);
	/* Reserved space must be zero. */
	o.struct_size = sizeof(o);
	o.reserved[2] = 7;
	assert_int_equal(wsrv_device_host(&o, &d), -EINVAL);
	assert_non_null(strstr(wsrv_last_error(), "reserved"));
	/* Garbage as a size. */
	o.struct_size = 1u << 30;
	assert_int_equal(wsrv_device_host(&o, &d), -E2BIG);
	/* The same rule for the other option structs. */
	struct wsrv_connect_opts co = { .timeout_ms = 5 };
	struct wsrv_client *c;
	assert_int_equal(wsrv_connect("/nonexistent/wsrv.sock", &co, &c), -EINVAL);
	co.struct_size = sizeof(co);
	assert_int_equal(wsrv_connect("/nonexistent/wsrv.sock", &co, &c), -ENOENT);
	co.timeout_ms = -1;
	assert_int_equal(wsrv_connect("/nonexistent/wsrv.sock", &co, &c), -EINVAL);
	struct wsrv_cuda_opts cu = { 0 };
	assert_int_equal(wsrv_device_cuda(&cu, &d), -EINVAL);
}

static void expect_einval(int r, const char *fn)
{
	if (r != -EINVAL)
		fail_msg("%s with NULL returned %d, not -EINVAL", fn, r);
	if (!strstr(wsrv_last_error(), "NULL"))
		fail_msg("%s: the sentence does not say what was NULL: %s", fn, wsrv_last_error());
}

#define NUL(call) expect_einval(call, #call)

static void null_arguments_refused(void **st)
{
	struct wsrv_tensor t;
	struct wsrv_layer l;
	struct wsrv_lease ls;
	struct wsrv_view v;
	struct wsrv_stream_stats ss;
	struct wsrv_model_info mi;
	struct wsrv_server_stats sv;
	struct wsrv_model_stats ms;
	struct wsrv_stream_record sr;
	struct wsrv_held held;
	uint64_t blk[2];
	size_t len;
	void *p;

	NUL(wsrv_connect(NULL, NULL, NULL));
	NUL(wsrv_list_models(NULL, (struct wsrv_model_list **)&p));
	NUL(wsrv_model_list_at(NULL, 0, &mi));
	NUL(wsrv_stats(NULL, (struct wsrv_stats **)&p));
	NUL(wsrv_stats_server(NULL, &sv));
	NUL(wsrv_stats_model(NULL, 0, &ms));
	NUL(wsrv_stats_stream(NULL, 0, &sr));
	NUL(wsrv_attach(NULL, "m", (struct wsrv_model **)&p));
	NUL(wsrv_model_tensor(NULL, 0, &t));
	NUL(wsrv_model_find(NULL, "x", &t));
	NUL(wsrv_model_layer_at(NULL, 0, &l));
	NUL(wsrv_model_layer(NULL, 0, &l));
	NUL(wsrv_model_fp8_block(NULL, blk));
	NUL(wsrv_model_held(NULL, &held));
	NUL(wsrv_fetch_layer(NULL, 0, &ls));
	NUL(wsrv_release(NULL, 1));
	NUL(wsrv_device_host(NULL, NULL));
	NUL(wsrv_device_cuda(NULL, NULL));
	NUL(wsrv_plan_new(NULL));
	NUL(wsrv_plan_parse(NULL, 0, (struct wsrv_plan **)&p));
	NUL(wsrv_plan_load(NULL, (struct wsrv_plan **)&p));
	NUL(wsrv_plan_add(NULL, "x", WSRV_STREAMED, 0));
	NUL(wsrv_plan_set_budget(NULL, 1));
	NUL(wsrv_stream_open(NULL, NULL, NULL, NULL, (struct wsrv_stream **)&p));
	NUL(wsrv_stream_acquire(NULL, 0));
	NUL(wsrv_stream_release(NULL, 0));
	NUL(wsrv_stream_tensor(NULL, "x", &p));
	NUL(wsrv_stream_tensor_at(NULL, 0, &p));
	NUL(wsrv_stream_residency(NULL, 0));
	NUL(wsrv_stream_view(NULL, 0, &v));
	NUL(wsrv_stream_stats(NULL, &ss));
	NUL(wsrv_stream_report(NULL));
	/* Counts, names and frees take NULL quietly. */
	assert_int_equal(wsrv_model_tensor_count(NULL), 0);
	assert_int_equal(wsrv_model_layer_count(NULL), 0);
	assert_int_equal(wsrv_model_list_count(NULL), 0);
	assert_int_equal(wsrv_stats_model_count(NULL), 0);
	assert_int_equal(wsrv_stats_stream_count(NULL), 0);
	assert_null(wsrv_model_name(NULL));
	assert_null(wsrv_model_config(NULL, &len));
	assert_string_equal(wsrv_dtype_name(-1), "?");
	wsrv_disconnect(NULL);
	wsrv_detach(NULL);
	wsrv_model_list_free(NULL);
	wsrv_stats_free(NULL);
	wsrv_device_destroy(NULL);
	wsrv_plan_free(NULL);
	wsrv_stream_close(NULL);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(exports_are_the_header),
		cmocka_unit_test(version_agrees),
		cmocka_unit_test(options_read_by_size),
		cmocka_unit_test(null_arguments_refused),
	};
	int before = count_fds(), r = cmocka_run_group_tests(tests, NULL, NULL);

	return r ?: (fd_leak_check(before) ? 1 : 0);
}
