// SPDX-License-Identifier: MIT
/* manifest.c - validating a manifest received from the server. */
#include "manifest.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#define XXH_STATIC_LINKING_ONLY  /* XXH3_state_t on the stack */
#include <xxhash.h>

#include "dtype.h"

static int bad(char *err, size_t len, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

static int bad(char *err, size_t len, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	if (err && len)
		vsnprintf(err, len, fmt, ap);
	va_end(ap);
	return -EBADMSG;
}

int64_t manifest_tensor_bytes(uint32_t dtype, const uint64_t *shape, uint32_t rank)
{
	uint64_t n = 1, bits;

	if (dtype >= DT_COUNT)
		return -1;
	for (uint32_t i = 0; i < rank; i++)
		if (__builtin_mul_overflow(n, shape[i], &n))
			return -1;
	if (__builtin_mul_overflow(n, (uint64_t)dtype_bits((enum dtype)dtype), &bits) ||
	    bits % 8 || bits / 8 > INT64_MAX)
		return -1;
	return (int64_t)(bits / 8);
}

/* Is [off, off + n * size) inside total, 8-byte aligned, without overflow? */
static int array_ok(uint64_t off, uint64_t n, uint64_t size, uint64_t total)
{
	uint64_t bytes, end;

	if (off % 8 || __builtin_mul_overflow(n, size, &bytes) ||
	    __builtin_add_overflow(off, bytes, &end))
		return 0;
	return end <= total;
}

static int check_layout(const struct mf_header *h, size_t len, char *err, size_t el)
{
	if (len < sizeof(*h))
		return bad(err, el, "manifest is %zu bytes, shorter than its header", len);
	if (memcmp(h->magic, MF_MAGIC, 8) != 0)
		return bad(err, el, "manifest has no WSRVMAN magic");
	if ((h->version != MF_VERSION && h->version != MF_VERSION_PARTIAL) || h->header_size != sizeof(*h))
		return bad(err, el, "manifest version %u (header %u bytes) is not %u or %u", h->version,
			   h->header_size, MF_VERSION, MF_VERSION_PARTIAL);
	if (h->version == MF_VERSION_PARTIAL &&
	    (!array_ok(h->parts_off, h->ntensors, sizeof(struct mf_part), h->total_size) ||
	     h->held_first > h->held_last || h->held_last >= h->held_world || h->held_stages == 0 ||
	     h->held_world % h->held_stages))
		return bad(err, el, "manifest: the parts or the ranks held are out of range");
	if (h->total_size > len)
		return bad(err, el, "manifest says %llu bytes but the memfd has %zu",
			   (unsigned long long)h->total_size, len);
	if (h->nsegments > MF_MAX_SEGMENTS ||
	    !array_ok(h->tensors_off, h->ntensors, sizeof(struct mf_tensor), h->total_size) ||
	    !array_ok(h->layers_off, h->nlayers, sizeof(struct mf_layer), h->total_size) ||
	    !array_ok(h->segments_off, h->nsegments, sizeof(struct mf_segment), h->total_size) ||
	    !array_ok(h->dims_off, h->ndims, sizeof(uint64_t), h->total_size) ||
	    !array_ok(h->strings_off, h->strings_size, 1, h->total_size) ||
	    !array_ok(h->config_off, h->config_size, 1, h->total_size) || h->strings_size == 0)
		return bad(err, el, "manifest tables lie outside the manifest");
	return 0;
}

static int check_tensor(const struct mf_view *v, uint32_t i, const uint64_t *seg_sizes,
			char *err, size_t el)
{
	const struct mf_header *h = v->h;
	const struct mf_tensor *t = &v->tensors[i];
	uint64_t end;
	int64_t want;

	if (t->name_off >= h->strings_size || t->name_len >= h->strings_size - t->name_off ||
	    v->strings[t->name_off + t->name_len] != 0 ||
	    strlen(v->strings + t->name_off) != t->name_len)
		return bad(err, el, "tensor %u: name outside the string table", i);
	if (t->rank > MF_MAX_RANK || t->dims_index > h->ndims || t->rank > h->ndims - t->dims_index)
		return bad(err, el, "tensor %u: shape outside the dims table", i);
	want = manifest_tensor_bytes(t->dtype, v->dims + t->dims_index, t->rank);
	if (want < 0 || (uint64_t)want != t->size)
		return bad(err, el, "tensor %u: %llu bytes do not match its dtype and shape", i,
			   (unsigned long long)t->size);
	if (t->segment >= h->nsegments || __builtin_add_overflow(t->offset, t->size, &end) ||
	    end > seg_sizes[t->segment] || end > v->segments[t->segment].size)
		return bad(err, el, "tensor %u: bytes outside its segment", i);
	if (v->parts && (v->parts[i].offset > t->size || v->parts[i].length > t->size - v->parts[i].offset))
		return bad(err, el, "tensor %u: its held part lies outside it", i);
	return 0;
}

static int check_layer(const struct mf_view *v, uint32_t i, const uint64_t *seg_sizes,
		       char *err, size_t el)
{
	const struct mf_layer *l = &v->layers[i];
	uint64_t end;

	if (l->segment >= v->h->nsegments || __builtin_add_overflow(l->offset, l->length, &end) ||
	    end > seg_sizes[l->segment] || l->first > v->h->ntensors ||
	    l->count > v->h->ntensors - l->first)
		return bad(err, el, "layer record %u: extent or tensors out of range", i);
	if (i > 0 && l->index <= v->layers[i - 1].index)
		return bad(err, el, "layer record %u: layers out of order", i);
	for (uint32_t k = l->first; k < l->first + l->count; k++) {
		const struct mf_tensor *t = &v->tensors[k];
		if (t->layer != l->index || t->segment != l->segment || t->offset < l->offset ||
		    t->offset + t->size > end)
			return bad(err, el, "layer %d: tensor %u lies outside the layer's extent",
				   l->index, k);
	}
	return 0;
}

int manifest_check(const void *buf, size_t len, const uint64_t *seg_sizes,
		   uint32_t nseg, struct mf_view *v, char *err, size_t errlen)
{
	const struct mf_header *h = buf;
	const uint8_t *b = buf;
	struct mf_view w;
	int r = check_layout(h, len, err, errlen);

	if (r < 0)
		return r;
	if (h->nsegments != nseg)
		return bad(err, errlen, "manifest has %u segments, %u were sent", h->nsegments, nseg);
	w.h = h;
	w.tensors = (const void *)(b + h->tensors_off);
	w.layers = (const void *)(b + h->layers_off);
	w.segments = (const void *)(b + h->segments_off);
	w.dims = (const void *)(b + h->dims_off);
	w.strings = (const char *)(b + h->strings_off);
	w.config = (const char *)(b + h->config_off);
	w.parts = h->version == MF_VERSION_PARTIAL ? (const void *)(b + h->parts_off) : NULL;
	if (w.strings[h->strings_size - 1] != 0 || h->name_off >= h->strings_size)
		return bad(err, errlen, "manifest string table is not terminated");
	for (uint32_t i = 0; i < nseg; i++)
		if (w.segments[i].size > seg_sizes[i])
			return bad(err, errlen, "segment %u: manifest says %llu bytes, the memfd has %llu",
				   i, (unsigned long long)w.segments[i].size,
				   (unsigned long long)seg_sizes[i]);
	for (uint32_t i = 0; i < h->ntensors; i++)
		if ((r = check_tensor(&w, i, seg_sizes, err, errlen)) < 0)
			return r;
	for (uint32_t i = 0; i < h->nlayers; i++)
		if ((r = check_layer(&w, i, seg_sizes, err, errlen)) < 0)
			return r;
	*v = w;
	return 0;
}

uint64_t manifest_identity(const struct mf_view *v)
{
	const uint8_t *b = (const uint8_t *)v->h;
	size_t t0 = v->h->tensors_off, n = v->h->ntensors, rec = sizeof(struct mf_tensor);
	size_t tn = t0 + n * rec;
	struct mf_tensor chunk[256];
	XXH3_state_t st;
	uint64_t id;

	if (!v->h->source_id)
		return 0;
	XXH3_64bits_reset(&st);
	XXH3_64bits_update(&st, b, t0);
	/* The records in chunks, their checksums zeroed. */
	for (size_t i = 0; i < n; i += 256) {
		size_t k = n - i < 256 ? n - i : 256;
		memcpy(chunk, b + t0 + i * rec, k * rec);
		for (size_t j = 0; j < k; j++)
			chunk[j].xxh3 = 0;
		XXH3_64bits_update(&st, chunk, k * rec);
	}
	XXH3_64bits_update(&st, b + tn, v->h->total_size - tn);
	id = XXH3_64bits_digest(&st);
	return id ? id : 1;
}
