// SPDX-License-Identifier: MIT
/* lookup.c - reading an attached model: no server. A model loaded when
 * it was attached (or mapped whole since) takes no system call either;
 * one still loading waits here for the segment a lookup points into,
 * behind one call (cl_piece_wait, attached.h). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "attached.h"
#include "ready_wait.h"

WSRV_EXPORT int wsrv_model_held(const struct wsrv_model *m, struct wsrv_held *out)
{
	const struct mf_header *h;

	CL_NEED(m);
	CL_NEED(out);
	CL_RESULT(out);
	h = m->v.h;
	out->bytes = h->tensor_bytes;
	if (!m->v.parts)
		return 0;
	out->first = h->held_first;
	out->last = h->held_last;
	out->world = h->held_world;
	out->stages = h->held_stages;
	out->bytes = 0;
	for (uint32_t i = 0; i < h->ntensors; i++)
		out->bytes += m->v.parts[i].length;
	return 0;
}

WSRV_EXPORT const char *wsrv_model_name(const struct wsrv_model *m)
{
	return m ? m->name : NULL;
}

WSRV_EXPORT size_t wsrv_model_tensor_count(const struct wsrv_model *m)
{
	return m ? m->v.h->ntensors : 0;
}

/* A layer's data pointer: NULL unless its segment and every routed
 * expert of it (a disk tier's units) are mapped here now. */
static const void *layer_here(const struct wsrv_model *m, const struct wsrv_layer *l)
{
	struct wsrv_model *w = (struct wsrv_model *)m;

	for (uint32_t k = 0; k < m->nunits; k++)
		if (m->units[k].layer == l->index && !cl_piece_mapped(w, m->nseg + k))
			return NULL;
	return cl_data_here(w, l->segment, l->data);
}

/* Attached while the server loads it, each of these waits for the
 * segment it points into (cl_piece_wait): a lookup's bytes are always
 * the loaded ones. The model is const to the caller; its mappings are
 * libwsrv's. */
WSRV_EXPORT int wsrv_model_tensor(const struct wsrv_model *m, size_t i, struct wsrv_tensor *out)
{
	int r;

	CL_NEED(m);
	CL_NEED(out);
	if (i >= m->v.h->ntensors)
		return cl_err(-ERANGE, "tensor %zu: the model has %u", i, m->v.h->ntensors);
	if ((r = cl_piece_wait((struct wsrv_model *)m, m->v.tensors[i].segment)) < 0)
		return r;
	cl_tensor_nowait(m, (uint32_t)i, out);
	out->data = cl_data_here((struct wsrv_model *)m, cl_piece(m, (uint32_t)i), out->data);
	return 0;
}

WSRV_EXPORT const char *wsrv_model_tensor_name(const struct wsrv_model *m, size_t i)
{
	if (!m || i >= m->v.h->ntensors) {
		cl_err(-ERANGE, "wsrv_model_tensor_name: no tensor %zu", i);
		return NULL;
	}
	return cl_tensor_name(m, (uint32_t)i);
}

WSRV_EXPORT int wsrv_model_names(const struct wsrv_model *m, char *buf, size_t size, size_t *need)
{
	size_t n, at = 0;

	CL_NEED(m);
	CL_NEED(need);
	n = m->v.h->ntensors;
	for (size_t i = 0; i < n; i++)
		at += strlen(cl_tensor_name(m, (uint32_t)i)) + 1;
	*need = at;
	if (!buf)
		return 0;
	if (size < at)
		return cl_err(-ENOSPC, "wsrv_model_names: %zu bytes given, the names take %zu", size, at);
	at = 0;
	for (size_t i = 0; i < n; i++) {
		const char *nm = cl_tensor_name(m, (uint32_t)i);
		size_t len = strlen(nm) + 1;
		memcpy(buf + at, nm, len);
		at += len;
	}
	return 0;
}

WSRV_EXPORT int wsrv_model_find(const struct wsrv_model *m, const char *name,
				struct wsrv_tensor *out)
{
	int i, r;

	CL_NEED(m);
	CL_NEED(name);
	CL_NEED(out);
	if ((i = cl_find_index(m, name)) == -ENOENT)
		return cl_err(-ENOENT, "model %s has no tensor '%s'", m->name, name);
	if (i < 0)
		return i;
	if ((r = cl_piece_wait((struct wsrv_model *)m, m->v.tensors[i].segment)) < 0)
		return r;
	cl_tensor_nowait(m, (uint32_t)i, out);
	out->data = cl_data_here((struct wsrv_model *)m, cl_piece(m, (uint32_t)i), out->data);
	return 0;
}

WSRV_EXPORT size_t wsrv_model_layer_count(const struct wsrv_model *m)
{
	return m ? m->v.h->nlayers : 0;
}

WSRV_EXPORT int wsrv_model_layer_at(const struct wsrv_model *m, size_t i, struct wsrv_layer *out)
{
	int r;

	CL_NEED(m);
	CL_NEED(out);
	if (i >= m->v.h->nlayers)
		return cl_err(-ERANGE, "layer group %zu: the model has %u", i, m->v.h->nlayers);
	if ((r = cl_piece_wait((struct wsrv_model *)m, m->v.layers[i].segment)) < 0)
		return r;
	cl_layer_at_nowait(m, (uint32_t)i, out);
	out->data = layer_here(m, out);
	return 0;
}

WSRV_EXPORT int wsrv_model_layer_info(const struct wsrv_model *m, size_t i, struct wsrv_layer *out)
{
	CL_NEED(m);
	CL_NEED(out);
	if (i >= m->v.h->nlayers)
		return cl_err(-ERANGE, "layer group %zu: the model has %u", i, m->v.h->nlayers);
	cl_layer_at_nowait(m, (uint32_t)i, out);
	out->data = layer_here(m, out);
	return 0;
}

WSRV_EXPORT int wsrv_model_layer(const struct wsrv_model *m, int32_t index, struct wsrv_layer *out)
{
	int r;

	CL_NEED(m);
	CL_NEED(out);
	if ((r = cl_layer_nowait(m, index, out)) < 0 || (r = cl_piece_wait((struct wsrv_model *)m, out->segment)) < 0)
		return r;
	out->data = layer_here(m, out);
	return 0;
}

WSRV_EXPORT const char *wsrv_model_config(const struct wsrv_model *m, size_t *len)
{
	if (!m || !len) {
		cl_err(-EINVAL, "wsrv_model_config: %s is NULL", m ? "len" : "m");
		return NULL;
	}
	*len = m->v.h->config_size;
	return m->v.h->config_size ? m->v.config : NULL;
}
