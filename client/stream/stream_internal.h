// SPDX-License-Identifier: MIT
/* stream_internal.h - a stream's state. */
#ifndef WSRV_STREAM_INTERNAL_H
#define WSRV_STREAM_INTERNAL_H

#include "clock.h"
#include "model_door.h"
#include "piece_door.h"
#include "device.h"
#include "plan.h"
#include "stream_experts.h"
#include "tp_view.h"

/* WHERE_EXPERT: an expert on demand, in the expert cache when acquired
 * (stream_experts.h). WHERE_SHARD: a layer shard's tensor this rank owns,
 * in the region it exports to the others of its group (stream_peer.c). */
enum { WHERE_ABSENT = 0, WHERE_RESIDENT = 1, WHERE_STREAMED = 2, WHERE_EXPERT = 3, WHERE_SHARD = 4 };

struct st_layer {
	int32_t index;
	uint32_t *streamed;         /* tensor indices, arena order */
	uint32_t nstreamed;
	bool contiguous;            /* the streamed tensors are one run: one copy */
	uint32_t seg;
	uint64_t span_off;          /* the run's start in its segment */
	uint64_t slot_bytes;        /* bytes it needs in a slot */
	uint64_t *slot_off;         /* each streamed tensor's offset in the slot */
	int slot;                   /* -1: not in a slot */
};

struct slot {
	void *mem;
	int layer;                  /* index into layers, -1 when free */
	int64_t fence;              /* the last copy of its layer */
	bool acquired;
};

/* A queued layer's copies, until their times are taken into the stats:
 * the backend writes t_first (the first copy) and t_last (the last) when
 * it finds them done, so a record lives until then, whatever happens to
 * the slot. */
#define STREAM_RECS 256
struct copy_rec {
	int64_t fence;
	int32_t layer;              /* the layer's index */
	double t_first[2], t_last[2];
	bool single;                /* one copy: t_first has both ends */
	bool peer;                  /* some from a peer's device (the trace says so) */
};

/* A gate the consumer has yet to pass (device.h's gap). */
struct gate_rec {
	int64_t ticket;
	int32_t layer;
};

/* A host range the stream page-locked through its device. */
/* Page-locking's unit (stream_sources.c): small enough that the lock of
 * the next chunk overlaps the copies of this one, large enough that a
 * model of hundreds of GiB takes thousands of registrations, not millions. */
#define SRC_LOCK_CHUNK ((uintptr_t)16 << 20)

struct src_range {
	uintptr_t a, b;
	uint32_t seg;               /* the segment it lies in */
	uint32_t nchunks;           /* of SRC_LOCK_CHUNK bytes from a */
	uint8_t *chunks;            /* per chunk: registered with the device (owned) */
};

struct trace_ev {
	int32_t layer;
	char kind;                  /* 'c' copy, 'w' wait, 'x' compute */
	double t0, t1;
};

/* A reader's default wait for another worker's fill: what the fill can
 * take, SHARE_BASE_S plus the region's bytes at SHARE_FLOOR_RATE (the
 * copy service's floor, client/copy/copy_client.c), so that a hung writer
 * costs a small region's readers seconds, not a minute; said on stderr
 * once past SHARE_NOTE_S. */
#define SHARE_BASE_S 10.0
#define SHARE_FLOOR_RATE 1e9
#define SHARE_NOTE_S 3.0

/* The resident tensors' device region, when shared (stream_share.c). */
struct stream_share {
	bool wanted;
	unsigned timeout_ms;
	struct dev_share_info info;
	struct dev_share mem;       /* mem.ptr: mapped here */
	uint32_t region_id;         /* held at the server; 0: none */
	int role;                   /* enum wsrv_share_role */
	uint32_t writer_pid;
	double wait;
	char note[200];             /* why private */
};

/* A layer shard's peer source (stream_peer.c): per owner rank of the
 * group, its region of the tensors it owns, mapped here once it has
 * committed it; per tensor, which owner holds it and where. */
