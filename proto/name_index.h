// SPDX-License-Identifier: MIT
/* name_index.h - a manifest's tensors by name: open addressing over the
 * names' XXH3, each slot a tensor's index + 1 and its hash's high 32 bits.
 * A MoE model's 100,000 names share long prefixes, so only names whose
 * tags agree are compared. Used where a name is looked up (an attached
 * model, a publish): a scan per name is quadratic at that count. */
#ifndef WSRV_NAME_INDEX_H
#define WSRV_NAME_INDEX_H

#include <stddef.h>
#include <stdint.h>

#include "manifest.h"

struct name_slot {
	uint32_t idx;                /* tensor index + 1; 0: empty */
	uint32_t tag;
};

struct name_index {
	struct name_slot *slot;      /* owned: name_index_free */
	size_t mask;
};

/* Builds idx over v's tensor names. 0; -ENOMEM; -EEXIST for a name listed
 * twice, *dup then its index. On failure idx owns nothing. */
int name_index_build(struct name_index *idx, const struct mf_view *v, uint32_t *dup);
/* name's tensor index, or -ENOENT. */
int name_index_find(const struct name_index *idx, const struct mf_view *v, const char *name);
void name_index_free(struct name_index *idx);

#endif
