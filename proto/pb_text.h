// SPDX-License-Identifier: MIT
/* pb_text.h - every string a wire message carries is text: valid UTF-8
 * with no control characters but tab and newline. protobuf-c accepts any
 * bytes in a string field; what a peer sends reaches logs, metrics labels
 * (a non-UTF-8 client name would make /metrics unparseable) and
 * status output, so both ends check at the boundary, once, for every
 * field of every message, nested and repeated ones included. */
#ifndef WSRV_PB_TEXT_H
#define WSRV_PB_TEXT_H

#include <protobuf-c/protobuf-c.h>
#include <stdbool.h>
#include <stddef.h>

#define PB_MEND_MAX 64 /* fields mended in one message */

/* 0 when every string field of m (recursively) is text; else -EBADMSG
 * with the first bad field's name in why (len bytes). Text: UTF-8 with
 * nothing utf8_hidden refuses (controls but tab and newline, the
 * bidirectional overrides and isolates). */
int pb_text_check(const ProtobufCMessage *m, char *why, size_t len);

/* What pb_text_mend changed, for pb_text_unmend to put back. */
struct pb_mend {
	char **slot[PB_MEND_MAX];   /* the fields it set */
	char *was[PB_MEND_MAX];     /* their values before (not owned) */
	size_t n;
};

/* For a message that is about to be sent: every string field of m
 * (recursively) that is not text is pointed at an escaped copy (bytes
 * that are not UTF-8 and hidden characters as \xNN, a backslash as \\),
 * so that no one field (a model directory named "caf\xe9") takes a
 * whole reply down. The first bad field's name goes in why (len bytes,
 * "" when all were text). 0, or -ENOMEM / -E2BIG when a field could
 * not be mended (m then still has it; pb_text_check says so). The
 * copies are m's only until pb_text_unmend(md), which puts every field
 * back and frees them; call it even on failure. */
int pb_text_mend(ProtobufCMessage *m, struct pb_mend *md, char *why, size_t len);
void pb_text_unmend(struct pb_mend *md);

/* An allocator for protobuf-c's unpack (and free_unpacked) that records
 * each allocation's size: protobuf-c copies a string's bytes and ends
 * them with a NUL, so "m\0\xff" read back with strlen is "m". A message
 * unpacked with it can be checked with pb_text_check_sized, which sees
 * every byte. */
extern ProtobufCAllocator pb_sized_allocator;

/* pb_text_check of a message unpacked with pb_sized_allocator, a NUL
 * inside a string refused too. */
int pb_text_check_sized(const ProtobufCMessage *m, char *why, size_t len);

#endif
