// SPDX-License-Identifier: MIT
/* srv_fdlimit.c - fitting the client limit and the device regions to
 * RLIMIT_NOFILE (srv_fdlimit.h). Pure arithmetic: wsrvd reads the limit. */
#include "srv_fdlimit.h"

#include <errno.h>
#include <stdio.h>

static uint64_t min64(uint64_t a, uint64_t b) { return a < b ? a : b; }

/* The most clients that fit when nobody asked: the default, less what the
 * limit cannot carry. */
static uint64_t fit_clients(const struct fd_fit_in *in)
{
	uint64_t avail = in->limit > in->own ? in->limit - in->own : 0;
	uint64_t keep = min64(in->regions, avail / 4) + min64(in->units, avail / 4) +
			(in->units ? min64(FD_FIT_RESERVE, avail / 8) : 0);
	uint64_t c = min64(in->clients, avail - keep);

	if (!in->privileged && in->fd_budget)
		c = min64(c, in->limit / in->fd_budget);
	return c;
}

int fd_fit(const struct fd_fit_in *in, struct fd_fit *out, char *why, size_t n)
{
	uint64_t c = in->clients_asked ? in->clients : fit_clients(in);
	uint64_t inflight = in->privileged ? 0 : c * in->fd_budget;
	uint64_t own = in->own + c;

	if (!in->clients_asked && c < FD_FIT_MIN_CLIENTS) {
		snprintf(why, n, "RLIMIT_NOFILE is %llu: it leaves room for %llu clients "
			 "(%llu fds are the server's own%s), fewer than %u; raise the limit "
			 "(LimitNOFILE= in the unit)",
			 (unsigned long long)in->limit, (unsigned long long)c,
			 (unsigned long long)in->own,
			 in->privileged ? "" : ", and each client may have fds in flight to it",
			 FD_FIT_MIN_CLIENTS);
		return -EMFILE;
	}
	if (in->limit < own || in->limit < inflight) {
		snprintf(why, n, "RLIMIT_NOFILE is %llu, and --max-clients %u needs %llu (%llu open%s); "
			 "lower --max-clients, leave it out to fit it to the limit, or raise the "
			 "limit (LimitNOFILE= in the unit)",
			 (unsigned long long)in->limit, in->clients,
			 (unsigned long long)(own > inflight ? own : inflight), (unsigned long long)own,
			 inflight > own ? ", or in flight to clients that have not read their replies" : "");
		return -EMFILE;
	}
	out->clients = (uint32_t)c;
	out->regions = (uint32_t)min64(in->regions, in->limit - own);
	out->clients_fitted = c < in->clients;
	own += out->regions + FD_FIT_RESERVE;
	out->unit_fds = (uint32_t)min64(in->units, in->limit > own ? in->limit - own : 0);
	if (out->unit_fds < min64(in->units, FD_FIT_MIN_UNITS)) {
		snprintf(why, n, "RLIMIT_NOFILE is %llu: after %u clients, %u device regions and %u fds kept "
			 "free it leaves room for %u of the disk tier's %llu routed experts (one memfd each), "
			 "fewer than %u; lower --max-clients or --max-regions, or raise the limit "
			 "(LimitNOFILE= in the unit)",
			 (unsigned long long)in->limit, out->clients, out->regions, FD_FIT_RESERVE,
			 out->unit_fds, (unsigned long long)in->units, FD_FIT_MIN_UNITS);
		return -EMFILE;
	}
	return 0;
}

uint32_t fd_fit_segments(uint64_t limit, uint32_t want)
{
	/* Each client: FD_FIT_REPLIES replies of 1 + segments fds in flight. */
	uint64_t per_reply = limit / ((uint64_t)FD_FIT_WANT_CLIENTS * FD_FIT_REPLIES);
	uint64_t segs = per_reply > 1 ? per_reply - 1 : 1;

	return segs < 2 ? 2 : segs > want ? want : (uint32_t)segs;
}
