// SPDX-License-Identifier: MIT
/* pb_text.c - string fields are text (pb_text.h). */
#include "pb_text.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "utf8.h"

static bool is_text(const char *s)
{
	size_t n = strlen(s);

	if (!utf8_valid((const unsigned char *)s, n, NULL))
		return false;
	for (size_t i = 0; i < n; i++) {
		unsigned char c = (unsigned char)s[i];
		if ((c < 0x20 && c != '\t' && c != '\n') || c == 0x7f)
			return false;
	}
	return true;
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

static int check(const ProtobufCMessage *m, int depth, char *why, size_t len)
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
			if (f->type == PROTOBUF_C_TYPE_STRING && !is_text(x)) {
				snprintf(why, len, "%s.%s is not UTF-8 text", d->short_name, f->name);
				return -EBADMSG;
			}
			if (f->type == PROTOBUF_C_TYPE_MESSAGE && check(x, depth + 1, why, len) < 0)
				return -EBADMSG;
		}
	}
	return 0;
}

int pb_text_check(const ProtobufCMessage *m, char *why, size_t len)
{
	return m ? check(m, 0, why, len) : 0;
}
