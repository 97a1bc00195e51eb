// SPDX-License-Identifier: MIT
/* pb_text.c - string fields are text (pb_text.h). */
#include "pb_text.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <stdint.h>
#include <string.h>

#include "utf8.h"

#define SIZED_HEAD 16 /* keeps malloc's alignment */

static void *sized_alloc(void *data, size_t size)
{
	size_t *p = malloc(size + SIZED_HEAD);

	(void)data;
	if (!p)
		return NULL;
	*p = size;
	return (char *)p + SIZED_HEAD;
}

static void sized_free(void *data, void *ptr)
{
	(void)data;
	if (ptr)
		free((char *)ptr - SIZED_HEAD);
}

ProtobufCAllocator pb_sized_allocator = { sized_alloc, sized_free, NULL };

/* The bytes of string s of field f: all that unpack copied when sized
 * (its allocation less the NUL it added), else up to the first NUL. */
static size_t str_bytes(const ProtobufCFieldDescriptor *f, const char *s, bool sized)
{
	if (!sized || s == protobuf_c_empty_string || s == f->default_value)
		return strlen(s);
	return *(const size_t *)(const void *)(s - SIZED_HEAD) - 1;
}

static bool is_text(const char *s, size_t n)
{
	return utf8_text(s, n);
}

/* The values of field f in m: *n of them at *vals (a repeated field's
 * array, or the one member). */
static const void *values(const ProtobufCMessage *m, const ProtobufCFieldDescriptor *f, size_t *n)
{
	const char *base = (const char *)m;

	if (f->label == PROTOBUF_C_LABEL_REPEATED) {
		*n = *(const size_t *)(base + f->quantifier_offset);
		return *(const void *const *)(base + f->offset);
	}
	if (f->flags & PROTOBUF_C_FIELD_FLAG_ONEOF) {
		uint32_t which = *(const uint32_t *)(base + f->quantifier_offset);
		if (which != f->id) {
			*n = 0;
			return NULL;
		}
	}
	*n = 1;
	return base + f->offset;
}

static int check(const ProtobufCMessage *m, int depth, bool sized, char *why, size_t len)
{
	const ProtobufCMessageDescriptor *d = m->descriptor;

	if (depth > 32)
		return -EBADMSG;
	for (unsigned i = 0; i < d->n_fields; i++) {
		const ProtobufCFieldDescriptor *f = &d->fields[i];
		size_t n;
		const void *v;
		if (f->type != PROTOBUF_C_TYPE_STRING && f->type != PROTOBUF_C_TYPE_MESSAGE)
			continue;
		v = values(m, f, &n);
		for (size_t k = 0; v && k < n; k++) {
			const void *x = ((const void *const *)v)[k];
			if (!x)
				continue;
			if (f->type == PROTOBUF_C_TYPE_STRING && !is_text(x, str_bytes(f, x, sized))) {
				snprintf(why, len, "%s.%s is not UTF-8 text", d->short_name, f->name);
				return -EBADMSG;
			}
			if (f->type == PROTOBUF_C_TYPE_MESSAGE && check(x, depth + 1, sized, why, len) < 0)
				return -EBADMSG;
		}
	}
	return 0;
}

int pb_text_check(const ProtobufCMessage *m, char *why, size_t len)
{
	return m ? check(m, 0, false, why, len) : 0;
}

int pb_text_check_sized(const ProtobufCMessage *m, char *why, size_t len)
{
	return m ? check(m, 0, true, why, len) : 0;
}

/* s escaped into a new string (malloc): text that names every byte. */
static char *escaped(const char *s)
{
	const unsigned char *p = (const unsigned char *)s;
	size_t n = strlen(s), o = 0;
	char *out = malloc(4 * n + 1);

	if (!out)
		return NULL;
	for (size_t i = 0; i < n;) {
		size_t k = utf8_seq_len(p + i, n - i);
		if (k == 1 && p[i] == '\\') {
			out[o++] = '\\';
			out[o++] = '\\';
		} else if (k == 0 || utf8_hidden(p + i, k)) {
			for (size_t j = 0; j < (k ? k : 1); j++)
				o += (size_t)sprintf(out + o, "\\x%02x", p[i + j]);
			k = k ? k : 1;
		} else {
			memcpy(out + o, p + i, k);
			o += k;
		}
		i += k;
	}
	out[o] = 0;
	return out;
}

static int mend_one(char **slot, struct pb_mend *md)
{
	char *e;

	if (md->n == PB_MEND_MAX)
		return -E2BIG;
	if (!(e = escaped(*slot)))
		return -ENOMEM;
	md->slot[md->n] = slot;
	md->was[md->n++] = *slot;
	*slot = e;
	return 0;
}

static int mend(ProtobufCMessage *m, int depth, struct pb_mend *md, char *why, size_t len)
{
	const ProtobufCMessageDescriptor *d = m->descriptor;
	int rc = 0;

	if (depth > 32)
		return -EBADMSG;
	for (unsigned i = 0; i < d->n_fields; i++) {
		const ProtobufCFieldDescriptor *f = &d->fields[i];
		size_t n;
		void **v;
		if (f->type != PROTOBUF_C_TYPE_STRING && f->type != PROTOBUF_C_TYPE_MESSAGE)
			continue;
		v = (void **)(uintptr_t)values(m, f, &n);
		for (size_t k = 0; v && k < n; k++) {
			if (!v[k])
				continue;
			if (f->type == PROTOBUF_C_TYPE_MESSAGE) {
				rc = mend(v[k], depth + 1, md, why, len) ?: rc;
				continue;
			}
			if (is_text(v[k], strlen(v[k])))
				continue;
			if (!*why)
				snprintf(why, len, "%s.%s", d->short_name, f->name);
			rc = mend_one((char **)&v[k], md) ?: rc;
		}
	}
	return rc;
}

int pb_text_mend(ProtobufCMessage *m, struct pb_mend *md, char *why, size_t len)
{
	md->n = 0;
	if (len)
		*why = 0;
	return m ? mend(m, 0, md, why, len) : 0;
}

void pb_text_unmend(struct pb_mend *md)
{
	while (md->n > 0) {
		md->n--;
		free(*md->slot[md->n]);
		*md->slot[md->n] = md->was[md->n];
	}
}
