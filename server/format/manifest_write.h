// SPDX-License-Identifier: MIT
/* manifest_write.h - the manifest writer: a loaded model's catalog in its own sealed
 * memfd (manifest.h has the layout and the checker). */
#ifndef WSRV_MANIFEST_WRITE_H
#define WSRV_MANIFEST_WRITE_H

#include <stdint.h>

#include "errinfo.h"
#include "model.h"

/* Writes the manifest of m (laid out, and loaded into m->nsegments
 * segments of seg_sizes bytes and pages of page_size) into a new memfd named
 * "wsrv:<model>:manifest", sealed against every change. On success *fd is
 * owned by the caller and *size is the manifest's length. */
int manifest_create(const struct model *m, const uint64_t *seg_sizes, uint64_t page_size,
		    int *fd, uint64_t *size, struct errinfo *e);

#endif
