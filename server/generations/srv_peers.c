// SPDX-License-Identifier: MIT
/* srv_peers.c - peer options and their start. */
#include "srv_peers.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"

enum { P_LISTEN = PEER_OPT_BASE, P_ALLOW, P_TOKEN, P_FILL_FROM, P_FLEET, P_FLEET_INDEX, P_WAIT };

const struct option peer_long_options[] = {
	{ "peer-listen", required_argument, NULL, P_LISTEN },
	{ "peer-allow", required_argument, NULL, P_ALLOW },
	{ "peer-token", required_argument, NULL, P_TOKEN },
	{ "fill-from", required_argument, NULL, P_FILL_FROM },
	{ "fleet", required_argument, NULL, P_FLEET },
	{ "fleet-index", required_argument, NULL, P_FLEET_INDEX },
	{ "fill-wait", required_argument, NULL, P_WAIT },
	{ 0 },
};
_Static_assert(sizeof(peer_long_options) / sizeof(peer_long_options[0]) == PEER_OPTIONS_COUNT + 1,
	       "PEER_OPTIONS_COUNT must count peer_long_options");

const char peer_options_help[] =
	"hosts filling from each other (UCX; docs/operations.md, section \"Hosts filling from each other\"):\n"
	"  --peer-listen ADDR:PORT   serve loaded models to peers, read-only (off by default)\n"
	"  --peer-allow CIDR         peers that may connect (repeatable; needed to listen)\n"
	"  --peer-token FILE         the shared token (first line, 16-256 bytes, mode 600);\n"
	"                            needed to listen and to fill\n"
	"  --fill-from ADDR:PORT[,ADDR:PORT...]  fill from these peers, the files for the rest\n"
	"  --fleet ADDR:PORT,...     hosts starting together: each reads 1/N from the files,\n"
	"  --fleet-index I           and fetches the rest; I is this host's place in --fleet\n"
	"  --fill-wait SECONDS       how long peers may take to come up (default 10, fleet 60)\n";

void srv_peers_init(struct srv_peers *p)
{
	memset(p, 0, sizeof(*p));
	p->fleet_index = -1;
	p->wait_s = -1;
	p->fill.fleet_index = -1;
}

/* Cuts "A,B,C" into the fill's peer list (one list: --fill-from or
 * --fleet, once). */
static int add_list(struct srv_peers *p, const char *opt, const char *arg)
{
	char *save = NULL;

	if (p->lists) {
		log_err("--%s: give one list, with --fill-from or --fleet, once", opt);
		return -EINVAL;
	}
	if (!(p->lists = strdup(arg)))
		return -ENOMEM;
	for (char *t = strtok_r(p->lists, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
		struct sockaddr_storage ss;
		socklen_t sl;
		struct errinfo e;
		if (p->fill.npeers == PEER_MAX_PEERS) {
			log_err("--%s: at most %d peers", opt, PEER_MAX_PEERS);
			return -E2BIG;
		}
		if (peer_parse_addr(t, &ss, &sl, &e) < 0) {
			log_err("--%s: %s", opt, e.msg);
			return -EINVAL;
		}
		p->fill.peers[p->fill.npeers++] = t;
	}
	if (!p->fill.npeers) {
		log_err("--%s: no peers given", opt);
		return -EINVAL;
	}
	return 0;
}

static int peers_number(const char *opt, const char *arg, double lo, double hi, double *out)
{
	char *end;
	double v = strtod(arg, &end);

	if (end == arg || *end || !(v >= lo && v <= hi)) {
		log_err("--%s: '%s' is not a number from %g to %g", opt, arg, lo, hi);
		return -EINVAL;
	}
	*out = v;
	return 0;
}

int srv_peers_option(struct srv_peers *p, int opt, const char *arg)
{
	struct errinfo e;
	double v;
	int r = 0;

	switch (opt) {
	case P_LISTEN: p->listen = arg; break;
	case P_ALLOW: r = peer_trust_allow(&p->trust, arg, &e); break;
	case P_TOKEN: r = peer_trust_token(&p->trust, arg, &e); break;
	case P_FILL_FROM: return add_list(p, "fill-from", arg) < 0 ? -EINVAL : 1;
	case P_FLEET:
		p->fleet = true;
		return add_list(p, "fleet", arg) < 0 ? -EINVAL : 1;
	case P_FLEET_INDEX:
		if ((r = peers_number("fleet-index", arg, 0, PEER_MAX_PEERS - 1, &v)) < 0)
			return r;
		p->fleet_index = (long)v;
		if (v != (double)p->fleet_index) {
			log_err("--fleet-index: '%s' is not a whole number", arg);
			return -EINVAL;
		}
		return 1;
	case P_WAIT: return peers_number("fill-wait", arg, 0, 3600, &p->wait_s) < 0 ? -EINVAL : 1;
	default: return 0;
	}
	if (r < 0) {
		log_err("%s", e.msg);
		return r;
	}
	return 1;
}

int srv_peers_check(struct srv_peers *p, bool load_only)
{
	bool filling = p->fill.npeers > 0;

	if (p->fleet && (p->fleet_index < 0 || (size_t)p->fleet_index >= p->fill.npeers)) {
		log_err("--fleet needs --fleet-index, from 0 to %zu", p->fill.npeers ? p->fill.npeers - 1 : 0);
		return -EINVAL;
	}
	if (!p->fleet && p->fleet_index >= 0) {
		log_err("--fleet-index needs --fleet");
		return -EINVAL;
	}
	if (p->fleet && load_only) {
		log_err("--fleet cannot be used with --load-only: the others need this host's share");
		return -EINVAL;
	}
	if (p->fleet && !p->listen)
		p->listen = p->fill.peers[p->fleet_index];
	if (p->listen && load_only) {
		log_err("--peer-listen cannot be used with --load-only");
		return -EINVAL;
	}
	if (p->listen && !p->trust.nallow) {
		log_err("--peer-listen needs --peer-allow: which peers may fill from this host");
		return -EINVAL;
	}
	if ((p->listen || filling) && !p->trust.token_len) {
		log_err("--%s needs --peer-token", p->listen ? "peer-listen" : "fill-from");
		return -EINVAL;
	}
	p->fill.fleet_index = p->fleet ? (int)p->fleet_index : -1;
	p->fill.trust = &p->trust;
	p->fill.connect_wait_s = p->wait_s >= 0 ? p->wait_s : p->fleet ? 60 : 10;
	return 0;
}

int srv_peers_start(struct srv_peers *p, bool serve, bool taking_over, struct load_opts *lo)
{
	struct errinfo e;

	if (serve && p->listen) {
		if (peer_serve_start(p->listen, &p->trust, taking_over ? 30 : 0, &p->serve, &e) < 0) {
			log_err("%s", e.msg);
			return -EIO;
		}
		p->fill.serve = p->serve;
	}
	if (p->serve || p->fill.npeers) {
		lo->fill = peer_fill_run;
		lo->fill_arg = &p->fill;
	}
	return 0;
}

void srv_peers_stop(struct srv_peers *p)
{
	peer_serve_stop(p->serve);
	p->serve = NULL;
	free(p->lists);
	p->lists = NULL;
	explicit_bzero(&p->trust, sizeof(p->trust));
}
