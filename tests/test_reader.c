// SPDX-License-Identifier: MIT
/* test_reader.c - the safetensors reader: one test per reference rule, what
 * the reference accepts, its order of checks, and its fixture files. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fixture.h"
#include "st_reader.h"

/* dir[0]: scratch. */
static struct fixture F = { .tag = "reader", .models = { { "" } } };

/* Parses header + dlen data bytes from memory; returns the result and keeps
 * the error for the caller. */
static int parse(const char *header, size_t dlen, struct st_file **f, struct errinfo *e)
{
	size_t len;
	uint8_t *b = st_build(header, dlen, NULL, &len);
	int r = st_file_parse_buffer("t.safetensors", b, len, f, e);

	free(b);
	return r;
}

static void expect_rule(const char *header, size_t dlen, enum st_rule rule, const char *needle)
{
	struct st_file *f = NULL;
	struct errinfo e = { 0 };
	int r = parse(header, dlen, &f, &e);

	if (r == 0)
		fail_msg("accepted, expected %s: %s", st_rule_name(rule), header);
	assert_int_equal(r, -EINVAL);
	if (e.rule != (int)rule)
		fail_msg("got %s (%s), expected %s", st_rule_name(e.rule), e.msg, st_rule_name(rule));
	assert_non_null(strstr(e.msg, "t.safetensors: "));
	assert_non_null(strstr(e.msg, st_rule_name(rule)));
	if (needle && !strstr(e.msg, needle))
		fail_msg("'%s' not in: %s", needle, e.msg);
	assert_null(f);
}

static struct st_file *expect_ok(const char *header, size_t dlen)
{
	struct st_file *f = NULL;
	struct errinfo e = { 0 };

	if (parse(header, dlen, &f, &e) < 0)
		fail_msg("rejected: %s", e.msg);
	return f;
}

static void rule1_header_too_small(void **s)
{
	struct st_file *f = NULL;
	struct errinfo e;
	uint8_t b[7] = { 0 };

	for (size_t n = 0; n < 8; n++) {
		assert_int_equal(st_file_parse_buffer("t.safetensors", b, n, &f, &e), -EINVAL);
		assert_int_equal(e.rule, ST_HEADER_TOO_SMALL);
	}
}

static void rule2_header_too_large(void **s)
{
	uint8_t b[16] = { 0 };
	uint64_t n = ST_MAX_HEADER + 1;
	struct st_file *f = NULL;
	struct errinfo e;

	memcpy(b, &n, 8);
	assert_int_equal(st_file_parse_buffer("t.safetensors", b, sizeof(b), &f, &e), -EINVAL);
	assert_int_equal(e.rule, ST_HEADER_TOO_LARGE);
	n = UINT64_MAX; /* 8 + N would overflow: rule 2 speaks first */
	memcpy(b, &n, 8);
	assert_int_equal(st_file_parse_buffer("t.safetensors", b, sizeof(b), &f, &e), -EINVAL);
	assert_int_equal(e.rule, ST_HEADER_TOO_LARGE);
}

static void rule3_invalid_header_length(void **s)
{
	uint8_t b[40] = { 0 };
	uint64_t n = 33; /* 8 + 33 > 40 */
	struct st_file *f = NULL;
	struct errinfo e;

	memcpy(b, &n, 8);
	assert_int_equal(st_file_parse_buffer("t.safetensors", b, sizeof(b), &f, &e), -EINVAL);
	assert_int_equal(e.rule, ST_INVALID_HEADER_LENGTH);
}

static void rule4_invalid_header(void **s)
{
	expect_rule("{\"a\xC3\x28\":1}", 0, ST_INVALID_HEADER, "UTF-8");
	expect_rule("{\"\xC0\xAF\":1}", 0, ST_INVALID_HEADER, NULL);     /* overlong */
	expect_rule("{\"\xED\xA0\x80\":1}", 0, ST_INVALID_HEADER, NULL); /* surrogate */
	expect_rule("{\"\xF4\x90\x80\x80\":1}", 0, ST_INVALID_HEADER, NULL); /* > U+10FFFF */
	expect_rule("{\"\xE2\x82\":1}", 0, ST_INVALID_HEADER, NULL);     /* truncated */
}

