// SPDX-License-Identifier: MIT
/* srv.h - wsrvd's serving state: the models it holds, the client sessions,
 * their attachments and leases, and the limits on all of them. */
#ifndef WSRV_SRV_H
#define WSRV_SRV_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/uio.h>

#include "srv_life.h"
#include "srv_model_state.h"
#include "clock.h"
#include "loaded_door.h"
#include "packet.h"
#include "srv_counters.h"
#include "srv_region_table.h"
#include "wsrv.pb-c.h"
#include "ratelimit.h"

struct peer_serve;
struct srv_metrics;

#define SRV_MAX_ALLOW 32        /* --allow-uid and --allow-gid entries each */
#define SRV_MAX_BULK (64u << 20) /* a reply in a memfd (Bulk) is at most this */

struct srv_config {
	const char *socket_path;
	mode_t socket_mode;         /* --socket-mode; 0: 0660 */
	gid_t socket_gid;           /* --socket-group; (gid_t)-1: the server's own */
	uint32_t max_clients;       /* sessions at once */
	bool max_clients_asked;     /* given (--max-clients): never fitted down */
	uint32_t max_leases;        /* per session */
	uint32_t max_attach;        /* per session */
	uint32_t max_message;       /* bytes per packet, at most WSRV_MAX_PACKET */
	uint32_t max_errors;        /* protocol errors before a session is closed */
	double hello_timeout;       /* seconds a new connection may stay silent */
	uint32_t max_regions;       /* device regions in all */
	uint32_t max_client_regions; /* device regions one client's process holds */
	double region_fill_timeout; /* seconds a writer may take to commit a region */
	bool refuse_own_uid;        /* --refuse-own-uid: clients of the server's own
	                             * (non-root) user are refused */
	uint64_t max_region_bytes;  /* bytes of all device regions */
	uint64_t max_client_region_bytes; /* bytes of the regions one client holds */
	bool keep_regions;          /* keep committed regions nobody holds */
	bool require_all;           /* --require-all-models: one model that fails to load
	                             * stops the server (exit 1); else it serves the others */
	uid_t allow_uid[SRV_MAX_ALLOW + 1]; /* + the server's own uid */
	size_t n_allow_uid;
	gid_t allow_gid[SRV_MAX_ALLOW];
	size_t n_allow_gid;
	uid_t publish_uid[SRV_MAX_ALLOW]; /* who may publish: nobody by default */
	size_t n_publish_uid;
	gid_t publish_gid[SRV_MAX_ALLOW];
	size_t n_publish_gid;
};

/* What the streams workers reported, summed (the metrics' counters). */
struct stream_sum {
	uint64_t bytes;             /* copied to devices */
	double copy_seconds, wait_seconds;
	uint64_t service_bytes;     /* copied by the copy service */
	uint64_t register_bytes;    /* page-locked by the workers themselves */
	uint64_t service_fallbacks;
};

struct srv_model {
	struct loaded_model *lm;    /* owned; NULL once a retired generation is freed */
	char *name;                 /* owned copy of its model's name, kept after lm goes */
	uint32_t attached;
	uint64_t fetches, leases;
	uint64_t generation;        /* of its weights, for device-region keys */
	enum srv_model_state state; /* its life (srv_model_state.h): changed by
	                             * srv_model_to alone */
	double load_t0;             /* mono_now() as its load began, while loading */
	/* On a model's first entry (the first of its name): its streams that
	 * closed or whose worker went, so that the counters never go back. */
	struct stream_sum streams_gone;
	uint64_t budget;            /* the model's memory budget (its own, or
	                             * --memory-budget), 0: none. The model's,
	                             * not a generation's: every reload keeps it,
	                             * whether or not the last one needed a tier */
	char reload[160];           /* the last load's outcome, for ListModels */
};

/* A model whose files could not even be laid out at the start: listed
 * (ListModels, the metrics) with why, served by nobody. */
struct srv_unloaded {
	char name[64];
	char path[256];
	char why[200];
};
#define SRV_MAX_UNLOADED 64

/* Served while it loads (not yet loaded). */
static inline bool srv_model_loading(const struct srv_model *m)
{
	return m->state == SM_LOADING;
}

/* Its load failed (reload says why): listed, attaches get EIO, nothing
 * handed over. */
