// SPDX-License-Identifier: MIT
/* wsrv.h - libwsrv, the client library of wsrv, a host-local weight server.
 *
 * A worker connects to wsrvd over a Unix socket, attaches to a model, and
 * reads its tensors straight from shared memory: the server's sealed memfds
 * mapped read-only into this process, so every worker on the host shares one
 * physical copy of the weights.
 *
 * Conventions:
 * - Functions that return int return 0 (or a count) on success and a
 *   negative errno on failure; wsrv_last_error() then has one sentence.
 * - Out-parameters are untouched on failure.
 * - System calls: wsrv_connect, wsrv_attach, wsrv_detach, wsrv_list_models,
 *   wsrv_stats, wsrv_fetch_layer, wsrv_release and wsrv_disconnect talk to
 *   the server or the kernel. Everything that reads an attached model's
 *   manifest (wsrv_model_find, wsrv_model_tensor, wsrv_model_layer, ...)
 *   makes no system call and does not need the server: it keeps working if
 *   the server dies.
 * - Thread-safety: calls on one wsrv_client are serialized by the library
 *   and may come from any thread. Lookups on a wsrv_model are read-only and
 *   safe from any number of threads. wsrv_detach and wsrv_disconnect must not
 *   race with other calls on the same object.
 * - The library never logs; set WSRV_DEBUG=1 to see its debug lines on stderr.
 */
#ifndef WSRV_H
#define WSRV_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define WSRV_EXPORT __attribute__((visibility("default")))

/* Element types, as safetensors names them (wsrv_dtype_name). */
enum wsrv_dtype {
	WSRV_BOOL = 0, WSRV_F4, WSRV_F6_E2M3, WSRV_F6_E3M2, WSRV_U8, WSRV_I8,
	WSRV_F8_E5M2, WSRV_F8_E4M3, WSRV_F8_E8M0, WSRV_F8_E4M3FNUZ, WSRV_F8_E5M2FNUZ,
	WSRV_I16, WSRV_U16, WSRV_F16, WSRV_BF16, WSRV_I32, WSRV_U32, WSRV_F32,
	WSRV_I64, WSRV_U64, WSRV_F64, WSRV_C64,
};

/* The global group's layer index (embeddings, final norm, lm_head). */
#define WSRV_LAYER_GLOBAL (-1)

struct wsrv_client;   /* a connection to wsrvd */
struct wsrv_model;    /* an attached model */

struct wsrv_connect_opts {
	const char *client_name;     /* shown in the server's logs; NULL: "" */
	int numa_node;               /* the worker's node, -1 unknown */
	const char *cpuset;          /* optional, e.g. "0-7" */
	const char *gpu_pci_bus_id;  /* optional, e.g. "0000:17:00.0" */
	int timeout_ms;              /* per reply; 0: 10000 */
};

/* One tensor of an attached model. Pointers stay valid until wsrv_detach. */
struct wsrv_tensor {
	const char *name;
	int dtype;                   /* enum wsrv_dtype */
	uint32_t rank;
	const uint64_t *shape;       /* rank entries */
	int32_t layer;               /* WSRV_LAYER_GLOBAL for the global group */
	uint32_t segment;
	uint64_t offset;             /* in its segment */
	uint64_t size;               /* bytes */
	uint64_t xxh3;               /* xxh3-64 of the bytes, computed at load */
	const void *data;            /* the bytes, read-only shared memory */
};

/* One layer: a contiguous extent holding its tensors. */
struct wsrv_layer {
	int32_t index;
	uint32_t segment;
	uint64_t offset, length;     /* the extent in its segment */
	uint64_t bytes;              /* sum of its tensors' sizes */
	uint32_t first, count;       /* its tensors: wsrv_model_tensor(first..) */
	const void *data;            /* the extent's first byte */
};

struct wsrv_lease {
	uint64_t id;
	struct wsrv_layer layer;
};

struct wsrv_model_info {
	char name[128];
	char path[512];
	uint64_t tensor_bytes, arena_bytes, page_size;
	uint32_t tensors, layers, segments, attached;
	char numa[96];
	double load_seconds;
};

