// SPDX-License-Identifier: MIT
/* srv_model_state.c - a generation's moves (srv_model_state.h). */
#include "srv_model_state.h"

#include <assert.h>
#include <stdbool.h>

#include "lifecycle.h"
#include "srv.h"

static const char *const names[SRV_MODEL_STATE_MAX] = {
	[SM_LOADING] = "loading", [SM_READY] = "ready", [SM_FAILED] = "failed",
	[SM_RETIRED] = "retired", [SM_FREED] = "freed",
};

static const unsigned moves[SRV_MODEL_STATE_MAX] = {
	[SM_LOADING] = LIFE_BIT(SM_READY) | LIFE_BIT(SM_FAILED),
	[SM_READY] = LIFE_BIT(SM_RETIRED),
	[SM_FAILED] = LIFE_BIT(SM_RETIRED),
	[SM_RETIRED] = LIFE_BIT(SM_FREED),
};

static const struct lifecycle generation_life = { "generation", SRV_MODEL_STATE_MAX, names, moves };

void srv_model_to(struct srv_model *sm, enum srv_model_state to)
{
	if (life_check(&generation_life, sm->generation, sm->state, to) == 0)
		sm->state = to;
	srv_model_check(sm);
}

#ifndef NDEBUG
void srv_model_check(const struct srv_model *sm)
{
	assert((unsigned)sm->state < SRV_MODEL_STATE_MAX);
	assert((sm->state == SM_FREED) == (sm->lm == NULL));
}
#endif
