// SPDX-License-Identifier: MIT
/* wsrvd_options.c - wsrvd's command line. Its own options are one table
 * (wsrvd_opts): getopt's list and --help are made from it (cliopt.h, as
 * wsrv-copyd's), and the man
 * page's test (tools/man/check-pages) holds docs/man/man8/wsrvd.8 to that
 * --help. The load options (load_args.c) and the peer options
 * (srv_peers.c) come from their rooms. */
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cliopt.h"
#include "escape.h"
#include "log.h"
#include "sockpath.h"
#include "core_door.h"
#include "metrics_door.h"
#include "test_seam.h"
#include "units.h"
#include "utf8.h"
#include "wsrvd_options.h"

enum { O_MODEL = 1, O_VERIFY_ADOPTED, O_TAKE_OVER, O_LOAD_ONLY, O_JSON, O_QUIET, O_VERBOSE, O_HELP, O_VERSION, O_SOCKET, O_UID, O_GID,
       O_MAX_CLIENTS, O_MAX_LEASES, O_MAX_ATTACH, O_MAX_MESSAGE, O_HELLO_TIMEOUT,
       O_MAX_REGIONS, O_MAX_REGION_BYTES, O_MAX_CLIENT_REGIONS, O_MAX_CLIENT_REGION_BYTES,
       O_KEEP_REGIONS, O_REGION_FILL_TIMEOUT, O_REFUSE_OWN_UID, O_PUBLISH_UID, O_PUBLISH_GID, O_METRICS_LISTEN,
       O_SERVE_EARLY, O_SERVE_LATE, O_REQUIRE_ALL, O_SOCKET_MODE, O_SOCKET_GROUP };