static void rule5_deserialization(void **s)
{
	const enum st_rule R = ST_INVALID_HEADER_DESERIALIZATION;

	expect_rule("not json", 0, R, "JSON");
	expect_rule("[1,2]", 0, R, "not a JSON object");
	expect_rule("{\"a\":{\"dtype\":\"Q8\",\"shape\":[1],\"data_offsets\":[0,1]}}", 1, R, "unknown dtype 'Q8'");
	expect_rule("{\"a\":{\"dtype\":7,\"shape\":[1],\"data_offsets\":[0,1]}}", 1, R, "unknown dtype");
	expect_rule("{\"a\":{\"dtype\":\"U8\",\"shape\":[-1],\"data_offsets\":[0,1]}}", 1, R, "shape");
	expect_rule("{\"a\":{\"dtype\":\"U8\",\"shape\":[1.0],\"data_offsets\":[0,1]}}", 1, R, "shape");
	expect_rule("{\"a\":{\"dtype\":\"U8\",\"shape\":\"1\",\"data_offsets\":[0,1]}}", 1, R, "shape");
	expect_rule("{\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1,2]}}", 1, R, "data_offsets");
	expect_rule("{\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[-1,1]}}", 1, R, "data_offsets");
	expect_rule("{\"a\":{\"dtype\":\"U8\",\"shape\":[1]}}", 1, R, "missing field 'data_offsets'");
	expect_rule("{\"a\":{\"shape\":[1],\"data_offsets\":[0,1]}}", 1, R, "missing field 'dtype'");
	expect_rule("{\"a\":[1]}", 1, R, "tensor 'a'");
	expect_rule("{\"__metadata__\":{\"k\":1}}", 0, R, "__metadata__");
	expect_rule("{\"__metadata__\":[\"k\"]}", 0, R, "__metadata__");
	/* Deliberately stricter than the reference (docs/formats.md). */
	expect_rule("{\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]},"
		    "\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}", 1, R, "duplicate");
}

static void rule6_invalid_offset(void **s)
{
	const enum st_rule R = ST_INVALID_OFFSET;

	expect_rule("{\"a\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[1,3]}}", 3, R,
		    "tensor 'a': data_offsets do not start at 0");
	expect_rule("{\"a\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[0,2]},"
		    "\"b\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[3,5]}}", 5, R,
		    "tensor 'b': data_offsets leave a gap");
	expect_rule("{\"a\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[0,2]},"
		    "\"b\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[1,3]}}", 3, R,
		    "tensor 'b': data_offsets overlap the previous tensor");
	expect_rule("{\"a\":{\"dtype\":\"U8\",\"shape\":[0],\"data_offsets\":[0,0]},"
		    "\"b\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[2,0]}}", 2, R,
		    "tensor 'b'");
}

static void rule7_overflow(void **s)
{
	expect_rule("{\"a\":{\"dtype\":\"U8\",\"shape\":[4611686018427387904,8],\"data_offsets\":[0,1]}}",
		    1, ST_VALIDATION_OVERFLOW, "tensor 'a'");
	expect_rule("{\"a\":{\"dtype\":\"F64\",\"shape\":[2305843009213693952],\"data_offsets\":[0,1]}}",
		    1, ST_VALIDATION_OVERFLOW, "bits");
}

static void rule8_misaligned_slice(void **s)
{
	expect_rule("{\"a\":{\"dtype\":\"F4\",\"shape\":[3],\"data_offsets\":[0,2]}}", 2,
		    ST_MISALIGNED_SLICE, "tensor 'a'");
	expect_rule("{\"a\":{\"dtype\":\"F6_E2M3\",\"shape\":[2],\"data_offsets\":[0,2]}}", 2,
		    ST_MISALIGNED_SLICE, NULL);
}

