// SPDX-License-Identifier: MIT
/* st_reader.c - parsing and validating a safetensors header.
 *
 * Rules 1-3 look at the 8-byte length prefix, 4 at the bytes, 5 at the JSON
 * schema, 6-9 at each tensor in data_offsets order, 10 at the file's end.
 */
#include "st_reader.h"

#include <xxhash.h>

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "file_open.h"
#include "fullio.h"
#include "utf8.h"

static const char *const rule_names[ST_RULE_COUNT] = {
	[ST_RULE_NONE] = "None",
	[ST_HEADER_TOO_SMALL] = "HeaderTooSmall",
	[ST_HEADER_TOO_LARGE] = "HeaderTooLarge",
	[ST_INVALID_HEADER_LENGTH] = "InvalidHeaderLength",
	[ST_INVALID_HEADER] = "InvalidHeader",
	[ST_INVALID_HEADER_DESERIALIZATION] = "InvalidHeaderDeserialization",
	[ST_INVALID_OFFSET] = "InvalidOffset",
	[ST_VALIDATION_OVERFLOW] = "ValidationOverflow",
	[ST_MISALIGNED_SLICE] = "MisalignedSlice",
	[ST_TENSOR_INVALID_INFO] = "TensorInvalidInfo",
	[ST_METADATA_INCOMPLETE_BUFFER] = "MetadataIncompleteBuffer",
};

const char *st_rule_name(enum st_rule r)
{
	return (unsigned)r < ST_RULE_COUNT ? rule_names[r] : "?";
}

