// SPDX-License-Identifier: MIT
/* peer_accept.c - the accept() UCX calls in the peer process (peer_accept.h). */
#include "peer_accept.h"

#include <errno.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "log.h"

static const struct peer_trust *filter;
static uint64_t *refused_count;

void peer_accept_filter(const struct peer_trust *t, uint64_t *refused)
{
	refused_count = refused;
	__atomic_store_n(&filter, t, __ATOMIC_RELEASE);
}

/* Whether a connection from ss may reach UCX: not an IP one (UCX's own
 * local sockets), or one from an allowed address. */
static int allowed(const struct peer_trust *t, const struct sockaddr_storage *ss)
{
	if (ss->ss_family != AF_INET && ss->ss_family != AF_INET6)
		return 1;
	return peer_trust_allowed(t, (const struct sockaddr *)ss);
}

/* Interposes on libc's accept (see peer_accept.h): the libc function's
 * contract, -1 and errno included, as its callers expect. */
int accept(int fd, struct sockaddr *addr, socklen_t *len)
{
	const struct peer_trust *t = __atomic_load_n(&filter, __ATOMIC_ACQUIRE);

	for (;;) {
		struct sockaddr_storage ss;
		socklen_t sl = sizeof(ss);
		int c = accept4(fd, (struct sockaddr *)&ss, &sl, 0);
		char who[64];

		if (c >= 0 && t && !allowed(t, &ss)) {
			peer_addr_str((const struct sockaddr *)&ss, who, sizeof(who));
			peer_refusal_log(who, "before UCX read a byte");
			if (refused_count)
				__atomic_add_fetch(refused_count, 1, __ATOMIC_RELAXED);
			close(c);
			continue; /* the next one, or EAGAIN on a non-blocking listener */
		}
		if (c >= 0 && addr && len) {
			memcpy(addr, &ss, *len < sl ? *len : sl);
			*len = sl;
		}
		return c;
	}
}