static inline bool srv_model_failed(const struct srv_model *m)
{
	return m->state == SM_FAILED;
}

/* The name's current entry: not replaced (loading, ready or failed). */
static inline bool srv_model_current(const struct srv_model *m)
{
	return m->state == SM_LOADING || m->state == SM_READY || m->state == SM_FAILED;
}

/* Serves attaches: current, and its load did not fail. */
static inline bool srv_model_serves(const struct srv_model *m)
{
	return m->state == SM_LOADING || m->state == SM_READY;
}

/* Whether m's memfds go to a successor (a take-over, systemd's fd store):
 * the current generation, loaded, and without a disk tier, whose tiered
 * segments come and go (its successor reads it again, as at a start). */
static inline bool srv_model_handed(const struct srv_model *m)
{
	return m->state == SM_READY && !m->lm->tier;
}

#define SRV_MAX_STREAMS 16    /* stream reports kept per client */

struct stream_report {
	char model[64];
	uint32_t stream_id, slots;
	uint64_t bytes_copied, acquires, passes, device_bytes, shared_bytes;
	double copy_seconds, wait_seconds, hidden_fraction;
	int share_role;             /* a Wsrv__RegionRole: NONE when private */
	uint32_t expert_slots;
	uint64_t expert_hits, expert_misses;
	uint64_t service_bytes, register_bytes, service_fallbacks; /* the copy service's part */
};

struct lease {
	uint64_t id;
	uint32_t attach_id;
	int32_t layer;
};

enum srv_op_kind { OP_ACCEPT, OP_RECV, OP_SEND, OP_SIGNAL, OP_TICK, OP_CANCEL, OP_ACCEPT_CANCEL,
		   OP_RELOAD };


/* What an io_uring completion is about (its user_data). */
struct srv_op {
	enum srv_op_kind kind;
	struct session *s;
};

struct session {
	struct srv_op recv_op;
	struct srv_op cancel_op;    /* the cancel of recv_op, while in flight */
	uint64_t id;
	int fd;
	struct ucred cred;
	uint64_t proc_ino;          /* the connecting process's pidfs inode, or 0 (srv_identity.h) */
	int pidfd;                  /* its pidfd, kept only when its pid is not visible, or -1 */
	bool proc_gone;             /* that process is gone: charged to its user */
	enum session_state state;   /* its life (srv_life.h): greeting (no Hello
	                             * yet), serving, closing (no more requests;
	                             * freed when idle); changed by session_to */
	uint32_t disk_tier;         /* Hello.disk_tier: the disk tier's rules it takes */
	bool recv_armed;
	bool cancel_armed;          /* s is not freed before its cancel completes */
	uint32_t pending_sends;
	uint32_t fds_unread;        /* fds sent since the client last had nothing unread */
	uint32_t errors;            /* requests that were wrong (cfg.max_errors) */
	uint32_t declined;          /* requests turned away for now (srv_declined) */
	double connected_at;
	char name[65];
	/* attachments: attach_model[i] is the model index + 1 of attach id i+1 */
	uint32_t *attach_model;
	uint32_t nattach;
	struct stream_report streams[SRV_MAX_STREAMS];
	uint32_t nstreams;
	struct lease *leases;       /* ids ascending */
	uint32_t nleases;
	uint64_t next_lease;
	uint32_t *holds;            /* device region ids it holds, one per hold */
	uint32_t nholds;
	/* the receive in flight */
	uint8_t *rbuf;
	struct iovec riov;
	struct msghdr rmsg;
	char rctrl[CMSG_SPACE(sizeof(int) * 8)];
	struct session *next;
};