enum peer_state { PEER_WAIT = 0, PEER_MAPPED, PEER_HOST };
struct stream_peer {
	unsigned k;                 /* the group's size; 0: no peer source */
	int16_t *owner;             /* per tensor: the rank whose region holds it; -1 */
	uint64_t *off;              /* per tensor: its offset there */
	uint64_t *bytes;            /* per owner [k]: its region's bytes (granules) */
	struct dev_share *map;      /* per owner [k]: its region here (this rank's own: filled) */
	uint32_t *region;           /* per owner [k]: the server's region id held; 0 */
	uint8_t *state;             /* per owner [k]: enum peer_state */
	uint64_t *fp;               /* per owner [k]: its region's key (fingerprint) */
	struct dev_share_info info; /* the device's kind and granule */
	double deadline;            /* until then an owner not there yet is waited for */
	bool said;                  /* the one stderr line said */
	bool own_private;           /* this rank's tensors in private memory
	                             * (no region could be made: freed so) */
};

struct wsrv_stream {
	struct wsrv_model *m;
	struct wsrv_device *d;
	uint8_t *where;             /* per tensor */
	struct tp_view *views;      /* per tensor: this rank's part of it; NULL
	                             * where every tensor is whole (tp_view_at) */
	int rank, world;
	uint32_t id;                /* numbers this process's streams, for reports */
	uint64_t *res_off;          /* per tensor: offset in resident memory */
	void *resident;
	uint64_t resident_bytes;
	struct st_layer *layers;
	uint32_t nlayers;
	uint32_t *seq;              /* positions of layers with streamed tensors */
	uint32_t nseq;
	struct slot *slots;
	unsigned nslots;
	uint64_t slot_size;
	int last;                   /* position in seq of the last acquired layer */
	struct copy_rec recs[STREAM_RECS];
	uint64_t rec_head, rec_tail;    /* next free, oldest not taken */
	struct gate_rec gates[STREAM_RECS];
	uint64_t gate_head, gate_tail;
	struct src_range *srcs;     /* locked chunk by chunk as copies come,
	                             * unregistered at close */
	size_t nsrcs;
	uint8_t *have;              /* per piece (attached.h): enum cl_piece_got,
	                             * what this stream has of it */
	bool *src_locked;           /* per tensor: its source chunks locked */
	double opened, acquire_t0;
	struct wsrv_stream_stats st;
	struct trace_ev *trace;
	size_t ntrace, trace_cap;
	char *trace_path;
	struct stream_share sh;
	struct xp_cache *xp;        /* experts on demand; NULL: none */
	/* The copy service's (stream_copyd.c): private resident memory it
	 * filled (exportable; svc_mem.ptr NULL: none), and, while it fills,
	 * no host memory is page-locked here. */
	struct dev_share svc_mem;
	bool no_lock;
	struct stream_peer peer;
};

/* Decides each tensor's residency (plan rules, layer_shard by rank, then
 * the budget); fills s->where. */
int stream_place(struct wsrv_stream *s, const struct wsrv_plan *p, int rank, unsigned slots);

/* Lays out each layer's streamed tensors in a slot; returns the slot size. */
uint64_t stream_layout(struct wsrv_stream *s);

void stream_trace_add(struct wsrv_stream *s, int32_t layer, char kind, double t0, double t1);
int stream_trace_write(const struct wsrv_stream *s, const char *path);

/* Takes the times of finished copies and passed gates into the stats and
 * the trace; all: waits for every one. */
void stream_harvest(struct wsrv_stream *s, bool all);
/* wsrv_stream_stats, for the library's own callers. */
void stream_stats_fill(struct wsrv_stream *s, struct wsrv_stream_stats *out);

/* A disk tier's segments that only layer pos (just released or evicted)
 * streamed from are let go once its copies (fence) and the experts' have
 * landed: unlocked (a device that page-locks them), unmapped, and the
 * server told. 0 or -errno. */
int stream_drop_layer(struct wsrv_stream *s, int pos, int64_t fence);

/* The same for segment g alone, when it is a disk tier's and mapped here:
 * its copies up to fence (and the experts') landed first. 0 or -errno. */
int stream_drop_segment(struct wsrv_stream *s, uint32_t g, int64_t fence);
/* The same for pieces p[0..n) (attached.h), given back in one request. */
int stream_drop_pieces(struct wsrv_stream *s, const uint32_t *p, size_t n, int64_t fence);

/* Whether piece g is here and no slotted layer streams from it. */
bool stream_piece_unused(const struct wsrv_stream *s, uint32_t g);

