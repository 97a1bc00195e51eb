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
#include <stddef.h>

/* 0 when every string field of m (recursively) is text; else -EBADMSG
 * with the first bad field's name in why (len bytes). Text: UTF-8 with
 * nothing utf8_hidden refuses (controls but tab and newline, the
 * bidirectional overrides and isolates). */
int pb_text_check(const ProtobufCMessage *m, char *why, size_t len);

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