/* In --help's order. */
static const struct cli_opt wsrvd_opts[] = {
	{ "model", "NAME=PATH", O_MODEL, "a .safetensors file or a Hugging Face model directory;\n"
	  "NAME=PATH,budget=SIZE gives it a memory budget of its own\n(--memory-budget)" },
	{ "socket", "PATH", O_SOCKET, "default $WSRV_SOCKET, else $XDG_RUNTIME_DIR/wsrv.sock,\n"
	  "else /run/wsrv/wsrv.sock" },
	{ "allow-uid", "USER", O_UID, "a user (name or number) that may connect (repeatable;\n"
	  "default: ours; root always)" },
	{ "allow-gid", "GROUP", O_GID, "a group whose members may connect (repeatable); the\n"
	  "socket's mode and group must let them open it too" },
	{ "socket-mode", "MODE", O_SOCKET_MODE, "the socket's mode: 0600, 0660 (default) or 0666" },
	{ "socket-group", "GROUP", O_SOCKET_GROUP, "the socket's group (default: the server's own, as a\n"
	  "unit's Group= sets it)" },
	{ "allow-publish-uid", "USER", O_PUBLISH_UID, "a user that may publish new generations (repeatable;\n"
	  "default: nobody)" },
	{ "allow-publish-gid", "GROUP", O_PUBLISH_GID, "a group whose members may publish (repeatable)" },
	{ "metrics-listen", "HOST:PORT", O_METRICS_LISTEN, "serve Prometheus metrics at http://HOST:PORT/metrics\n"
	  "(off by default; 127.0.0.1:9464 keeps it on this host)" },
	{ "max-clients", "N", O_MAX_CLIENTS, "clients at once (default 1024, or what\nRLIMIT_NOFILE carries if fewer)" },
	{ "max-leases", "N", O_MAX_LEASES, "leases per client (default 4096)" },
	{ "max-attach", "N", O_MAX_ATTACH, "attachments per client (default 64)" },
	{ "max-message", "SIZE", O_MAX_MESSAGE, "bytes per packet, at most 64K (default 64K)" },
	{ "hello-timeout", "SECONDS", O_HELLO_TIMEOUT, "how long a new client may stay silent (default 10)" },
	{ "max-regions", "N", O_MAX_REGIONS, "device regions held in all (default 64)" },
	{ "max-region-bytes", "SIZE", O_MAX_REGION_BYTES, "bytes of all device regions (default 1T)" },
	{ "max-client-regions", "N", O_MAX_CLIENT_REGIONS, "device regions one client process holds, over all\n"
	  "its connections (default 16)" },
	{ "max-client-region-bytes", "SIZE", O_MAX_CLIENT_REGION_BYTES, "bytes of the regions one client process holds\n"
	  "(default 256G)" },
	{ "refuse-own-uid", NULL, O_REFUSE_OWN_UID, "refuse clients that run as the server's own user\n"
	  "(not root): such a client owns the server's memfds,\nand could cut a piece another worker holds (the\n"
	  "shipped unit sets it; docs/protocol.md)" },
	{ "region-fill-timeout", "SECONDS", O_REGION_FILL_TIMEOUT, "how long a worker may take to fill and commit a\n"
	  "device region before its slot goes back (default 300)" },
	{ "keep-device-regions", NULL, O_KEEP_REGIONS, "keep committed device regions nobody holds (until\n"
	  "room is needed or the server stops)" },
	{ "take-over", NULL, O_TAKE_OVER, "take the models and the socket over from the wsrvd\n"
	  "running on it (same user or root), without a reload;\nit exits once this one serves" },
	{ "verify-adopted", NULL, O_VERIFY_ADOPTED, "check every checksum of models adopted from a predecessor\n"
	  "(systemd's fd store) before serving them" },
	{ "serve-when-loaded", NULL, O_SERVE_LATE, "serve each model only once it is loaded; by default\n"
	  "it is served from the moment it is laid out: clients\nattach at once and wait for each layer (read in layer\n"
	  "order, a segment per few layers)" },
	{ "serve-while-loading", NULL, O_SERVE_EARLY, "the default (kept for scripts that name it)" },
	{ "require-all-models", NULL, O_REQUIRE_ALL, "a model that fails to load stops the server (exit 1);\n"
	  "by default the others are served and it is listed\nas failed (wsrvctl models, the metrics)" },
	{ "load-only", NULL, O_LOAD_ONLY, "load, report and exit" },
	{ "json", NULL, O_JSON, "with --load-only: report as JSON on stdout" },
	{ "quiet", NULL, O_QUIET, "log less" },
	{ "verbose", NULL, O_VERBOSE, "log more" },
	{ "help", NULL, O_HELP, "this text" },
	{ "version", NULL, O_VERSION, "the version" },
};
#define NOPTS (sizeof(wsrvd_opts) / sizeof(wsrvd_opts[0]))

static void usage(FILE *f)
{
	fputs("usage: wsrvd --model NAME=PATH [--model NAME=PATH ...] [options]\n", f);
	cliopt_usage(f, wsrvd_opts, NOPTS);
	fprintf(f, "%s%s", load_options_help, peer_options_help);
}

/* getopt's list: the table's options, then the load and peer options and
 * the terminator (the peer table's last entry). out has NOPTS +
 * LOAD_OPTIONS_COUNT + PEER_OPTIONS_COUNT + 1 entries. */
static void long_options(struct option *out)
{
	cliopt_getopt(wsrvd_opts, NOPTS, out);
	memcpy(out + NOPTS, load_long_options, LOAD_OPTIONS_COUNT * sizeof(struct option));
	memcpy(out + NOPTS + LOAD_OPTIONS_COUNT, peer_long_options,
	       (PEER_OPTIONS_COUNT + 1) * sizeof(struct option));
}

void wsrvd_args_init(struct args *a)
{
	*a = (struct args){ .srv = { .max_clients = 1024, .max_leases = 4096, .max_attach = 64,
				     .max_message = WSRV_MAX_PACKET, .max_errors = 64,
				     .hello_timeout = 10, .max_regions = 64,
				     .max_region_bytes = 1ull << 40, .max_client_regions = 16,
				     .region_fill_timeout = 300,
				     .max_client_region_bytes = 256ull << 30, .socket_gid = (gid_t)-1 } };
	srv_peers_init(&a->peers);
}

