// SPDX-License-Identifier: MIT
/* srv_counters.h - what wsrvd counts for its metrics (srv_metrics.c):
 * requests by type and result, refusals by reason, fetch latency as a
 * histogram, reload and publish outcomes. Only the loop's thread writes
 * them; the metrics text is rendered on that thread too. */
#ifndef WSRV_SRV_COUNTERS_H
#define WSRV_SRV_COUNTERS_H

#include <stdbool.h>
#include <stdint.h>

/* Request kinds: a Request's body case (its field number), 0 for a packet
 * that is no Request. */
#define SRV_REQ_KINDS 64

enum srv_refusal {
	SRV_REFUSE_NOT_ALLOWED,     /* --allow-uid, --allow-gid */
	SRV_REFUSE_MAX_CLIENTS,     /* --max-clients */
	SRV_REFUSE_OUT_OF_FDS,      /* RLIMIT_NOFILE */
	SRV_REFUSALS
};

enum srv_outcome {
	SRV_RELOAD_OK, SRV_RELOAD_FAILED,
	SRV_PUBLISH_OK, SRV_PUBLISH_FAILED, SRV_PUBLISH_ABORTED,
	SRV_OUTCOMES
};

/* Upper bounds (seconds) of the fetch-latency buckets, +Inf after. */
#define SRV_FETCH_BUCKETS 10
extern const double srv_fetch_bounds[SRV_FETCH_BUCKETS];

struct srv_counters {
	uint64_t req_ok[SRV_REQ_KINDS], req_declined[SRV_REQ_KINDS], req_err[SRV_REQ_KINDS];
	uint64_t refused[SRV_REFUSALS];
	uint64_t outcomes[SRV_OUTCOMES];
	uint64_t fetch_bucket[SRV_FETCH_BUCKETS + 1]; /* not cumulative; the last is +Inf */
	uint64_t fetch_count;
	double fetch_sum;
};

/* A request's result: served; turned away for now, the client to ask
 * again (srv_declined); or an error. */
enum srv_req_result { SRV_REQ_OK, SRV_REQ_DECLINED, SRV_REQ_ERROR };

/* Whether a handler's -errno turns a request away for now rather than
 * says it was wrong: a quota (EDQUOT), a model still loading or a take
 * asked to wait (EAGAIN), a wait that ran out (ETIMEDOUT), something busy
 * (EBUSY), no room (ENOSPC). A well-behaved client meets these and asks
 * again; they are neither errors to an operator nor counted against the
 * client's max_errors (srv_config). */
bool srv_declined(int rc);

/* Counts one request of kind (its body case) and result. */
void srv_count_request(struct srv_counters *c, int kind, enum srv_req_result result);

/* Counts one fetch that took seconds. */
void srv_count_fetch(struct srv_counters *c, double seconds);

#endif
