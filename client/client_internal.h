// SPDX-License-Identifier: MIT
/* client_internal.h - libwsrv's private structures. */
#ifndef WSRV_CLIENT_INTERNAL_H
#define WSRV_CLIENT_INTERNAL_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <string.h>

#include "manifest.h"
#include "ready.h"
#include "transport.h"
#include "wsrv.h"
#include "wsrv.pb-c.h"

/* A session (session.c): what the caller holds, over one transport at a
 * time. */
struct wsrv_client {
	struct cl_wire w;            /* under lock */
	pthread_mutex_t lock;        /* one request at a time; the fields below */
	unsigned refs;               /* the caller's, plus one per model */
	/* To connect again after the server restarted (replay.c). */
	char path[108];              /* "" once disconnected on purpose */
	char name[65];
	int timeout_ms;
	struct wsrv_model *models;   /* attached through this client (not owned) */
	unsigned reconnects;
};

struct wsrv_model {
	struct wsrv_client *c;       /* holds a reference */
	struct wsrv_model *next;     /* in c->models, under c->lock */
	uint32_t attach_id;          /* the current server's id for m, under c->lock */
	uint64_t generation, manifest_hash; /* what was attached */
	uint64_t latest;             /* the newest generation announced (Event) */
	bool stale;                  /* the server has another generation now */
	char *name;
	const uint8_t *manifest;     /* read-only mapping */
	size_t manifest_len;
	struct mf_view v;
	uint32_t nseg;
	const uint8_t **seg;         /* read-only mappings */
	size_t *seg_len;
	uint32_t *hash;              /* tensor index + 1, open addressing */
	size_t hash_mask;
	/* Attached while the server loads it (ready_wait.c): every segment's
	 * address range is reserved (PROT_NONE) at attach and mapped over
	 * once the readiness page says it is ready. */
	bool loading;                /* atomic: some segment not mapped yet */
	struct ready_gen *ready;     /* atomic: the newest server's page, or NULL */
	bool *mapped;                /* per segment, under map_lock */
	pthread_mutex_t map_lock;
};

/* One server's readiness page for a model attached while it loads. A
 * reconnect during the load (ready_resume.c) puts a newer one in front;
 * the older ones stay mapped until the model is freed, because a waiter
 * may still be reading their words. */
struct ready_gen {
	struct ready_gen *older;     /* owned */
	const uint8_t *page;         /* read-only mapping (owned) */
	size_t len;
	struct rd_view rv;
	int *fds;                    /* per segment: an fd the attach reply
	                              * carried and not mapped yet, or -1;
	                              * owned, under map_lock; may be NULL */
};

/* The newest readiness page's view (m->ready is not NULL). */
static inline const struct rd_view *cl_rv(const struct wsrv_model *m)
{
	return &__atomic_load_n(&m->ready, __ATOMIC_ACQUIRE)->rv;
}

/* Attach with a readiness page: fds[0] the manifest (mapped by the
 * caller), fds[1] the page, then ar->ready_segments' fds. */
int cl_ready_setup(struct wsrv_model *m, const int *fds, int nfds, const Wsrv__AttachReply *ar);
/* Waits until segment seg is ready and mapped; -EIO (naming the tensor)
 * when the load failed. A no-op once the whole model is mapped. */
int cl_need_segment(struct wsrv_model *m, uint32_t seg);
/* Whether segment seg is mapped here, without waiting: 1 yes (mapping it
 * first when the server says it is ready), 0 not yet, or -EIO (naming the
 * tensor) when the load failed. */
int cl_segment_ready(struct wsrv_model *m, uint32_t seg);
/* Whether segment seg is mapped here now (always, once the model is). */
bool cl_segment_mapped(struct wsrv_model *m, uint32_t seg);
/* wsrv_model_layer without waiting for the layer's bytes. */
int cl_layer_nowait(const struct wsrv_model *m, int32_t index, struct wsrv_layer *out);
/* wsrv_model_tensor and wsrv_model_layer_at for i in range, without
 * waiting: data points at the reserved range until the segment arrives,
 * and must not be read before cl_need_segment or cl_segment_ready says so. */
void cl_tensor_nowait(const struct wsrv_model *m, uint32_t i, struct wsrv_tensor *out);
void cl_layer_at_nowait(const struct wsrv_model *m, uint32_t i, struct wsrv_layer *out);
/* Frees what cl_ready_setup made (the segments' mappings are the
 * caller's). */
void cl_ready_free(struct wsrv_model *m);
/* Maps a readiness page of len bytes from fd and checks it against m's
 * manifest: a new generation of it, owned by the caller, or NULL. */