void wsrvd_args_free(struct args *a)
{
	for (int i = 0; i < a->nmodels; i++)
		free(a->specs[i]);
	load_args_free(&a->load);
}

static int add_model(struct args *a, const char *spec)
{
	char *s, *eq;

	if (a->nmodels >= MAX_MODELS) {
		log_err("at most %d models", MAX_MODELS);
		return -E2BIG;
	}
	s = strdup(spec);
	eq = s ? strchr(s, '=') : NULL;
	if (!eq || eq == s || !eq[1]) {
		log_err("--model '%s': expected NAME=PATH", spec);
		free(s);
		return -EINVAL;
	}
	*eq = 0;
	/* A budget of this model's own: the last ",budget=" (a path may hold
	 * commas; one ending so is taken for the option). */
	char *b = strstr(eq + 1, ",budget=");
	for (char *n; b && (n = strstr(b + 1, ",budget=")); b = n)
		;
	if (b) {
		*b = 0;
		if (parse_size(b + 8, &a->budgets[a->nmodels]) < 0 || !a->budgets[a->nmodels] || !eq[1]) {
			log_err("--model '%s': budget=SIZE takes a size above 0 (e.g. 2G), after NAME=PATH",
				spec);
			free(s);
			return -EINVAL;
		}
	}
	a->specs[a->nmodels] = s;
	a->names[a->nmodels] = s;
	a->paths[a->nmodels++] = eq + 1;
	return 0;
}


static int num(const char *opt, const char *arg, unsigned long lo, unsigned long hi,
	       unsigned long *out)
{
	char *end;
	unsigned long v;

	errno = 0;
	v = strtoul(arg, &end, 10);
	if (errno || end == arg || *end || v < lo || v > hi) {
		log_err("--%s '%s': expected a number from %lu to %lu", opt, arg, lo, hi);
		return -EINVAL;
	}
	*out = v;
	return 0;
}

/* A size ("64K") from lo to hi bytes. */
static int size_opt(const char *opt, const char *arg, unsigned long lo, unsigned long hi,
		    unsigned long *out)
{
	uint64_t v;

	if (parse_size(arg, &v) < 0 || v < lo || v > hi) {
		log_err("--%s '%s': expected a size from %lu to %lu bytes (K, M suffixes allowed)",
			opt, arg, lo, hi);
		return -EINVAL;
	}
	*out = (unsigned long)v;
	return 0;
}

/* An allow list takes SRV_MAX_ALLOW entries; one more is an error, never
 * dropped in silence. */
static int allow_full(const char *opt, size_t n)
{
	if (n < SRV_MAX_ALLOW)
		return 0;
	log_err("--%s: at most %d entries (use --allow-gid with a group for more users)", opt,
		SRV_MAX_ALLOW);
	return -E2BIG;
}

