// SPDX-License-Identifier: MIT
/* sockpath.h - where wsrvd listens and clients connect when no path is
 * given: one rule for both sides. */
#ifndef WSRV_SOCKPATH_H
#define WSRV_SOCKPATH_H

#include <stdbool.h>
#include <stddef.h>

/* The largest socket path, with its NUL (sizeof sun_path). */
#define SOCKPATH_MAX 108

/* $WSRV_SOCKET when set and non-empty, else $XDG_RUNTIME_DIR/wsrv.sock,
 * else /run/wsrv/wsrv.sock, into buf (cap bytes, at least SOCKPATH_MAX).
 * Returns 0, or -ENAMETOOLONG with a sentence in err (errlen bytes) when
 * the path does not fit a Unix socket address: never a truncated path. */
int sockpath_default(char *buf, size_t cap, char *err, size_t errlen);

/* The system service's socket (the unit's RuntimeDirectory=wsrv). */
#define SOCKPATH_SYSTEM "/run/wsrv/wsrv.sock"

/* A client's default: sockpath_default, except that where it came from
 * $XDG_RUNTIME_DIR and nothing is there while system (SOCKPATH_SYSTEM;
 * a parameter for the tests) exists, system: a user's client finds the
 * system service without being told. *fallback says whether it did. */
int sockpath_client(const char *system, char *buf, size_t cap, bool *fallback, char *err, size_t errlen);

/* 0 when path fits a Unix socket address, else -ENAMETOOLONG with a
 * sentence in err. */
int sockpath_check(const char *path, char *err, size_t errlen);

#endif
