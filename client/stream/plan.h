// SPDX-License-Identifier: MIT
/* plan.h - libwsrv's plans: residency rules and a budget. */
#ifndef WSRV_PLAN_H
#define WSRV_PLAN_H

#include <jansson.h>
#include <stdbool.h>

#include "wsrv.h"

struct plan_rule {
	char *pattern;
	int residency;              /* enum wsrv_residency */
	unsigned k;                 /* layer_shard group size */
};

struct wsrv_plan {
	struct plan_rule *rules;
	size_t nrules;
	uint64_t budget;            /* device bytes; 0: none */
	json_t *tp_plan;            /* kept for tensor-parallel views */
	unsigned stages;            /* pipeline stages (rank_view.h); 1: none */
	bool no_share;              /* "share_resident": false */
	/* The expert cache ("expert_cache"): one of them, or none (two
	 * layers' worth). */
	uint32_t expert_slots;
	uint64_t expert_bytes;
	double expert_fraction;
};

/* The first rule whose pattern matches the tensor, or NULL. */
const struct plan_rule *plan_match(const struct wsrv_plan *p, const char *name);

#endif