/* The serving options; 1 when handled, 0 when not one, <0 on error. */
static int srv_option(int c, const char *arg, struct srv_config *cfg)
{
	unsigned long v = 0;
	int r = 0;

	switch (c) {
	case O_SOCKET:
		if (!*arg || strlen(arg) >= SOCKPATH_MAX) {
			log_err("--socket '%s': a path of 1 to %d bytes", arg, SOCKPATH_MAX - 1);
			return -EINVAL;
		}
		cfg->socket_path = arg;
		return 1;
	case O_UID:
		if ((r = allow_full("allow-uid", cfg->n_allow_uid)) == 0 &&
		    (r = srv_uid_arg("allow-uid", arg, &cfg->allow_uid[cfg->n_allow_uid])) == 0)
			cfg->n_allow_uid++;
		break;
	case O_GID:
		if ((r = allow_full("allow-gid", cfg->n_allow_gid)) == 0 &&
		    (r = srv_gid_arg("allow-gid", arg, &cfg->allow_gid[cfg->n_allow_gid])) == 0)
			cfg->n_allow_gid++;
		break;
	case O_SOCKET_MODE: r = srv_mode_arg(arg, &cfg->socket_mode); break;
	case O_SOCKET_GROUP: r = srv_gid_arg("socket-group", arg, &cfg->socket_gid); break;
	case O_MAX_CLIENTS:
		r = num("max-clients", arg, 1, 65536, &v);
		cfg->max_clients = (uint32_t)v;
		cfg->max_clients_asked = true;
		break;
	case O_MAX_LEASES: r = num("max-leases", arg, 1, 1 << 20, &v); cfg->max_leases = (uint32_t)v; break;
	case O_MAX_ATTACH: r = num("max-attach", arg, 1, 4096, &v); cfg->max_attach = (uint32_t)v; break;
	case O_MAX_MESSAGE:
		r = size_opt("max-message", arg, 1024, WSRV_MAX_PACKET, &v);
		cfg->max_message = (uint32_t)v;
		break;
	case O_HELLO_TIMEOUT: r = num("hello-timeout", arg, 1, 3600, &v); cfg->hello_timeout = (double)v; break;
	case O_MAX_REGIONS: r = num("max-regions", arg, 0, 65536, &v); cfg->max_regions = (uint32_t)v; break;
	case O_MAX_CLIENT_REGIONS:
		r = num("max-client-regions", arg, 0, 4096, &v);
		cfg->max_client_regions = (uint32_t)v;
		break;
	case O_MAX_REGION_BYTES: r = size_opt("max-region-bytes", arg, 0, ULONG_MAX, &v); cfg->max_region_bytes = v; break;
	case O_MAX_CLIENT_REGION_BYTES:
		r = size_opt("max-client-region-bytes", arg, 0, ULONG_MAX, &v);
		cfg->max_client_region_bytes = v;
		break;
	case O_KEEP_REGIONS: cfg->keep_regions = true; return 1;
	case O_REFUSE_OWN_UID: cfg->refuse_own_uid = true; return 1;
	case O_REGION_FILL_TIMEOUT:
		r = num("region-fill-timeout", arg, 1, 86400, &v);
		cfg->region_fill_timeout = (double)v;
		break;
	case O_PUBLISH_UID:
		if ((r = allow_full("allow-publish-uid", cfg->n_publish_uid)) == 0 &&
		    (r = srv_uid_arg("allow-publish-uid", arg, &cfg->publish_uid[cfg->n_publish_uid])) == 0)
			cfg->n_publish_uid++;
		break;
	case O_PUBLISH_GID:
		if ((r = allow_full("allow-publish-gid", cfg->n_publish_gid)) == 0 &&
		    (r = srv_gid_arg("allow-publish-gid", arg, &cfg->publish_gid[cfg->n_publish_gid])) == 0)
			cfg->n_publish_gid++;
		break;
	default: return 0;
	}
	return r < 0 ? r : 1;
}

/* Model names are unique and text, for --load-only as for serving: a
 * name goes into every ListModels reply, log line and metrics label. */
static int check_names(const struct args *a)
{
	for (int i = 0; i < a->nmodels; i++) {
		const char *n = a->names[i];
		if (!utf8_text(n, strlen(n)) || strpbrk(n, "\t\n")) {
			log_err("model name '%s' is not text: a name is UTF-8 with no control characters, "
				"bidirectional overrides or isolates", esc(n));
			return -EINVAL;
		}
		for (int k = 0; k < i; k++)
			if (strcmp(a->names[k], a->names[i]) == 0) {
				log_err("model name %s given twice", esc(a->names[i]));
				return -EINVAL;
			}
	}
	return 0;
}

static int check_args(struct args *a);

