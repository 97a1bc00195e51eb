// SPDX-License-Identifier: MIT
/* name_index.c - a manifest's tensors by name (name_index.h). */
#include "name_index.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

static const char *name_at(const struct mf_view *v, uint32_t i)
{
	return v->strings + v->tensors[i].name_off;
}

int name_index_build(struct name_index *idx, const struct mf_view *v, uint32_t *dup)
{
	uint32_t n = v->h->ntensors;
	size_t cap = 16;

	while (cap < (size_t)n * 2)
		cap *= 2;
	if (!(idx->slot = calloc(cap, sizeof(*idx->slot))))
		return -ENOMEM;
	idx->mask = cap - 1;
	for (uint32_t i = 0; i < n; i++) {
		uint64_t h = XXH3_64bits(name_at(v, i), v->tensors[i].name_len);
		size_t k = h & idx->mask;
		while (idx->slot[k].idx) {
			if (idx->slot[k].tag == (uint32_t)(h >> 32) &&
			    strcmp(name_at(v, idx->slot[k].idx - 1), name_at(v, i)) == 0) {
				*dup = i;
				name_index_free(idx);
				return -EEXIST;
			}
			k = (k + 1) & idx->mask;
		}
		idx->slot[k] = (struct name_slot){ i + 1, (uint32_t)(h >> 32) };
	}
	return 0;
}

int name_index_find(const struct name_index *idx, const struct mf_view *v, const char *name)
{
	uint64_t h = XXH3_64bits(name, strlen(name));

	for (size_t k = h & idx->mask; idx->slot[k].idx; k = (k + 1) & idx->mask) {
		uint32_t i = idx->slot[k].idx - 1;
		if (idx->slot[k].tag == (uint32_t)(h >> 32) && strcmp(name_at(v, i), name) == 0)
			return (int)i;
	}
	return -ENOENT;
}

void name_index_free(struct name_index *idx)
{
	free(idx->slot);
	idx->slot = NULL;
	idx->mask = 0;
}
