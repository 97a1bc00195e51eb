// SPDX-License-Identifier: MIT
/* ctl_budget.h - wsrvctl inspect's plan of a memory budget. */
#ifndef WSRV_CTL_BUDGET_H
#define WSRV_CTL_BUDGET_H

#include <jansson.h>
#include <stdint.h>

#include "format_door.h"

/* Prints (or, with root, adds to the JSON root as "budget") what wsrvd
 * would keep of model m (laid out with expert_pages) under budget: 0, or
 * 1 when the budget is below the smallest that starts (said). */
int ctl_budget(const struct model *m, uint64_t budget, json_t *root);

#endif
