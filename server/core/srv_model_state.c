// SPDX-License-Identifier: MIT
/* srv_model_state.c - a generation's moves (srv_model_state.h). */
#include "srv_model_state.h"

#include <assert.h>
#include <stdbool.h>

#include "srv.h"

static const char *const names[SM_STATE_MAX] = {
	[SM_LOADING] = "loading", [SM_READY] = "ready", [SM_FAILED] = "failed",
	[SM_RETIRED] = "retired", [SM_FREED] = "freed",
};

/* moves[from][to]: whether a generation may go from one to the other. */
/* (Read by assert alone: unused in a release build.) */
__attribute__((unused)) static const bool moves[SM_STATE_MAX][SM_STATE_MAX] = {
	[SM_LOADING] = { [SM_READY] = true, [SM_FAILED] = true },
	[SM_READY] = { [SM_RETIRED] = true },
	[SM_FAILED] = { [SM_RETIRED] = true },
	[SM_RETIRED] = { [SM_FREED] = true },
};

const char *srv_model_state_name(enum srv_model_state s)
{
	return (unsigned)s < SM_STATE_MAX ? names[s] : "(unknown)";
}

void srv_model_to(struct srv_model *sm, enum srv_model_state to)
{
	assert((unsigned)sm->state < SM_STATE_MAX && (unsigned)to < SM_STATE_MAX);
	assert(moves[sm->state][to]);
	sm->state = to;
	srv_model_check(sm);
}

#ifndef NDEBUG
void srv_model_check(const struct srv_model *sm)
{
	assert((unsigned)sm->state < SM_STATE_MAX);
	assert((sm->state == SM_FREED) == (sm->lm == NULL));
}
#endif
