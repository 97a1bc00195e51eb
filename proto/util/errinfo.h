// SPDX-License-Identifier: MIT
/* errinfo.h - an error's code, the rule it broke and a sentence for people.
 *
 * Server-side functions that can fail for a reason worth telling take a
 * struct errinfo * (which may be NULL) and return 0 or a negative errno; on
 * failure the sentence says what, where and why.
 */
#ifndef WSRV_ERRINFO_H
#define WSRV_ERRINFO_H

#include <stddef.h>

#define ERRINFO_MSG_MAX 1024

struct errinfo {
	int rule;                 /* reader rule (enum st_rule), 0 elsewhere */
	char msg[ERRINFO_MSG_MAX];
};

/* Formats the sentence into e (when non-NULL) and returns code, which must
 * be a negative errno, so callers can write `return err_set(e, -EIO, ...)`. */
int err_set(struct errinfo *e, int code, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

/* Like err_set, and records the reader rule that was broken. */
int err_rule(struct errinfo *e, int code, int rule, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));

/* Prefixes the existing sentence with "prefix: ". */
void err_prefix(struct errinfo *e, const char *prefix);

#endif