struct ready_gen *cl_ready_gen_map(struct wsrv_model *m, int fd, uint64_t len);
void cl_ready_gen_free(struct ready_gen *g);
/* Under c->lock, on a new connection: m, still loading here, attached
 * again (with while_loading) and answered with ar and its n fds. When the
 * new server lays m out as the old one did, its page (or, for a model it
 * has loaded, one made here) becomes m's newest, taking the fds it keeps
 * (-1 left in fds), and the segments already mapped stay: 0. Otherwise
 * -ESTALE, or -EBADMSG for a reply that does not add up. (ready_resume.c) */
int cl_ready_resume(struct wsrv_model *m, const Wsrv__AttachReply *ar, int *fds, int n);

/* Marks a definition as part of the ABI; everything else is hidden
 * (-fvisibility=hidden), and libwsrv.map names each symbol's version. */
#define WSRV_EXPORT __attribute__((visibility("default")))

/* Returns -EINVAL with a sentence naming the function when p is NULL. */
#define CL_NEED(p) do { \
	if (!(p)) \
		return cl_err(-EINVAL, "%s: %s is NULL", __func__, #p); \
} while (0)

/* A result struct, zeroed, with its size set (see wsrv.h). */
#define CL_RESULT(out) do { \
	memset((out), 0, sizeof(*(out))); \
	(out)->struct_size = sizeof(*(out)); \
} while (0)

/* Copies the caller's options o (NULL: none, every field its default) into
 * copy, lib_size bytes zeroed first. o's first field is its size: less
 * than min_size (the first version's) is -EINVAL; a tail past lib_size
 * must be zero (-E2BIG), and so must the bytes from reserved_off on
 * (-EINVAL). what (the caller's name) starts the sentence. */
int cl_opts(const void *o, void *copy, size_t lib_size, size_t min_size,
	    size_t reserved_off, const char *what);
#define CL_OPTS(o, copy) cl_opts((o), (copy), sizeof(*(copy)), sizeof(*(copy)), \
				 offsetof(__typeof__(*(copy)), reserved), __func__)

/* Is the connection still up? Takes the client's lock. */
bool cl_connected(struct wsrv_client *c);

/* Records the sentence for wsrv_last_error and returns code. */
int cl_err(int code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* cl_err with the error already set kept after fmt: "fmt: earlier". */
int cl_wrap(int code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void cl_debug(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Sends req and receives its Response (caller frees with
 * wsrv__response__free_unpacked) and up to maxfds fds (owned by the caller
 * on success), as wire_call does. A server that went away is connected to
 * again first (every model attached again, replay.c), and the request
 * sent there. Takes the client's lock. */
int cl_call(struct wsrv_client *c, Wsrv__Request *req, Wsrv__Response **resp,
	    int *fds, int maxfds, int *nfds);
/* cl_call that sends send_fd (>= 0; the caller keeps it) with the request. */
int cl_call_fd(struct wsrv_client *c, Wsrv__Request *req, int send_fd, Wsrv__Response **resp,
	       int *fds, int maxfds, int *nfds);
/* cl_call for a request that names model m by its attach id at *id: the
 * id the server sending it knows m by is written there before each send
 * (a reconnect gives m a new one); -ESTALE once m has other weights. */
int cl_call_model(struct wsrv_model *m, uint32_t *id, Wsrv__Request *req, Wsrv__Response **resp,
		  int *fds, int maxfds, int *nfds);
/* cl_call for a request whose reply carries no fds and must be of body
 * case want; what names the request in the sentence. */
int cl_query(struct wsrv_client *c, Wsrv__Request *q, int want, Wsrv__Response **out,
	     const char *what);

/* Takes c->lock: when the server hung up (it died or restarted), closes
 * the connection and connects again. 0 when connected. */
int cl_revive(struct wsrv_client *c);
/* Under c->lock, on a new connection: attaches every model of c again;
 * a model whose generation changed is marked stale. 0 or a negative
 * errno with a sentence. (replay.c) */
int cl_replay(struct wsrv_client *c);
/* Adds m to / removes m from c's models (takes c->lock). */
void cl_model_link(struct wsrv_client *c, struct wsrv_model *m);
void cl_model_unlink(struct wsrv_client *c, struct wsrv_model *m);
/* The transport's callback, user the client, under c->lock: a generation
 * the server announced. (events.c) */
void cl_note_event(void *user, const Wsrv__Event *ev);

/* -ESTALE with a sentence when m's generation was replaced; else 0. */
int cl_model_fresh(const struct wsrv_model *m);

/* A string the server sent, never NULL. */
static inline const char *cl_str(const char *s)
{
	return s ? s : "";
}

void cl_unref(struct wsrv_client *c);

/* model_index.c: builds the name hash of m. */
int cl_build_hash(struct wsrv_model *m);
/* The index of the tensor named name, or -ENOENT (no error recorded). */
int cl_find_index(const struct wsrv_model *m, const char *name);
/* Tensor i's name (i in range). */
const char *cl_tensor_name(const struct wsrv_model *m, uint32_t i);

#endif
