// SPDX-License-Identifier: MIT
/* client_internal.h - libwsrv's private structures. */
#ifndef WSRV_CLIENT_INTERNAL_H
#define WSRV_CLIENT_INTERNAL_H

#include <pthread.h>
#include <stdbool.h>

#include "manifest.h"
#include "wsrv.h"
#include "wsrv.pb-c.h"

struct wsrv_client {
	int fd;                      /* -1 once the connection is gone */
	pthread_mutex_t lock;        /* one request at a time */
	unsigned refs;               /* the caller's, plus one per model */
	uint64_t seq;
	uint32_t max_packet;
	uint8_t *buf;                /* max_packet bytes */
	char server_version[32];
};

struct wsrv_model {
	struct wsrv_client *c;       /* holds a reference */
	uint32_t attach_id;
	char *name;
	const uint8_t *manifest;     /* read-only mapping */
	size_t manifest_len;
	struct mf_view v;
	uint32_t nseg;
	const uint8_t **seg;         /* read-only mappings */
	size_t *seg_len;
	uint32_t *hash;              /* tensor index + 1, open addressing */
	size_t hash_mask;
};

/* Records the sentence for wsrv_last_error and returns code. */
int cl_err(int code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void cl_debug(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Sends req and receives its Response (caller frees with
 * wsrv__response__free_unpacked) and up to maxfds fds (owned by the caller
 * on success). An Error reply becomes its negative code and sentence. Takes
 * the client's lock. */
int cl_call(struct wsrv_client *c, Wsrv__Request *req, Wsrv__Response **resp,
	    int *fds, int maxfds, int *nfds);

void cl_unref(struct wsrv_client *c);

/* Checks an fd the server sent: a regular file of at least want bytes,
 * sealed against resizing and writes. Sets *size to its size. 0, or
 * -EBADMSG (or fstat's errno) with a sentence naming what. */
int cl_check_fd(int fd, const char *what, uint64_t want, uint64_t *size);

/* Builds the name hash of m. */
int cl_build_hash(struct wsrv_model *m);

/* The index of the tensor named name, or -ENOENT (no error recorded). */
int cl_find_index(const struct wsrv_model *m, const char *name);

#endif