/* err_rule with the file label in front and the rule's name at the end. */
#define REJECT(e, f, rule, fmt, ...)                                        \
	err_rule(e, -EINVAL, rule, "%s: " fmt " (%s)", (f)->label,          \
		 ##__VA_ARGS__, st_rule_name(rule))

static uint64_t le64(const uint8_t *p)
{
	uint64_t v = 0;
	for (int i = 7; i >= 0; i--)
		v = (v << 8) | p[i];
	return v;
}

/* Rules 1-3: the length prefix. avail bytes of the file start are at p. */
static int check_prefix(struct st_file *f, const uint8_t *p, size_t avail,
			struct errinfo *e)
{
	uint64_t n;

	if (f->file_size < 8 || avail < 8)
		return REJECT(e, f, ST_HEADER_TOO_SMALL,
			      "file is %" PRIu64 " bytes, shorter than the 8-byte header length",
			      f->file_size);
	n = le64(p);
	if (n > ST_MAX_HEADER)
		return REJECT(e, f, ST_HEADER_TOO_LARGE,
			      "header length %" PRIu64 " exceeds the limit of %llu bytes",
			      n, ST_MAX_HEADER);
	if (n + 8 > f->file_size)
		return REJECT(e, f, ST_INVALID_HEADER_LENGTH,
			      "header length %" PRIu64 " runs past the end of the %" PRIu64 "-byte file",
			      n, f->file_size);
	f->header_len = n;
	f->data_start = n + 8;
	return 0;
}

struct pools {
	size_t names_used, names_cap;
	size_t dims_used, dims_cap;
};

/* Parses one shape array into the dims pool. Returns the pool offset of the
 * first dimension, or a negative errno. */
static int parse_shape(struct st_file *f, struct pools *pl, json_t *shape,
		       uint32_t *rank, size_t *first)
{
	size_t n = json_array_size(shape);

	if (!json_is_array(shape))
		return -EINVAL;
	if (pl->dims_used + n > pl->dims_cap) {
		size_t cap = (pl->dims_cap + n) * 2;
		uint64_t *d = realloc(f->dims, cap * sizeof(*d));
		if (!d)
			return -ENOMEM;
		f->dims = d;
		pl->dims_cap = cap;
	}
	for (size_t i = 0; i < n; i++) {
		json_t *v = json_array_get(shape, i);
		if (!json_is_integer(v) || json_integer_value(v) < 0)
			return -EINVAL;
		f->dims[pl->dims_used + i] = (uint64_t)json_integer_value(v);
	}
	*first = pl->dims_used;
	*rank = (uint32_t)n;
	pl->dims_used += n;
	return 0;
}

static int parse_offsets(json_t *o, uint64_t *b, uint64_t *en)
{
	json_t *x, *y;

	if (!json_is_array(o) || json_array_size(o) != 2)
		return -EINVAL;
	x = json_array_get(o, 0);
	y = json_array_get(o, 1);
	if (!json_is_integer(x) || !json_is_integer(y) ||
	    json_integer_value(x) < 0 || json_integer_value(y) < 0)
		return -EINVAL;
	*b = (uint64_t)json_integer_value(x);
	*en = (uint64_t)json_integer_value(y);
	return 0;
}

static int check_metadata(struct st_file *f, json_t *meta, struct errinfo *e)
{
	const char *k;
	json_t *v;

	if (json_is_null(meta))
		return 0;
	if (!json_is_object(meta))
		return REJECT(e, f, ST_INVALID_HEADER_DESERIALIZATION,
			      "__metadata__ is not an object");
	json_object_foreach(meta, k, v) {
		if (!json_is_string(v))
			return REJECT(e, f, ST_INVALID_HEADER_DESERIALIZATION,
				      "__metadata__ value of '%s' is not a string", k);
	}
	f->metadata = json_incref(meta);
	return 0;
}

static int add_name(struct st_file *f, struct pools *pl, const char *name,
		    size_t *off)
{
	size_t n = strlen(name) + 1;

	if (pl->names_used + n > pl->names_cap) {
		size_t cap = (pl->names_cap + n) * 2;
		char *p = realloc(f->names, cap);
		if (!p)
			return -ENOMEM;
		f->names = p;
		pl->names_cap = cap;
	}
	memcpy(f->names + pl->names_used, name, n);
	*off = pl->names_used;
	pl->names_used += n;
	return 0;
}

/* Rule 5 for one tensor entry. Stores pool offsets in the pointer fields;
 * fix_pointers() turns them into pointers once the pools stop moving. */
static int parse_tensor(struct st_file *f, struct pools *pl, const char *name,
			json_t *info, struct st_tensor *t, struct errinfo *e)
{
	json_t *dt = json_object_get(info, "dtype");
	json_t *sh = json_object_get(info, "shape");
	json_t *of = json_object_get(info, "data_offsets");
	size_t name_off, dim_off;
	int r;

	if (!json_is_object(info))
		return REJECT(e, f, ST_INVALID_HEADER_DESERIALIZATION,
			      "tensor '%s': entry is not an object", name);
	if (!dt || !sh || !of)
		return REJECT(e, f, ST_INVALID_HEADER_DESERIALIZATION,
			      "tensor '%s': missing field '%s'", name,
			      !dt ? "dtype" : !sh ? "shape" : "data_offsets");
	if (!json_is_string(dt) || dtype_parse(json_string_value(dt), &t->dtype) < 0)
		return REJECT(e, f, ST_INVALID_HEADER_DESERIALIZATION,
			      "tensor '%s': unknown dtype %s%s%s", name,
			      json_is_string(dt) ? "'" : "",
			      json_is_string(dt) ? json_string_value(dt) : "(not a string)",
			      json_is_string(dt) ? "'" : "");
	r = parse_shape(f, pl, sh, &t->rank, &dim_off);
	if (r == -ENOMEM)
		return err_set(e, r, "%s: out of memory", f->label);
	if (r < 0)
		return REJECT(e, f, ST_INVALID_HEADER_DESERIALIZATION,
			      "tensor '%s': shape is not an array of non-negative integers", name);
	if (parse_offsets(of, &t->begin, &t->end) < 0)
		return REJECT(e, f, ST_INVALID_HEADER_DESERIALIZATION,
			      "tensor '%s': data_offsets is not a pair of non-negative integers", name);
	r = add_name(f, pl, name, &name_off);
	if (r < 0)
		return err_set(e, r, "%s: out of memory", f->label);
	t->name = (const char *)(uintptr_t)name_off;
	t->shape = (const uint64_t *)(uintptr_t)dim_off;
	return 0;
}

static void fix_pointers(struct st_file *f)
{
	static const uint64_t no_dims[1];

	for (size_t i = 0; i < f->ntensors; i++) {
		struct st_tensor *t = &f->tensors[i];
		t->name = f->names + (uintptr_t)t->name;
		/* With only rank-0 tensors there is no dims pool at all. */
		t->shape = f->dims ? f->dims + (uintptr_t)t->shape : no_dims;
	}
}

/* Rule 5: the JSON schema. */
static int parse_entries(struct st_file *f, json_t *root, struct errinfo *e)
{
	struct pools pl = { 0 };
	const char *key;
	json_t *val;
	size_t i = 0;
	int r;

	if (!json_is_object(root))
		return REJECT(e, f, ST_INVALID_HEADER_DESERIALIZATION,
			      "header is not a JSON object");
	f->tensors = calloc(json_object_size(root) + 1, sizeof(*f->tensors));
	if (!f->tensors)
		return err_set(e, -ENOMEM, "%s: out of memory", f->label);
	json_object_foreach(root, key, val) {
		if (strcmp(key, "__metadata__") == 0) {
			r = check_metadata(f, val, e);
		} else {
			r = parse_tensor(f, &pl, key, val, &f->tensors[i], e);
			i++;
		}
		if (r < 0)
			return r;
	}
	f->ntensors = i;
	fix_pointers(f);
	return 0;
}

static int cmp_offsets(const void *a, const void *b)
{
	const struct st_tensor *x = a, *y = b;

	if (x->begin != y->begin)
		return x->begin < y->begin ? -1 : 1;
	if (x->end != y->end)
		return x->end < y->end ? -1 : 1;
	return strcmp(x->name, y->name);
}

static int offset_error(struct st_file *f, size_t i, uint64_t start,
			struct errinfo *e)
{
	const struct st_tensor *t = &f->tensors[i];
	const char *why;

	if (t->end < t->begin)
		why = "data_offsets end before they begin";
	else if (i == 0)
		why = "data_offsets do not start at 0 (the first tensor must start the data buffer)";
	else if (t->begin > start)
		why = "data_offsets leave a gap after the previous tensor";
	else
		why = "data_offsets overlap the previous tensor";
	return REJECT(e, f, ST_INVALID_OFFSET, "tensor '%s': %s", t->name, why);
}

/* Rules 6-9 for each tensor in offset order, then rule 10. */
static int check_tensors(struct st_file *f, struct errinfo *e)
{
	uint64_t start = 0;

	qsort(f->tensors, f->ntensors, sizeof(*f->tensors), cmp_offsets);
	for (size_t i = 0; i < f->ntensors; i++) {
		const struct st_tensor *t = &f->tensors[i];
		uint64_t nel = 1, nbits;

		if (t->begin != start || t->end < t->begin)
			return offset_error(f, i, start, e);
		start = t->end;
		for (uint32_t d = 0; d < t->rank; d++)
			if (__builtin_mul_overflow(nel, t->shape[d], &nel))
				return REJECT(e, f, ST_VALIDATION_OVERFLOW,
					      "tensor '%s': element count overflows", t->name);
		if (__builtin_mul_overflow(nel, (uint64_t)dtype_bits(t->dtype), &nbits))
			return REJECT(e, f, ST_VALIDATION_OVERFLOW,
				      "tensor '%s': size in bits overflows", t->name);
		if (nbits % 8)
			return REJECT(e, f, ST_MISALIGNED_SLICE,
				      "tensor '%s': %" PRIu64 " elements of %s do not fill whole bytes",
				      t->name, nel, dtype_name(t->dtype));
		if (t->end - t->begin != nbits / 8)
			return REJECT(e, f, ST_TENSOR_INVALID_INFO,
				      "tensor '%s': data_offsets span %" PRIu64 " bytes but shape and dtype need %" PRIu64,
				      t->name, t->end - t->begin, nbits / 8);
	}
	if (f->data_start + start != f->file_size)
		return REJECT(e, f, ST_METADATA_INCOMPLETE_BUFFER,
			      "tensors end at byte %" PRIu64 " but the file is %" PRIu64 " bytes (%s)",
			      f->data_start + start, f->file_size,
			      f->data_start + start < f->file_size ? "trailing bytes" : "truncated");
	return 0;
}

/* Rules 4-10 over the N header bytes at json. */
static int parse_header(struct st_file *f, const uint8_t *json, struct errinfo *e)
{
	json_error_t jerr;
	json_t *root;
	size_t bad;
	int r;

	if (!utf8_valid(json, f->header_len, &bad))
		return REJECT(e, f, ST_INVALID_HEADER,
			      "header is not valid UTF-8 (byte %zu of the header)", bad);
	/* Duplicate keys are refused: the reference keeps the last one, which
	 * silently hides a tensor entry (docs/formats.md). */
	root = json_loadb((const char *)json, f->header_len, JSON_REJECT_DUPLICATES, &jerr);
	if (!root)
		return REJECT(e, f, ST_INVALID_HEADER_DESERIALIZATION,
			      "header is not valid JSON: %s at byte %d", jerr.text,
			      jerr.position);
	r = parse_entries(f, root, e);
	json_decref(root);
	if (r < 0)
		return r;
	return check_tensors(f, e);
}

static struct st_file *file_new(const char *path)
{
	struct st_file *f = calloc(1, sizeof(*f));
	const char *slash;

	if (!f)
		return NULL;
	f->path = strdup(path);
	if (!f->path) {
		free(f);
		return NULL;
	}
	slash = strrchr(f->path, '/');
	f->label = slash && slash[1] ? slash + 1 : f->path;
	return f;
}

void st_file_free(struct st_file *f)
{
	if (!f)
		return;
	json_decref(f->metadata);
	free(f->tensors);
	free(f->names);
	free(f->dims);
	free(f->path);
	free(f);
}

int st_file_parse_buffer(const char *label, const uint8_t *buf, size_t len,
			 struct st_file **out, struct errinfo *e)
{
	struct st_file *f = file_new(label);
	int r;

	if (!f)
		return err_set(e, -ENOMEM, "%s: out of memory", label);
	f->file_size = len;
	r = check_prefix(f, buf, len, e);
	if (r == 0)
		r = parse_header(f, buf + 8, e);
	if (r < 0) {
		st_file_free(f);
		return r;
	}
	*out = f;
	return 0;
}

static int read_header(struct st_file *f, int fd, struct errinfo *e)
{
	uint8_t prefix[8];
	uint8_t *hdr;
	int r;

	r = pread_full(fd, prefix, f->file_size < 8 ? 0 : 8, 0);
	if (r < 0)
		return err_set(e, r, "%s: cannot read: %s", f->path, strerror(-r));
	r = check_prefix(f, prefix, f->file_size < 8 ? 0 : 8, e);
	if (r < 0)
		return r;
	/* N is bounded by rule 2 and by the file size (rule 3) by now. */
	hdr = malloc(f->header_len ? f->header_len : 1);
	if (!hdr)
		return err_set(e, -ENOMEM, "%s: no memory for a %" PRIu64 "-byte header",
			       f->path, f->header_len);
	r = pread_full(fd, hdr, f->header_len, 8);
	if (r < 0)
		r = err_set(e, r, "%s: cannot read the header: %s", f->path, strerror(-r));
	else
		r = parse_header(f, hdr, e);
	if (r == 0)
		f->header_xxh3 = XXH3_64bits(hdr, f->header_len);
	free(hdr);
	return r;
}

int st_file_open(const char *path, struct st_file **out, struct errinfo *e)
{
	struct st_file *f;
	struct stat st;
	int fd, r;

	fd = file_open_regular(path, O_RDONLY, &st, e);
	if (fd < 0)
		return fd;
	f = file_new(path);
	if (!f) {
		close(fd);
		return err_set(e, -ENOMEM, "%s: out of memory", path);
	}
	f->file_size = (uint64_t)st.st_size;
	f->dev = st.st_dev;
	f->ino = st.st_ino;
	f->mtime = st.st_mtim;
	f->ctime = st.st_ctim;
	r = read_header(f, fd, e);
	close(fd);
	if (r < 0) {
		st_file_free(f);
		return r;
	}
	*out = f;
	return 0;
}
