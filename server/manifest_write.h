/* manifest_write.h - a loaded model's manifest in its own sealed memfd. */
#ifndef WSRV_MANIFEST_WRITE_H
#define WSRV_MANIFEST_WRITE_H

#include <stdint.h>

#include "arena.h"
#include "errinfo.h"
#include "model.h"

/* Writes the manifest of m (laid out and loaded into a) into a new memfd
 * named "wsrv:<model>:manifest", sealed like the arena. On success *fd is
 * owned by the caller and *size is the manifest's length. */
int manifest_create(const struct model *m, const struct arena *a, int *fd,
		    uint64_t *size, struct errinfo *e);

#endif
