// SPDX-License-Identifier: MIT
/* peer_ucx.c - UCX steps shared by the serving and the filling side. */
#include "peer_ucx.h"

#include <errno.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "log.h"
#include "peer_trust.h"

int peer_ucx_open(bool wakeup, ucp_context_h *ctx, ucp_worker_h *worker, struct errinfo *e)
{
	/* Active messages only: see peer_serve.h for why no RMA. */
	ucp_params_t up = { .field_mask = UCP_PARAM_FIELD_FEATURES,
			    .features = UCP_FEATURE_AM | (wakeup ? UCP_FEATURE_WAKEUP : 0) };
	ucp_worker_params_t wp = { .field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE,
				   .thread_mode = UCS_THREAD_MODE_SINGLE };
	ucs_status_t st;

	if ((st = ucp_init(&up, NULL, ctx)) != UCS_OK)
		return err_set(e, -EIO, "peers: UCX: ucp_init: %s", ucs_status_string(st));
	if ((st = ucp_worker_create(*ctx, &wp, worker)) != UCS_OK)
		return err_set(e, -EIO, "peers: UCX: ucp_worker_create: %s", ucs_status_string(st));
	return 0;
}

int peer_ucx_handler(ucp_worker_h worker, unsigned id, ucp_am_recv_callback_t cb, void *arg)
{
	ucp_am_handler_param_t p = { .field_mask = UCP_AM_HANDLER_PARAM_FIELD_ID |
				     UCP_AM_HANDLER_PARAM_FIELD_CB | UCP_AM_HANDLER_PARAM_FIELD_ARG,
				     .id = id, .cb = cb, .arg = arg };

	return ucp_worker_set_am_recv_handler(worker, &p) == UCS_OK ? 0 : -EIO;
}

bool peer_ucx_record(const ucp_am_recv_param_t *p, const void *data, size_t len, void *out, size_t n)
{
	if (len != n || (p->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV))
		return false;
	memcpy(out, data, n);
	return true;
}

void *peer_ucx_close(ucp_ep_h ep)
{
	ucp_request_param_t p = { .op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS,
				  .flags = UCP_EP_CLOSE_FLAG_FORCE };
	void *req = ucp_ep_close_nbx(ep, &p);

	return UCS_PTR_IS_PTR(req) ? req : NULL;
}

/* Whether ifa holds the address ss names. */
static bool same_ip(const struct sockaddr *a, const struct sockaddr_storage *ss)
{
	if (!a || a->sa_family != ss->ss_family)
		return false;
	if (a->sa_family == AF_INET)
		return ((const struct sockaddr_in *)a)->sin_addr.s_addr ==
		       ((const struct sockaddr_in *)ss)->sin_addr.s_addr;
	return a->sa_family == AF_INET6 &&
	       memcmp(&((const struct sockaddr_in6 *)a)->sin6_addr, &((const struct sockaddr_in6 *)ss)->sin6_addr,
		      sizeof(struct in6_addr)) == 0;
}

void peer_ucx_only_device_of(const char *addr)
{
	struct sockaddr_storage ss;
	struct ifaddrs *ifs, *i;
	struct errinfo e;
	socklen_t sl;

	if (getenv("UCX_NET_DEVICES") || peer_parse_addr(addr, &ss, &sl, &e) < 0 || getifaddrs(&ifs) < 0)
		return;
	for (i = ifs; i; i = i->ifa_next)
		if (same_ip(i->ifa_addr, &ss)) {
			setenv("UCX_NET_DEVICES", i->ifa_name, 1);
			log_debug("peers: UCX uses network device %s only", i->ifa_name);
			break;
		}
	freeifaddrs(ifs);
}