#define WSRV_STATS_MAX_MODELS 64
#define WSRV_STATS_MAX_STREAMS 64

struct wsrv_stats {
	char server_version[32];
	double uptime_seconds;
	uint32_t clients, attachments, open_fds;
	uint64_t leases, requests, errors, clients_total, arena_bytes, rss_bytes;
	size_t nmodels;
	struct {
		char name[128];
		uint32_t attached;
		uint64_t fetches, leases, arena_bytes;
	} models[WSRV_STATS_MAX_MODELS];
	size_t nstreams;             /* workers' layer streams, as last reported */
	struct {
		uint64_t client_id;
		uint32_t pid, stream_id, slots;
		char client[65], model[64];
		uint64_t bytes_copied, acquires, passes, device_bytes;
		double copy_seconds, wait_seconds, hidden_fraction;
	} streams[WSRV_STATS_MAX_STREAMS];
};

/* The default socket: $WSRV_SOCKET, else $XDG_RUNTIME_DIR/wsrv.sock, else
 * /run/wsrv/wsrv.sock (wsrvd uses the same rule). Thread-safe; the string
 * is per thread and static. NULL, with wsrv_last_error() saying which
 * variable, when the path is longer than a Unix socket address takes: it
 * is never truncated. */
WSRV_EXPORT const char *wsrv_default_socket(void);

/* The last error's sentence in this thread ("" if none). Thread-safe. */
WSRV_EXPORT const char *wsrv_last_error(void);

/* "BF16" for WSRV_BF16 and so on; "?" when out of range. Thread-safe. */
WSRV_EXPORT const char *wsrv_dtype_name(int dtype);

/* Connects to the server at path (NULL: wsrv_default_socket()) and shakes
 * hands. opts may be NULL. On success *out is owned by the caller
 * (wsrv_disconnect). -ENOENT/-ECONNREFUSED: no server there; -EACCES: this
 * user is not allowed; -EUSERS: the server is full; -EPROTONOSUPPORT:
 * another protocol version; -ENAMETOOLONG: the path does not fit a Unix
 * socket address. */
WSRV_EXPORT int wsrv_connect(const char *path, const struct wsrv_connect_opts *opts,
			     struct wsrv_client **out);

/* Closes the connection. Attached models stay readable until detached.
 * NULL is fine. */
WSRV_EXPORT void wsrv_disconnect(struct wsrv_client *c);

/* Up to cap models served, into out; *n gets how many there are (which may
 * exceed cap). */
WSRV_EXPORT int wsrv_list_models(struct wsrv_client *c, struct wsrv_model_info *out,
				 size_t cap, size_t *n);

/* The server's counters. */
WSRV_EXPORT int wsrv_stats(struct wsrv_client *c, struct wsrv_stats *out);

/* Attaches to a model: receives its manifest and segments, checks their
 * sizes and seals, validates the manifest, maps everything read-only. On
 * success *out is owned by the caller (wsrv_detach). -EBADMSG: the server
 * sent something inconsistent (the sentence says what). */
WSRV_EXPORT int wsrv_attach(struct wsrv_client *c, const char *model, struct wsrv_model **out);

/* Tells the server (if it is still connected), unmaps, frees. NULL is fine. */
WSRV_EXPORT void wsrv_detach(struct wsrv_model *m);

/* The model's name. No system call. */
WSRV_EXPORT const char *wsrv_model_name(const struct wsrv_model *m);

/* Number of tensors, and tensor i in arena order (layer by layer). No
 * system call. -ERANGE when i is out of range. */
WSRV_EXPORT size_t wsrv_model_tensor_count(const struct wsrv_model *m);
WSRV_EXPORT int wsrv_model_tensor(const struct wsrv_model *m, size_t i, struct wsrv_tensor *out);

/* A tensor by name (a hash lookup). -ENOENT when absent. No system call. */
WSRV_EXPORT int wsrv_model_find(const struct wsrv_model *m, const char *name,
				struct wsrv_tensor *out);

/* Number of layer groups (the global group included), the i-th in order
 * (global first, then ascending), and a layer by index. -ENOENT / -ERANGE
 * when absent. No system call. */