static void rule9_tensor_invalid_info(void **s)
{
	expect_rule("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,4]}}", 4,
		    ST_TENSOR_INVALID_INFO, "span 4 bytes but shape and dtype need 8");
}

static void rule10_incomplete_buffer(void **s)
{
	const char *h = "{\"a\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4]}}";

	expect_rule(h, 5, ST_METADATA_INCOMPLETE_BUFFER, "trailing bytes");
	expect_rule(h, 3, ST_METADATA_INCOMPLETE_BUFFER, "truncated");
}

/* The reference checks tensor by tensor in offset order: the first tensor's
 * size error comes before the second tensor's offset error. */
static void rules_in_reference_order(void **s)
{
	expect_rule("{\"b\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[9,11]},"
		    "\"a\":{\"dtype\":\"U16\",\"shape\":[2],\"data_offsets\":[0,2]}}", 11,
		    ST_TENSOR_INVALID_INFO, "tensor 'a'");
	/* Schema errors (5) come before any offset check (6). */
	expect_rule("{\"a\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[5,7]},"
		    "\"b\":{\"dtype\":\"XX\",\"shape\":[2],\"data_offsets\":[0,2]}}", 7,
		    ST_INVALID_HEADER_DESERIALIZATION, NULL);
}

static void accepts_whitespace_rank0_empty(void **s)
{
	struct st_file *f;

	f = expect_ok("  \n{\"a\":{\"dtype\":\"F32\",\"shape\":[],\"data_offsets\":[0,4]},"
		      "\"e\":{\"dtype\":\"F32\",\"shape\":[3,0],\"data_offsets\":[4,4]}}   \t", 4);
	assert_int_equal(f->ntensors, 2);
	assert_string_equal(f->tensors[0].name, "a");
	assert_int_equal(f->tensors[0].rank, 0);
	assert_int_equal(st_tensor_size(&f->tensors[0]), 4);
	assert_int_equal(f->tensors[1].rank, 2);
	assert_int_equal(f->tensors[1].shape[1], 0);
	st_file_free(f);
	f = expect_ok("{}", 0);
	assert_int_equal(f->ntensors, 0);
	st_file_free(f);
	f = expect_ok("{\"__metadata__\":null,\"x\":{\"dtype\":\"U8\",\"shape\":[1],"
		      "\"data_offsets\":[0,1],\"extra\":true}}", 1);
	assert_null(f->metadata);
	st_file_free(f);
}

/* Regression (found by fuzz_reader): a header whose tensors are all rank 0
 * has no dims pool, and shape pointers were computed from NULL. */
static void only_rank0_tensors(void **s)
{
	struct st_file *f = expect_ok("{\"a\":{\"dtype\":\"U8\",\"shape\":[],\"data_offsets\":[0,1]}}", 1);

	assert_int_equal(f->tensors[0].rank, 0);
	assert_non_null(f->tensors[0].shape);
	st_file_free(f);
	expect_rule("{\"a\":{\"dtype\":\"U8\",\"shape\":[\n],\"data_offsets\":[0,6]}}", 6,
		    ST_TENSOR_INVALID_INFO, "tensor 'a'");
}

static void accepts_all_22_dtypes(void **s)
{
	static const char *const names[] = {
		"BOOL", "F4", "F6_E2M3", "F6_E3M2", "U8", "I8", "F8_E5M2", "F8_E4M3",
		"F8_E8M0", "F8_E4M3FNUZ", "F8_E5M2FNUZ", "I16", "U16", "F16", "BF16",
		"I32", "U32", "F32", "I64", "U64", "F64", "C64",
	};
	static const unsigned bits[] = { 8, 4, 6, 6, 8, 8, 8, 8, 8, 8, 8, 16, 16, 16,
					 16, 32, 32, 32, 64, 64, 64, 64 };
	char h[8192];
	size_t n = 0, off = 0;
	struct st_file *f;

	n += (size_t)snprintf(h + n, sizeof(h) - n, "{");
	for (int i = 0; i < 22; i++) {
		/* 4 elements: F4 gives 2 bytes, F6 gives 3 bytes. */
		size_t sz = 4 * bits[i] / 8;
		n += (size_t)snprintf(h + n, sizeof(h) - n,
				      "%s\"t%02d\":{\"dtype\":\"%s\",\"shape\":[4],\"data_offsets\":[%zu,%zu]}",
				      i ? "," : "", i, names[i], off, off + sz);
		off += sz;
	}
	snprintf(h + n, sizeof(h) - n, "}");
	f = expect_ok(h, off);
	assert_int_equal(f->ntensors, 22);
	for (int i = 0; i < 22; i++) {
		assert_string_equal(dtype_name(f->tensors[i].dtype), names[i]);
		assert_int_equal(dtype_bits(f->tensors[i].dtype), bits[i]);
	}
	st_file_free(f);
}

