// SPDX-License-Identifier: MIT
/* copyd.h - wsrv-copyd, the copy service (docs/design/copy-service.md, "The copy
 * service"): one process per host that page-locks every served model's
 * pages once and copies them into workers' device memory on request, so
 * that no worker locks the weights it already shares. It is a client of
 * wsrvd (libwsrv attaches the models) and keeps a context on each GPU it
 * serves; workers reach it on its own Unix socket.
 *
 *   copyd_main.c     options, the socket, the loop, the lifecycle
 *   copyd_models.c   the models: attached by name, registered once,
 *                    generations followed, the old dropped when unused
 *   copyd_conn.c     workers: trust, limits, requests and replies
 *   copyd_copy.c     buffers mapped, runs checked and queued as a job
 *   copyd_sched.c    the jobs copied a slice at a time, turn by turn:
 *                    the user, then the connection, served longest ago
 *   copyd_reply.c    the answers */
#ifndef WSRV_COPYD_H
#define WSRV_COPYD_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/types.h>

#include "errinfo.h"
#include "copy.pb-c.h"
#include "device.h"
#include "wsrv.h"

#define CD_MAX_DEVICES 16
/* The exit status when there is no GPU to serve (EX_UNAVAILABLE): the
 * unit's RestartPreventExitStatus names it. */
#define CD_EXIT_NO_DEVICE 69
#define CD_MAX_ALLOW 32

/* The service's lifecycle (copyd_main.c, cd_to): STARTING (devices
 * opened, not yet listening) -> SERVING -> DRAINING (a signal: no new
 * connection, the request under way finishes) -> STOPPED. */
enum cd_state { CD_STARTING, CD_SERVING, CD_DRAINING, CD_STOPPED, CD_STATE_MAX };

struct cd_config {
	const char *socket, *wsrvd;      /* ours; wsrvd's (NULL: its default) */
	int ordinals[CD_MAX_DEVICES];    /* the GPUs served */
	int ndevices;                    /* 0: every one the driver sees */
	uid_t allow_uid[CD_MAX_ALLOW + 1];
	size_t n_allow_uid;
	gid_t allow_gid[CD_MAX_ALLOW];
	size_t n_allow_gid;
	mode_t socket_mode;
	gid_t socket_gid;                /* (gid_t)-1: leave it */
	unsigned max_clients, max_conns_per_uid, max_buffers_per_process, max_buffers_per_uid;
	const char *preload[16];         /* models attached and registered at start */
	unsigned npreload;
};

struct cd_device {
	struct wsrv_device *d;           /* owned */
	struct dev_share_info info;      /* its id (the workers name it) and granule */
};

/* A held generation's lifecycle (lifecycle.h, copyd_models.c): current
 * until a newer generation of its model is held, then retired, and freed
 * once no connection's last copy came from it. */
enum cd_model_state { CDM_CURRENT, CDM_RETIRED, CDM_STATE_MAX };

/* A generation of a model the service holds, registered on every device. */
struct cd_model {
	char *name;
	uint64_t generation, identity;    /* what the bytes are (cl_model_identity) */
	struct wsrv_model *m;            /* owned: wsrv_detach */
	uint32_t nseg;
	bool *registered;                /* per segment */
	uint64_t registered_bytes, bytes;
	unsigned users;                  /* connections whose last copy came from it */
	enum cd_model_state state;       /* cd_model_to() sets it */
	struct cd_model *next;
};

/* A copy job's run, checked: height rows of width bytes, pitch apart
 * from src, packed at dst_off of the job's buffer. */
struct cd_run {
	const uint8_t *src;
	uint64_t width, height, pitch, dst_off;
};

/* A CopyRuns accepted and not yet done (copyd_sched.c). */
struct cd_job {
	uint64_t seq;                    /* the request's: its CopyDone answers it */
	struct cd_buffer *buf;           /* its connection's (cd_unmap refuses one
	                                  * a job uses) */
	struct cd_model *model;          /* a user of it while the job lives */
	struct cd_run *run;              /* owned */
	size_t nrun, at;                 /* runs, and the one under way, */
	uint64_t row, col;               /* and where in it */
	uint64_t bytes;                  /* copied so far */
	unsigned waited;                 /* other connections' slices run meanwhile */
	double t0;                       /* its arrival */
	struct cd_job *next;
};

/* A worker's buffer, mapped writable on one device. */
struct cd_buffer {
	uint32_t id;
	int device;                      /* index in copyd.dev */
	struct dev_share mem;
	struct cd_buffer *next;
};

struct cd_conn {
	int fd;                          /* owned */
	struct ucred cred;               /* at connect */
	uint64_t process;                /* its process (peer_process_held): what
	                                  * --max-buffers-per-process counts */
	int pidfd;                       /* owned, or -1: is it alive (peer_account) */
	struct cd_buffer *bufs;          /* owned */
	unsigned nbufs;
	struct cd_model *model;          /* its last copy's (a user of it), or NULL */
	struct cd_job *jobs;             /* owned, oldest first: copied in order */
	unsigned njobs;
	uint64_t turn;                   /* the scheduler's tick of its last slice */
	struct cd_conn *next;
};

