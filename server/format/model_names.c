// SPDX-License-Identifier: MIT
/* model_names.c - a model's tensors by name: the sorted index built once
 * the layout has placed them, and the lookup the rest of the server uses. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "model.h"
#include "sorted.h"

static int cmp_by_name(const void *a, const void *b, void *tensors)
{
	const struct model_tensor *t = tensors;

	return strcmp(t[*(const uint32_t *)a].name, t[*(const uint32_t *)b].name);
}

int model_name_index(struct model *m, struct errinfo *e)
{
	m->by_name = malloc((m->ntensors + 1) * sizeof(*m->by_name));
	if (!m->by_name)
		return err_set(e, -ENOMEM, "out of memory");
	for (size_t i = 0; i < m->ntensors; i++)
		m->by_name[i] = (uint32_t)i;
	qsort_r(m->by_name, m->ntensors, sizeof(*m->by_name), cmp_by_name, m->tensors);
	for (size_t i = 1; i < m->ntensors; i++) {
		const char *a = m->tensors[m->by_name[i - 1]].name;
		if (strcmp(a, m->tensors[m->by_name[i]].name) == 0)
			return err_set(e, -EINVAL, "%s: tensor '%s' appears twice", m->path, a);
	}
	return 0;
}

/* What model_find looks for: a name, among m's tensors. */
struct name_key {
	const struct model *m;
	const char *name;
};

static int name_cmp(const void *key, const void *elem)
{
	const struct name_key *k = key;

	return strcmp(k->name, k->m->tensors[*(const uint32_t *)elem].name);
}

const struct model_tensor *model_find(const struct model *m, const char *name)
{
	struct name_key k = { m, name };
	long i = sorted_index(&k, m->by_name, m->ntensors, sizeof(*m->by_name), name_cmp);

	return i < 0 ? NULL : &m->tensors[m->by_name[i]];
}