WSRV_EXPORT size_t wsrv_model_layer_count(const struct wsrv_model *m);
WSRV_EXPORT int wsrv_model_layer_at(const struct wsrv_model *m, size_t i, struct wsrv_layer *out);
WSRV_EXPORT int wsrv_model_layer(const struct wsrv_model *m, int32_t index, struct wsrv_layer *out);

/* The model's config.json text (not NUL-terminated; *len bytes), or NULL
 * when it had none. No system call. */
WSRV_EXPORT const char *wsrv_model_config(const struct wsrv_model *m, size_t *len);

/* Asks the server for layer `index` and a lease on it (the server counts
 * what each worker uses; leases end with wsrv_release, wsrv_detach or the
 * connection). Fails with -ENOTCONN when the server is gone. */
WSRV_EXPORT int wsrv_fetch_layer(struct wsrv_model *m, int32_t index, struct wsrv_lease *out);

/* Ends a lease. */
WSRV_EXPORT int wsrv_release(struct wsrv_model *m, uint64_t lease_id);

/* ---- Streams: layers copied to a device while the previous ones compute ---- */

struct wsrv_device;   /* a device backend */
struct wsrv_plan;     /* where each tensor lives */
struct wsrv_stream;   /* a pipeline of device slots over a model's layers */

enum wsrv_residency {
	WSRV_STREAMED = 0,    /* copied into a slot on every pass */
	WSRV_RESIDENT = 1,    /* copied once when the stream opens */
	WSRV_LAYER_SHARD = 2, /* resident on rank (layer mod K), streamed elsewhere */
	WSRV_NOT_IN_VIEW = 3, /* another rank's (an expert it owns): not on this device */
};

struct wsrv_host_opts {
	double bandwidth_gbps;       /* cap on the copy engine, 0: none */
	int numa_node;               /* where device memory goes, -1: anywhere */
};

/* The host backend: device memory is this process's own memory, copies run
 * on a copy thread playing the DMA engine, optionally paced to a link's
 * bandwidth. On success *out is owned by the caller (wsrv_device_destroy,
 * after every stream on it is closed). Thread-safe. */
WSRV_EXPORT int wsrv_device_host(const struct wsrv_host_opts *o, struct wsrv_device **out);
WSRV_EXPORT void wsrv_device_destroy(struct wsrv_device *d);

struct wsrv_cuda_opts {
	int device;                  /* the CUDA device ordinal */
	void *compute_stream;        /* the worker's cudaStream_t; NULL: acquire blocks */
};

/* The CUDA backend: device memory from cudaMalloc; the model's shared
 * segments page-locked with cudaHostRegister (read-only where the device
 * supports it, else copies bounce through pinned buffers); copies on a
 * dedicated stream with an event each; acquire makes compute_stream wait
 * on the layer's event, so the CPU does not block. -ENODEV without a GPU,
 * -EOPNOTSUPP when libwsrv was built without CUDA. */
WSRV_EXPORT int wsrv_device_cuda(const struct wsrv_cuda_opts *o, struct wsrv_device **out);

/* Plans. Rules are glob patterns over a tensor's module path (its name
 * without a final .weight/.bias/.weight_scale_inv, with or without a leading
 * "model."); "*" matches one dot-free component; the first matching rule
 * wins. Tensors no rule matches: under a budget the library chooses (keeps
 * resident what fits, streams the largest per-layer series first); without
 * one, numbered layers stream and the global group stays resident. A plan
 * is read-only once a stream uses it. */
WSRV_EXPORT int wsrv_plan_new(struct wsrv_plan **out);
/* {"residency": {"PATTERN": "resident"|"streamed"|"layer_shard:K", ...},
 *  "budget": BYTES or "4G", "tp_plan": {...}} from text or a file. */
WSRV_EXPORT int wsrv_plan_parse(const char *json, size_t len, struct wsrv_plan **out);
WSRV_EXPORT int wsrv_plan_load(const char *path, struct wsrv_plan **out);
/* Adds a rule; k is the layer_shard group size (ignored otherwise). */
WSRV_EXPORT int wsrv_plan_add(struct wsrv_plan *p, const char *pattern, int residency, unsigned k);
/* Device memory the stream may use (resident tensors and slots); 0: none. */
WSRV_EXPORT int wsrv_plan_set_budget(struct wsrv_plan *p, uint64_t bytes);
WSRV_EXPORT void wsrv_plan_free(struct wsrv_plan *p);