/* A user's last turn (copyd_sched.c). */
struct cd_user {
	uid_t uid;
	uint64_t turn;
};

struct copyd {
	struct cd_config cfg;
	enum cd_state state;
	int listen_fd, lock_fd;          /* owned (listen_claim) */
	struct cd_device dev[CD_MAX_DEVICES];
	int ndev;
	struct wsrv_client *wsrvd;       /* NULL while unreachable */
	struct cd_model *models;
	struct cd_conn *conns;
	unsigned nconns;
	struct cd_user *users;           /* owned: each user's last turn */
	size_t nusers, users_cap;
	uint64_t tick;                   /* slices run */
	unsigned njobs;                  /* queued, every connection's */
	uint32_t next_buffer;
	/* counters (CopyStatsReply) */
	uint64_t copies, copied_bytes, requests, refused, imports;
	uint64_t slices, side_by_side;   /* slices copied; steps with two devices' or more */
	double import_seconds;
};

/* The lifecycle's one setter: checks the move, logs "A -> B" (debug). */
void cd_to(struct copyd *cd, enum cd_state to);

/* Models (copyd_models.c). */
/* The held generation gen of model name whose identity is id (what the
 * bytes are: a wsrvd started again numbers generations from 1 again),
 * attached now if it is the one wsrvd serves: 0 and *out, or -ESTALE
 * (other bytes are served, or id is 0), -ENOENT, -EHOSTDOWN (no wsrvd),
 * with a sentence. */
int cd_model_get(struct copyd *cd, const char *name, uint64_t gen, uint64_t id, struct cd_model **out,
		 struct errinfo *err);
/* Attaches and locks what is loaded of name's current generation now
 * (--model). 0 or <0 with a sentence. */
int cd_model_hold(struct copyd *cd, const char *name, struct errinfo *err);
/* Segment seg of e, loaded and registered: 0 and its bytes, or
 * -EAGAIN (not loaded yet), -ERANGE, with a sentence. */
int cd_model_segment(struct copyd *cd, struct cd_model *e, uint32_t seg, const uint8_t **base, size_t *len,
		     struct errinfo *err);
/* Connection users of e: one more, one less (a retired one unused goes). */
void cd_model_use(struct copyd *cd, struct cd_model **slot, struct cd_model *e);
/* Events from wsrvd (a new generation: attached and registered), and the
 * segments that became ready since: registered. */
void cd_models_tick(struct copyd *cd);
void cd_models_free(struct copyd *cd);
int cd_wsrvd_fd(struct copyd *cd);

/* Connections (copyd_conn.c). */
void cd_accept(struct copyd *cd);
/* Serves what arrived on c: false when c is to be closed. */
bool cd_serve(struct copyd *cd, struct cd_conn *c);
void cd_conn_close(struct copyd *cd, struct cd_conn *c);

/* Buffers and copies (copyd_copy.c): 0 or a negative errno with a
 * sentence, answered as an error. */
int cd_map(struct copyd *cd, struct cd_conn *c, const Wsrv__CopyMap *m, int fd, uint32_t *id, struct errinfo *err);
/* -EBUSY while a job of c copies into it. */
int cd_unmap(struct copyd *cd, struct cd_conn *c, uint32_t id, struct errinfo *err);
/* Checks rq and queues it as a job of c, answered by cd_schedule once its
 * bytes have landed: 0 (no answer now), or <0 with a sentence (answered
 * as an error now). */
int cd_copy(struct copyd *cd, struct cd_conn *c, const Wsrv__CopyRuns *rq, uint64_t seq, struct errinfo *err);
void cd_buffers_free(struct copyd *cd, struct cd_conn *c);

/* Jobs (copyd_sched.c). At most CD_JOBS_PER_CONN queued on a connection
 * (a worker keeps 4 in flight), each copied CD_SLICE_BYTES at a time. */
#define CD_JOBS_PER_CONN 8u
#define CD_SLICE_BYTES ((uint64_t)64 << 20)
/* Appends job (owned from here) to c's queue. */
void cd_job_add(struct copyd *cd, struct cd_conn *c, struct cd_job *job);
/* One slice on each device that has a job for it, the user then the
 * connection served longest ago first, copied side by side and waited
 * for; the jobs that finish are answered. */
void cd_schedule(struct copyd *cd);
/* c's jobs dropped (its connection ends, the service stops). */
void cd_jobs_free(struct copyd *cd, struct cd_conn *c);
/* Whether a job of c copies into b. */
bool cd_job_uses(const struct cd_conn *c, const struct cd_buffer *b);

/* Answers (copyd_reply.c): false when the worker does not take it. */
bool cd_reply(struct cd_conn *c, Wsrv__CopyResponse *rs);
bool cd_reply_done(struct cd_conn *c, uint64_t seq, uint64_t bytes, double secs, unsigned waited);
bool cd_reply_error(struct copyd *cd, struct cd_conn *c, uint64_t seq, int r, const struct errinfo *err);

#endif
