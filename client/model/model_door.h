// SPDX-License-Identifier: MIT
/* model_door.h - what the stream room (and the copy service) may read of
 * an attached model, and
 * the calls it may make on one: its tensors, layers and pieces by index
 * (reads of its manifest, no waiting), its manifest's view (the
 * protocol's, manifest.h), its segments' addresses, its name, generation
 * and session, and the holds that keep it attached. The model itself (its
 * struct, its readiness page, its units: attached.h) stays the model
 * room's: tools/call-graph fails when a stream file includes attached.h.
 * A piece's bytes come through the piece door (piece_door.h). Functions
 * of model_door.c unless said. */
#ifndef WSRV_CLIENT_MODEL_DOOR_H
#define WSRV_CLIENT_MODEL_DOOR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "manifest.h"
#include "wire.h"

struct wsrv_model;

/* The model's tensors and layer groups, by index. */
uint32_t cl_ntensors(const struct wsrv_model *m);
uint32_t cl_nlayers(const struct wsrv_model *m);
/* Tensor i's name (i in range). */
const char *cl_tensor_name(const struct wsrv_model *m, uint32_t i);
/* Tensor i's manifest entry (i in range): its layer, segment, offset,
 * shape's place. */
const struct mf_tensor *cl_tensor_entry(const struct wsrv_model *m, uint32_t i);
/* The manifest's whole view: header, tensors, names, dims, parts. */
const struct mf_view *cl_model_view(const struct wsrv_model *m);

/* wsrv_model_tensor for i in range, without waiting: data points at the
 * reserved range until the piece arrives, and must not be read before
 * the piece door or a lookup's wait says so. (model_index.c) */
void cl_tensor_nowait(const struct wsrv_model *m, uint32_t i, struct wsrv_tensor *o);
/* wsrv_model_layer_at for i in range, without waiting (as above).
 * (model_index.c) */
void cl_layer_at_nowait(const struct wsrv_model *m, uint32_t i, struct wsrv_layer *o);
/* wsrv_model_layer without waiting for the layer's bytes. (model_index.c) */
int cl_layer_nowait(const struct wsrv_model *m, int32_t index, struct wsrv_layer *out);
/* The index of the tensor named name; -ENOENT (no error recorded); or
 * -EBADMSG (recorded) when the manifest lists a name twice.
 * (model_index.c) */
int cl_find_index(const struct wsrv_model *m, const char *name);

/* Pieces: segments (below cl_nsegments), then a disk tier's units. */
uint32_t cl_nsegments(const struct wsrv_model *m);
uint32_t cl_npieces(const struct wsrv_model *m);
/* The piece tensor i's bytes lie in: its unit, or its segment. */
uint32_t cl_piece(const struct wsrv_model *m, uint32_t i);
/* Where segment g is mapped (or reserved) here, and its length. */
const uint8_t *cl_segment_base(const struct wsrv_model *m, uint32_t g);
size_t cl_segment_len(const struct wsrv_model *m, uint32_t g);

/* Its session, its generation and the generation's identity (what it
 * was attached as: manifest_identity, the same from the attach on whether
 * the model loaded then or not; 0 from a server whose manifest names no
 * source, which nothing may match). */
struct wsrv_client *cl_model_client(const struct wsrv_model *m);
uint64_t cl_model_generation(const struct wsrv_model *m);
uint64_t cl_model_identity(const struct wsrv_model *m);
/* Whether the model has a disk tier (wsrvd --memory-budget): some of its
 * pieces come and go, dense or with expert units. */
bool cl_model_tiered(const struct wsrv_model *m);

/* A request that names model m by its attach id at *id: the id the server
 * sending it knows m by is written there before each send (a reconnect
 * gives m a new one); -ESTALE once m has other weights. Otherwise as
 * cl_call. (model_call.c) */
int cl_call_model(struct wsrv_model *m, uint32_t *id, Wsrv__Request *req, Wsrv__Response **resp,
		  int *fds, int maxfds, int *nfds);
/* A stream's hold on m: m stays attached and mapped until the last of
 * its holders lets go, its caller's wsrv_detach included, in any order (a
 * garbage collector's finalizers come in any order). (attach.c) */
void cl_model_hold(struct wsrv_model *m);
void cl_model_drop(struct wsrv_model *m);

#endif