struct wsrv_stream_opts {
	unsigned slots;              /* D, 1 to 64; 0: 2 */
	int rank;                    /* this worker's rank: layer_shard, tp_plan */
	int world;                   /* tensor-parallel world W with the plan's tp_plan; 0/1: none */
	const char *trace_path;      /* a Chrome trace written at close; NULL: $WSRV_TRACE */
};

struct wsrv_stream_stats {
	uint64_t bytes_copied, copies, acquires, passes;
	double copy_seconds;         /* the copy engine's time on this stream's layers */
	double wait_seconds;         /* time acquire waited for a copy */
	double hidden_fraction;      /* 1 - wait / copy */
	uint64_t resident_bytes, slot_bytes, device_bytes;
	uint64_t pass_copy_bytes;    /* bytes copied per pass */
	unsigned slots;
};

/* Opens a stream over an attached model on device d (NULL: placement only,
 * for a report) with plan p (NULL: the defaults above). Resident tensors are
 * copied now. On success *out is owned by the caller (wsrv_stream_close,
 * before the model is detached). A stream is used by one thread at a time. */
WSRV_EXPORT int wsrv_stream_open(struct wsrv_model *m, struct wsrv_device *d,
				 const struct wsrv_plan *p, const struct wsrv_stream_opts *o,
				 struct wsrv_stream **out);
/* Makes layer `index`'s streamed tensors available on the device and starts
 * the copies of the layers that follow it into free slots. Layers may come
 * in any order; a layer is acquired once until released. -EBUSY when every
 * slot holds an acquired layer. */
WSRV_EXPORT int wsrv_stream_acquire(struct wsrv_stream *s, int32_t index);
/* Frees the layer's slot for the next prefetch. */
WSRV_EXPORT int wsrv_stream_release(struct wsrv_stream *s, int32_t index);
/* A tensor's device address: resident ones always, streamed ones while their
 * layer is acquired (-EAGAIN otherwise). No system call. */
WSRV_EXPORT int wsrv_stream_tensor(struct wsrv_stream *s, const char *name, void **dev);
WSRV_EXPORT int wsrv_stream_tensor_at(struct wsrv_stream *s, size_t i, void **dev);
/* Where tensor i lives: WSRV_RESIDENT, WSRV_STREAMED or WSRV_NOT_IN_VIEW. */
WSRV_EXPORT int wsrv_stream_residency(const struct wsrv_stream *s, size_t i);

/* What this rank sees of tensor i under the plan's tp_plan: its shard's
 * shape and bytes (packed on the device), or present = 0 for another rank's
 * expert. Strategies: colwise (dim 0 of [out, in], and of its bias),
 * rowwise (dim 1; a bias stays whole), replicate, experts (expert E of N on
 * rank E / (N / W)), kv_heads (by heads; heads replicated when W exceeds
 * them); Hugging Face's names (local_colwise, colwise_rep, local, gather,
 * ...) as aliases. FP8 weight_scale_inv tensors split with their weight, in
 * 128x128 blocks. A shape that does not divide fails wsrv_stream_open. */
struct wsrv_view {
	int present;
	uint32_t rank;
	uint64_t shape[16];
	uint64_t bytes;
};
WSRV_EXPORT int wsrv_stream_view(const struct wsrv_stream *s, size_t i, struct wsrv_view *out);
WSRV_EXPORT int wsrv_stream_stats(struct wsrv_stream *s, struct wsrv_stream_stats *out);
/* Sends the stream's counters to the server, which shows them in its stats
 * (wsrvctl stats) until the stream closes. A server call: not for every
 * layer. */
WSRV_EXPORT int wsrv_stream_report(struct wsrv_stream *s);
/* Waits for copies in flight, writes the trace if asked, frees. NULL is fine. */
WSRV_EXPORT void wsrv_stream_close(struct wsrv_stream *s);

#ifdef __cplusplus
}
#endif

#endif
