// SPDX-License-Identifier: MIT
/* escape.c - printing a peer's string without letting it steer the log or
 * the terminal. */
#include "escape.h"

#include <stdio.h>
#include <string.h>

#include "utf8.h"

/* The escape of byte c (at most 4 chars + NUL) into e; 0 when c prints as
 * it is. */
static int escape_byte(unsigned char c, char e[5])
{
	switch (c) {
	case '\n': memcpy(e, "\\n", 3); return 1;
	case '\t': memcpy(e, "\\t", 3); return 1;
	case '\r': memcpy(e, "\\r", 3); return 1;
	case '\\': memcpy(e, "\\\\", 3); return 1;
	default:
		if (c < 0x20 || c == 0x7f) {
			snprintf(e, 5, "\\x%02x", c);
			return 1;
		}
		return 0;
	}
}

/* Appends piece (n bytes) to out if it fits with room for "..."; false
 * when it does not. */
static int put(char *out, size_t cap, size_t *at, const char *piece, size_t n)
{
	if (*at + n + 4 > cap)
		return 0;
	memcpy(out + *at, piece, n);
	*at += n;
	return 1;
}

const char *str_escape(const char *s, char *out, size_t cap)
{
	const unsigned char *p = (const unsigned char *)(s ? s : "");
	size_t at = 0, left = strlen((const char *)p);
	char e[5];

	if (cap < 5) {
		if (cap)
			out[0] = 0;
		return out;
	}
	while (left) {
		size_t n = utf8_seq_len(p, left);
		int ok;

		/* U+0080..U+009F (C2 80..C2 9F) are C1 controls: CSI among
		 * them; a bidirectional override or isolate (3 bytes) makes a
		 * line read in another order: each byte as \xNN. */
		if ((n == 2 || n == 3) && utf8_hidden(p, n))
			n = 0;
		if (n == 0) {
			snprintf(e, sizeof(e), "\\x%02x", p[0]);
			ok = put(out, cap, &at, e, 4);
			n = 1;
		} else if (n == 1 && escape_byte(p[0], e)) {
			ok = put(out, cap, &at, e, strlen(e));
		} else {
			ok = put(out, cap, &at, (const char *)p, n);
		}
		if (!ok) {
			memcpy(out + at, "...", 4);
			return out;
		}
		p += n;
		left -= n;
	}
	out[at] = 0;
	return out;
}

const char *esc(const char *s)
{
	static __thread char buf[ESCAPE_SLOTS][256];
	static __thread unsigned next;

	return str_escape(s, buf[next++ % ESCAPE_SLOTS], sizeof(buf[0]));
}