struct server {
	struct srv_config cfg;
	struct srv_model *models;
	size_t nmodels;
	struct session *sessions;   /* list */
	uint32_t nsessions;
	uint64_t next_session;
	double started;             /* mono_now() at start */
	double started_wall;        /* unix seconds of the first start (adoption keeps it) */
	uint64_t requests, errors, clients_total, refused;
	uint64_t declined;          /* requests turned away for now (srv_declined) */
	uint32_t fd_budget;         /* fds a client may have unread: 4 Attach replies */
	bool clients_fitted;        /* cfg.max_clients lowered to fit RLIMIT_NOFILE */
	struct srv_regions regions;
	int lfd, lock;              /* the listening socket and its lock (srv_run's) */
	const struct load_opts *load; /* for reloads */
	struct reload_job *reload;  /* the reload under way, or NULL (srv_reload.c) */
	struct publish *publish;    /* the publish under way, or NULL (srv_publish.c) */
	int reload_efd;             /* an eventfd the reload thread signals */
#define SRV_STORED_MAX 256
	uint32_t stored_models, stored_segs[SRV_STORED_MAX]; /* in systemd's fd store */
	uint64_t takeover;          /* the session taking the server over; 0: none */
	double takeover_deadline;   /* when it must have said TakeOverDone */
	uint64_t takeover_expired;  /* a session whose take-over ran out of time */
	pid_t successor_pid;
	enum srv_life life;         /* serving, stop asked, handed over, stopping
	                             * (srv_life.h); changed by srv_life_to */
	bool failed;                /* exit with status 1 once stopped */
	struct srv_unloaded unloaded[SRV_MAX_UNLOADED]; /* models not even laid out */
	size_t nunloaded;
	struct early_load *early;   /* serving while loading (srv_early.c), or NULL */
	struct peer_serve *peers;   /* serving other hosts (srv_peers.c), or NULL */
	struct srv_counters count;  /* for the metrics */
	struct stream_sum other_gone; /* streams reported on no model served here */
	struct srv_metrics *metrics; /* --metrics-listen's server, or NULL */
};

/* No new clients: goodbyes said (or being said), the socket closed. */
static inline bool srv_stopping(const struct server *srv)
{
	return srv->life == SRV_STOPPING || srv->life == SRV_STOPPING_HANDED;
}

/* A successor serves now: the socket and its lock are its. */
static inline bool srv_handed_over(const struct server *srv)
{
	return srv->life == SRV_HANDED_OVER || srv->life == SRV_STOPPING_HANDED;
}

/* A stop was asked and the server has not begun it. */
static inline bool srv_stop_asked(const struct server *srv)
{
	return srv->life == SRV_STOP_ASKED;
}

/* Hello done, and not closing. */
static inline bool session_greeted(const struct session *s)
{
	return s->state == SS_SERVING;
}

/* No more requests: freed when idle. */
static inline bool session_closing(const struct session *s)
{
	return s->state == SS_CLOSING;
}

/* A reply: one packet and the fds that travel with it: the server's own
 * (the models' memfds, which stay open), except owned_fd (a Bulk reply's
 * memfd, or -1), which whoever sends or drops the reply closes. */
struct reply {
	uint8_t *buf;
	size_t len, cap;
	int fds[WSRV_MAX_FDS];
	int nfds;
	int owned_fd;
	uint32_t fd_room;           /* fds this reply may carry (the client's budget) */
	char msg[512];              /* the sentence of an Error reply, for the log */
	bool drop;                  /* a test seam's: close the connection unanswered */
};

/* Who holds a disk tier's segment (tier.h): one attachment of a session. */
static inline uint64_t srv_tier_holder(const struct session *s, uint32_t attach_id)
{
	return ((uint64_t)(uintptr_t)s << 16) | (attach_id & 0xffff);
}

/* Handles one packet from s and fills r (r->buf must hold cfg.max_message
 * bytes). Never fails: bad input gets an Error reply. Sets s->closing when
 * the session must end after the reply. r->owned_fd is the caller's to
 * close (or send) afterwards. fd: the one fd that came with the packet, or
 * -1; dispatch owns it (a RegionCommit keeps it, anything else closes it
 * and is refused). */
void srv_dispatch(struct server *srv, struct session *s, const uint8_t *pkt,
		  size_t len, int fd, struct reply *r);

/* Sessions: create (the fd is owned by the session from then on) and free
 * (releases attachments and leases, closes the fd). */
struct session *session_new(struct server *srv, int fd);
void session_free(struct server *srv, struct session *s);

/* Releases every lease and attachment of s (as on disconnect). */
void session_release_all(struct server *srv, struct session *s);

/* How many more fds s may be sent before it reads what it has: the budget
 * less those still unread (SIOCOUTQ tells when everything was read). */
uint32_t srv_fd_room(const struct server *srv, struct session *s);


#endif
