// SPDX-License-Identifier: MIT
/* srv_counters.c - counting requests and fetch times (srv_counters.h). */
#include <errno.h>

#include "srv_counters.h"

/* Buckets from 10e-6 s: a fetch answered from memory is that fast. */
const double srv_fetch_bounds[SRV_FETCH_BUCKETS] = {
	10e-6, 25e-6, 50e-6, 100e-6, 250e-6, 500e-6, 1e-3, 5e-3, 25e-3, 100e-3,
};

bool srv_declined(int rc)
{
	return rc == -EDQUOT || rc == -EAGAIN || rc == -ETIMEDOUT || rc == -EBUSY || rc == -ENOSPC;
}

void srv_count_request(struct srv_counters *c, int kind, enum srv_req_result result)
{
	int k = kind > 0 && kind < SRV_REQ_KINDS ? kind : 0;

	if (result == SRV_REQ_OK)
		c->req_ok[k]++;
	else if (result == SRV_REQ_DECLINED)
		c->req_declined[k]++;
	else
		c->req_err[k]++;
}

void srv_count_fetch(struct srv_counters *c, double seconds)
{
	int i = 0;

	while (i < SRV_FETCH_BUCKETS && seconds > srv_fetch_bounds[i])
		i++;
	c->fetch_bucket[i]++;
	c->fetch_count++;
	c->fetch_sum += seconds;
}
