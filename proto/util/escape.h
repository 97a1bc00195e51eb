// SPDX-License-Identifier: MIT
/* escape.h - a peer's string made safe to print: for logs and terminal
 * tables, where a newline forges a log line and an escape sequence drives
 * the terminal. */
#ifndef WSRV_ESCAPE_H
#define WSRV_ESCAPE_H

#include <stddef.h>

/* Writes s (NULL: "") into out (cap bytes, NUL-terminated, truncated with
 * "..." when it does not fit), with C0 and C1 control characters, DEL and
 * backslash as \n, \t, \\ or \xNN, and bytes that are not UTF-8 as \xNN.
 * Returns out. */
const char *str_escape(const char *s, char *out, size_t cap);

/* Escapes into a static per-thread buffer of 256 bytes: for one use inside
 * one printf, at most ESCAPE_SLOTS at a time. */
#define ESCAPE_SLOTS 4
const char *esc(const char *s);

#endif