int wsrvd_parse(int argc, char **argv, struct args *a)
{
	struct option all[NOPTS + LOAD_OPTIONS_COUNT + PEER_OPTIONS_COUNT + 1];
	struct errinfo e;
	int c, r;

	long_options(all);
	if (cliopt_exact(argc, argv, all, e.msg, sizeof(e.msg)) < 0) {
		log_err("%s", e.msg);
		return -EINVAL;
	}
	opterr = 0; /* getopt's own lines have another format: ours, below */
	while ((c = getopt_long(argc, argv, ":", all, NULL)) != -1) {
		if (c == '?' || c == ':') {
			log_err(c == ':' ? "%s: a value is needed" : "unknown option '%s'", argv[optind - 1]);
			return -EINVAL;
		}
		r = load_args_handle(c, optarg, &a->load, &e);
		if (r < 0) {
			log_err("%s", e.msg);
			return r;
		}
		if (r == 1)
			continue;
		r = srv_option(c, optarg, &a->srv);
		if (r == 0)
			r = srv_peers_option(&a->peers, c, optarg);
		if (r < 0)
			return r;
		if (r == 1)
			continue;
		switch (c) {
		case O_MODEL: if (add_model(a, optarg) < 0) return -EINVAL; break;
		case O_LOAD_ONLY: a->load_only = 1; break;
		case O_VERIFY_ADOPTED: a->verify_adopted = true; break;
		case O_TAKE_OVER: a->take_over = true; break;
		case O_METRICS_LISTEN:
			if (srv_metrics_check(optarg, &e) < 0) {
				log_err("%s", e.msg);
				return -EINVAL;
			}
			a->metrics_listen = optarg;
			break;
		case O_SERVE_EARLY: a->serve_early_asked = true; break;
		case O_SERVE_LATE: a->serve_late = true; break;
		case O_REQUIRE_ALL: a->srv.require_all = true; break;
		case O_JSON: a->json = 1; break;
		case O_QUIET: log_set_level(LOG_WARN); break;
		case O_VERBOSE: log_set_level(LOG_DEBUG); break;
		case O_HELP: usage(stdout); exit(0);
		case O_VERSION:
			printf("wsrvd %s%s\n", WSRV_VERSION_STRING,
			       test_seams_built() ? " (with the tests' $WSRV_TEST_* seams: not for production)" : "");
			exit(0);
		default: return -EINVAL;
		}
	}
	if (optind < argc) {
		log_err("unexpected argument '%s'", argv[optind]);
		return -EINVAL;
	}
	return check_args(a);
}

/* What the options say together: a model, and no budget where it cannot
 * apply; a default socket path that can be one; names that are text. */
static int check_args(struct args *a)
{
	struct errinfo e;

	if (a->nmodels == 0) {
		log_err("no model given (--model NAME=PATH)");
		return -EINVAL;
	}
	if (load_args_check(&a->load, &e) < 0) {
		log_err("%s", e.msg);
		return -EINVAL;
	}
	if (srv_peers_check(&a->peers, a->load_only) < 0)
		return -EINVAL;
	bool budgeted = a->load.memory_budget != 0;
	for (int i = 0; i < a->nmodels; i++)
		budgeted = budgeted || a->budgets[i];
	if (budgeted && (a->load_only || a->serve_late || (a->peers.fill.npeers > 0 || a->peers.listen))) {
		log_err("--memory-budget: only for a server that serves while loading, not with %s",
			a->load_only ? "--load-only" : a->serve_late ? "--serve-when-loaded" : "peers");
		return -EINVAL;
	}
	/* A socket path from $WSRV_SOCKET that cannot be one is a usage
	 * error, as one from --socket is. */
	if (!a->load_only && !a->srv.socket_path) {
		char path[SOCKPATH_MAX], why[200];
		if (sockpath_default(path, sizeof(path), why, sizeof(why)) < 0) {
			log_err("%s", why);
			return -EINVAL;
		}
	}
	return check_names(a);
}