static double decode(const struct st_tensor *t, const uint8_t *p, size_t i)
{
	switch (t->dtype) {
	case DT_U8: return p[i];
	case DT_I8: return (int8_t)p[i];
	case DT_U16: { uint16_t v; memcpy(&v, p + 2 * i, 2); return v; }
	case DT_I16: { int16_t v; memcpy(&v, p + 2 * i, 2); return v; }
	case DT_U32: { uint32_t v; memcpy(&v, p + 4 * i, 4); return v; }
	case DT_I32: { int32_t v; memcpy(&v, p + 4 * i, 4); return v; }
	case DT_F32: { float v; memcpy(&v, p + 4 * i, 4); return v; }
	case DT_F64: { double v; memcpy(&v, p + 8 * i, 8); return v; }
	case DT_F16: {
		uint16_t h;
		memcpy(&h, p + 2 * i, 2);
		int ex = (h >> 10) & 31;
		double m = ex ? 1.0 + (h & 1023) / 1024.0 : (h & 1023) / 1024.0;
		double v = ldexp(m, ex ? ex - 15 : -14);
		return h & 0x8000 ? -v : v;
	}
	default: return NAN;
	}
}

/* Values -3..2 converted to the dtype; unsigned types wrap. */
static void check_values(const struct st_tensor *t, const uint8_t *data)
{
	static const double want[6] = { -3, -2, -1, 0, 1, 2 };

	for (size_t i = 0; i < 6; i++) {
		double w = want[i], got = decode(t, data, i);
		if (t->dtype == DT_U8 && w < 0) w += 256;
		if (t->dtype == DT_U16 && w < 0) w += 65536;
		if (t->dtype == DT_U32 && w < 0) w += 4294967296.0;
		if (got != w)
			fail_msg("%s[%zu] = %g, want %g", t->name, i, got, w);
	}
}

static void reference_fixtures(void **s)
{
	static const struct { const char *name; enum dtype dt; } want[] = {
		{ "B", DT_U8 }, { "H", DT_U16 }, { "I", DT_U32 }, { "b", DT_I8 }, { "d", DT_F64 },
		{ "e", DT_F16 }, { "f", DT_F32 }, { "h", DT_I16 }, { "i", DT_I32 },
	};
	struct errinfo e;

	for (size_t k = 0; k < 9; k++) {
		char name[64];
		struct st_file *f;
		size_t len;
		uint8_t *raw;

		snprintf(name, sizeof(name), "%s.safetensors", want[k].name);
		if (st_file_open(pjoin(fixtures_dir(), name), &f, &e) < 0)
			fail_msg("%s", e.msg);
		assert_int_equal(f->ntensors, 1);
		assert_string_equal(f->tensors[0].name, want[k].name);
		assert_int_equal(f->tensors[0].dtype, want[k].dt);
		assert_int_equal(f->tensors[0].rank, 1);
		assert_int_equal(f->tensors[0].shape[0], 6);
		assert_non_null(f->metadata);
		assert_string_equal(json_string_value(json_object_get(f->metadata, "test")), "a");
		raw = read_file(f->path, &len);
		assert_non_null(raw);
		check_values(&f->tensors[0], raw + f->data_start);
		free(raw);
		st_file_free(f);
	}
}

