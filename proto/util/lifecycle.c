// SPDX-License-Identifier: MIT
/* lifecycle.c - the one check of every lifecycle's moves (lifecycle.h). */
#include "lifecycle.h"

#include <assert.h>
#include <errno.h>

#include "log.h"

const char *life_name(const struct lifecycle *lc, unsigned s)
{
	return s < lc->max && lc->names[s] ? lc->names[s] : "(unknown)";
}

int life_check(const struct lifecycle *lc, uint64_t who, unsigned from, unsigned to)
{
	if (from >= lc->max || to >= lc->max || !(lc->moves[from] & LIFE_BIT(to))) {
		log_err("%s %llu: no move from %s to %s (%u -> %u)", lc->what, (unsigned long long)who,
			life_name(lc, from), life_name(lc, to), from, to);
		assert(!"a lifecycle move its table does not allow");
		return -EINVAL;
	}
	if (log_get_level() >= LOG_DEBUG)
		log_debug("%s %llu: %s -> %s", lc->what, (unsigned long long)who, life_name(lc, from),
			  life_name(lc, to));
	return 0;
}