/* Finds what the stream copies (its sources, merged within each segment)
 * and page-locks, through its device, those in segments already mapped;
 * the rest as their segments arrive (stream_need_*). Timed into the stats;
 * stream_unregister undoes it. */
int stream_register(struct wsrv_stream *s);
void stream_unregister(struct wsrv_stream *s);
/* Whether the bytes of tensor i (of each streamed tensor of layer pos)
 * are here to copy, on a model the server may still be loading: 1 yes
 * (their segment mapped and its sources page-locked), 0 not yet (only
 * when !wait), or a negative errno (-EIO naming the tensor when the load
 * failed). wait: blocks until they are. */
int stream_need_tensor(struct wsrv_stream *s, uint32_t i, bool wait);
int stream_need_layer(struct wsrv_stream *s, int pos, bool wait);
/* The disk tier's pieces of tensors idx[0..n) not here yet, asked for in
 * one request (those in memory come, the others are read side by side)
 * and, with wait, waited for together; stream_need_tensor then finds them
 * here. 0 or a negative errno. */
int stream_need_pieces(struct wsrv_stream *s, const uint32_t *idx, size_t n, bool wait);

/* Asks the server for the resident tensors' shared region (when wanted and
 * the device can share): maps it as a reader, or becomes its writer (the
 * fill comes with stream_share_fill). Never fails the stream: a failure
 * leaves it private, with the reason in s->sh.note. */
void stream_share_begin(struct wsrv_stream *s);
/* The writer's fill: creates the region, uploads into it, seals and
 * commits. 0, or <0 when it fell back to private (noted; the caller then
 * uploads a private copy). */
int stream_share_fill(struct wsrv_stream *s);
/* Unmaps the region and lets go of it at the server. */
void stream_share_close(struct wsrv_stream *s);
/* Queues the resident tensors' copies into base and waits for them. */
int stream_upload_into(struct wsrv_stream *s, uint8_t *base);
/* The same for the tensors placed `where`, each at offs[i] from base. */
int stream_upload_set(struct wsrv_stream *s, uint8_t *base, int where, const uint64_t *offs);

/* A layer shard's peer source (stream_peer.c). stream_peer_layout: after
 * placement, where each owner's tensors go in its region (every rank
 * computes the same); -EINVAL with a sentence for a tensor split by
 * tp_plan (the owner's copy is its own slice). stream_peer_open: this
 * rank's region filled, sealed and offered through wsrvd, then the other
 * owners' mapped, waiting a while for those not there yet.
 * stream_peer_src: where a streamed tensor i is copied from on another
 * device (NULL: host memory), trying again for an owner not mapped yet.
 * stream_peer_addr: an owned tensor's device address. stream_peer_close:
 * everything let go. */
int stream_peer_layout(struct wsrv_stream *s, const struct wsrv_plan *p);
int stream_peer_open(struct wsrv_stream *s);
const void *stream_peer_src(struct wsrv_stream *s, uint32_t i);
void *stream_peer_addr(const struct wsrv_stream *s, uint32_t i);
void stream_peer_close(struct wsrv_stream *s);

/* The resident tensors into mem (an exportable allocation: a region's
 * writer's, or the stream's own), copied by the copy service
 * (stream_copyd.c) when one answers, else by stream_upload_into; one log
 * line per process says why the service did not. 0 or <0. */
int stream_fill(struct wsrv_stream *s, struct dev_share *mem);
/* A private resident copy made and filled by the copy service: 0 (in
 * s->svc_mem, s->resident set), or <0 when there is none to use (the
 * caller allocates and uploads itself; said in the log once). */
int stream_copyd_private(struct wsrv_stream *s);

/* Makes the consumer wait for every copy up to fence: the compute stream
 * through the device's gate (its gap taken into the stats later), or the
 * CPU, timed into the stats and the trace under layer index. */
int stream_wait_fence(struct wsrv_stream *s, int64_t fence, int32_t index);

/* Starts the copies of the layers after seq position from (-1: none) into
 * the free slots. */
void stream_prefetch(struct wsrv_stream *s, int from);

/* Sends the counters to the server; closed: the stream's last word, after
 * which the server forgets it. */
int stream_send_report(struct wsrv_stream *s, bool closed);

#endif