static void reference_overall(void **s)
{
	static const uint64_t begin[] = { 0, 6, 18, 42, 48, 96, 108, 132, 144 };
	struct st_file *f;
	struct errinfo e;
	uint8_t *raw;
	size_t len;

	if (st_file_open(pjoin(fixtures_dir(), "overall.safetensors"), &f, &e) < 0)
		fail_msg("%s", e.msg);
	assert_int_equal(f->ntensors, 9);
	raw = read_file(f->path, &len);
	for (size_t i = 0; i < 9; i++) {
		assert_int_equal(f->tensors[i].begin, begin[i]);
		check_values(&f->tensors[i], raw + f->data_start + f->tensors[i].begin);
	}
	free(raw);
	st_file_free(f);
}

static void open_errors(void **s)
{
	struct st_file *f = NULL;
	struct errinfo e;
	const char *p = pjoin(F.dir[0], "huge.safetensors");
	uint64_t n = 100ULL << 20; /* a 100 MiB header */
	int fd;

	assert_int_equal(st_file_open(pjoin(F.dir[0], "nope.safetensors"), &f, &e), -ENOENT);
	assert_non_null(strstr(e.msg, "nope.safetensors"));
	assert_int_equal(st_file_open(F.dir[0], &f, &e), -EINVAL);
	assert_non_null(strstr(e.msg, "not a regular file"));
	/* A sparse 200 MiB file claiming a 100 MiB header: refused from the
	 * 8-byte prefix alone, before anything is read into memory. */
	fd = open(p, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	assert_true(fd >= 0);
	assert_int_equal(pwrite(fd, &n, 8, 0), 8);
	assert_int_equal(ftruncate(fd, 200 << 20), 0);
	close(fd);
	assert_int_equal(st_file_open(p, &f, &e), -EINVAL);
	assert_int_equal(e.rule, ST_HEADER_TOO_LARGE);
	assert_non_null(strstr(e.msg, "huge.safetensors"));
	/* A 4-byte file. */
	assert_int_equal(st_write(p, "", 0, NULL), 0);
	assert_int_equal(truncate(p, 4), 0);
	assert_int_equal(st_file_open(p, &f, &e), -EINVAL);
	assert_int_equal(e.rule, ST_HEADER_TOO_SMALL);
	assert_null(f);
}

static void many_tensors(void **s)
{
	size_t n = 100000, cap = n * 80 + 16, k = 0;
	char *h = malloc(cap);
	struct st_file *f;

	k += (size_t)snprintf(h + k, cap - k, "{");
	for (size_t i = 0; i < n; i++)
		k += (size_t)snprintf(h + k, cap - k,
				      "%s\"model.layers.%zu.w\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[%zu,%zu]}",
				      i ? "," : "", i, i, i + 1);
	snprintf(h + k, cap - k, "}");
	f = expect_ok(h, n);
	assert_int_equal(f->ntensors, n);
	assert_int_equal(f->tensors[n - 1].end, n);
	st_file_free(f);
	free(h);
}

FIXTURE_MAIN(F,
	cmocka_unit_test(rule1_header_too_small),
	cmocka_unit_test(rule2_header_too_large),
	cmocka_unit_test(rule3_invalid_header_length),
	cmocka_unit_test(rule4_invalid_header),
	cmocka_unit_test(rule5_deserialization),
	cmocka_unit_test(rule6_invalid_offset),
	cmocka_unit_test(rule7_overflow),
	cmocka_unit_test(rule8_misaligned_slice),
	cmocka_unit_test(rule9_tensor_invalid_info),
	cmocka_unit_test(rule10_incomplete_buffer),
	cmocka_unit_test(rules_in_reference_order),
	cmocka_unit_test(accepts_whitespace_rank0_empty),
	cmocka_unit_test(only_rank0_tensors),
	cmocka_unit_test(accepts_all_22_dtypes),
	cmocka_unit_test(reference_fixtures),
	cmocka_unit_test(reference_overall),
	cmocka_unit_test(open_errors),
	cmocka_unit_test(many_tensors),
)
