// SPDX-License-Identifier: MIT
/* wsrvd.c - the weight server: loads its models into sealed shared memory,
 * then serves them to the workers of this host over a Unix socket.
 *
 * With --load-only it loads every model exactly as it will when serving,
 * reports what it got, and exits: a pre-flight check of a host's disk,
 * memory, NUMA and huge-page setup.
 */
#include <errno.h>
#include <stdbool.h>
#include <limits.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "escape.h"
#include "load_args.h"
#include "model_adopt.h"
#include "log.h"
#include "peer_child.h"
#include "report.h"
#include "srv_access.h"
#include "srv_fdlimit.h"
#include "tier.h"
#include "srv_handover.h"
#include "srv_loop.h"
#include "srv_metrics.h"
#include "srv_peers.h"
#include "srv_successor.h"
#include "sockpath.h"
#include "srv_socket.h"
#include "units.h"
#include "utf8.h"
#include "test_seam.h"

#define MAX_MODELS 64

struct args {
	struct load_opts load;
	struct srv_config srv;
	const char *names[MAX_MODELS];
	const char *paths[MAX_MODELS];
	uint64_t budgets[MAX_MODELS];   /* --model NAME=PATH,budget=SIZE; 0: --memory-budget's */
	char *specs[MAX_MODELS];
	int nmodels;
	int load_only;
	int json;
	bool verify_adopted;
	bool take_over;
	const char *metrics_listen; /* --metrics-listen, or NULL: none */
	bool serve_late;            /* --serve-when-loaded */
	bool serve_early_asked;     /* --serve-while-loading (the default) */
	struct srv_peers peers;
};

static void usage(FILE *f)
{
	fprintf(f,
		"usage: wsrvd --model NAME=PATH [--model NAME=PATH ...] [options]\n"
		"  --model NAME=PATH         a .safetensors file or a Hugging Face model directory\n"
		"  --model NAME=PATH,budget=SIZE\n"
		"                            the same with a memory budget of its own (--memory-budget)\n"
		"  --socket PATH             default $WSRV_SOCKET, else $XDG_RUNTIME_DIR/wsrv.sock,\n"
		"                            else /run/wsrv/wsrv.sock\n"
		"  --allow-uid USER          a user (name or number) that may connect (repeatable;\n"
		"                            default: ours; root always)\n"
		"  --allow-gid GROUP         a group whose members may connect (repeatable); the\n"
		"                            socket's mode and group must let them open it too\n"
		"  --socket-mode MODE        the socket's mode: 0600, 0660 (default) or 0666\n"
		"  --socket-group GROUP      the socket's group (default: the server's own, as a\n"
		"                            unit's Group= sets it)\n"
		"  --allow-publish-uid USER  a user that may publish new generations (repeatable;\n"
		"                            default: nobody)\n"
		"  --allow-publish-gid GROUP a group whose members may publish (repeatable)\n"
		"  --metrics-listen HOST:PORT  serve Prometheus metrics at http://HOST:PORT/metrics\n"
		"                            (off by default; 127.0.0.1:9464 keeps it on this host)\n"
		"  --max-clients N           clients at once (default 1024, or what\n"
		"                            RLIMIT_NOFILE carries if fewer)\n"
		"  --max-leases N            leases per client (default 4096)\n"
		"  --max-attach N            attachments per client (default 64)\n"
		"  --max-message SIZE        bytes per packet, at most 64K (default 64K)\n"
		"  --hello-timeout SECONDS   how long a new client may stay silent (default 10)\n"
		"  --max-regions N           device regions held in all (default 64)\n"
		"  --max-region-bytes SIZE   bytes of all device regions (default 1T)\n"
		"  --max-client-regions N    device regions one client process holds, over all\n"
		"                            its connections (default 16)\n"
		"  --max-client-region-bytes SIZE  bytes of the regions one client process holds\n"
		"                            (default 256G)\n"
		"  --refuse-own-uid          refuse clients that run as the server's own user\n"
		"                            (not root): such a client owns the server's memfds,\n"
		"                            and could cut a piece another worker holds (the\n"
		"                            shipped unit sets it; docs/protocol.md)\n"
		"  --region-fill-timeout SECONDS  how long a worker may take to fill and commit a\n"
		"                            device region before its slot goes back (default 300)\n"
		"  --keep-device-regions     keep committed device regions nobody holds (until\n"
		"                            room is needed or the server stops)\n"
		"  --take-over               take the models and the socket over from the wsrvd\n"
		"                            running on it (same user or root), without a reload;\n"
		"                            it exits once this one serves\n"
		"  --verify-adopted          check every checksum of models adopted from a predecessor\n"
		"                            (systemd's fd store) before serving them\n"
		"  --serve-when-loaded       serve each model only once it is loaded; by default\n"
		"                            it is served from the moment it is laid out: clients\n"
		"                            attach at once and wait for each layer (read in layer\n"
		"                            order, a segment per few layers)\n"
		"  --serve-while-loading     the default (kept for scripts that name it)\n"
		"  --require-all-models      a model that fails to load stops the server (exit 1);\n"
		"                            by default the others are served and it is listed\n"
		"                            as failed (wsrvctl models, the metrics)\n"
		"  --load-only               load, report and exit\n"
		"  --json                    with --load-only: report as JSON on stdout\n"
		"  --quiet / --verbose       log less / more\n"
		"  --help, --version         this text; the version\n"
		"%s%s", load_options_help, peer_options_help);
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

enum { O_MODEL = 1, O_VERIFY_ADOPTED, O_TAKE_OVER, O_LOAD_ONLY, O_JSON, O_QUIET, O_VERBOSE, O_HELP, O_VERSION, O_SOCKET, O_UID, O_GID,
       O_MAX_CLIENTS, O_MAX_LEASES, O_MAX_ATTACH, O_MAX_MESSAGE, O_HELLO_TIMEOUT,
       O_MAX_REGIONS, O_MAX_REGION_BYTES, O_MAX_CLIENT_REGIONS, O_MAX_CLIENT_REGION_BYTES,
       O_KEEP_REGIONS, O_REGION_FILL_TIMEOUT, O_REFUSE_OWN_UID, O_PUBLISH_UID, O_PUBLISH_GID, O_METRICS_LISTEN,
       O_SERVE_EARLY, O_SERVE_LATE, O_REQUIRE_ALL, O_SOCKET_MODE, O_SOCKET_GROUP };

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
 * name goes into every ListModels reply, log line and metrics label
 * (issue 60 item 8: U+202E or U+0085 in a name made every ListModels
 * fail). */
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

static int parse(int argc, char **argv, struct args *a)
{
	static const struct option own[] = {
		{ "model", required_argument, NULL, O_MODEL },
		{ "load-only", no_argument, NULL, O_LOAD_ONLY },
		{ "verify-adopted", no_argument, NULL, O_VERIFY_ADOPTED },
		{ "take-over", no_argument, NULL, O_TAKE_OVER },
		{ "json", no_argument, NULL, O_JSON },
		{ "quiet", no_argument, NULL, O_QUIET },
		{ "verbose", no_argument, NULL, O_VERBOSE },
		{ "help", no_argument, NULL, O_HELP },
		{ "version", no_argument, NULL, O_VERSION },
		{ "socket", required_argument, NULL, O_SOCKET },
		{ "allow-uid", required_argument, NULL, O_UID },
		{ "socket-mode", required_argument, NULL, O_SOCKET_MODE },
		{ "socket-group", required_argument, NULL, O_SOCKET_GROUP },
		{ "allow-gid", required_argument, NULL, O_GID },
		{ "max-clients", required_argument, NULL, O_MAX_CLIENTS },
		{ "max-leases", required_argument, NULL, O_MAX_LEASES },
		{ "max-attach", required_argument, NULL, O_MAX_ATTACH },
		{ "max-message", required_argument, NULL, O_MAX_MESSAGE },
		{ "hello-timeout", required_argument, NULL, O_HELLO_TIMEOUT },
		{ "max-regions", required_argument, NULL, O_MAX_REGIONS },
		{ "max-region-bytes", required_argument, NULL, O_MAX_REGION_BYTES },
		{ "max-client-regions", required_argument, NULL, O_MAX_CLIENT_REGIONS },
		{ "max-client-region-bytes", required_argument, NULL, O_MAX_CLIENT_REGION_BYTES },
		{ "keep-device-regions", no_argument, NULL, O_KEEP_REGIONS },
		{ "region-fill-timeout", required_argument, NULL, O_REGION_FILL_TIMEOUT },
		{ "refuse-own-uid", no_argument, NULL, O_REFUSE_OWN_UID },
		{ "allow-publish-uid", required_argument, NULL, O_PUBLISH_UID },
		{ "allow-publish-gid", required_argument, NULL, O_PUBLISH_GID },
		{ "metrics-listen", required_argument, NULL, O_METRICS_LISTEN },
		{ "serve-while-loading", no_argument, NULL, O_SERVE_EARLY },
		{ "serve-when-loaded", no_argument, NULL, O_SERVE_LATE },
		{ "require-all-models", no_argument, NULL, O_REQUIRE_ALL },
	};
	struct option all[sizeof(own) / sizeof(own[0]) + LOAD_OPTIONS_COUNT + PEER_OPTIONS_COUNT + 1];
	struct errinfo e;
	int c, r;

	memcpy(all, own, sizeof(own));
	memcpy(all + sizeof(own) / sizeof(own[0]), load_long_options,
	       LOAD_OPTIONS_COUNT * sizeof(struct option));
	memcpy(all + sizeof(own) / sizeof(own[0]) + LOAD_OPTIONS_COUNT, peer_long_options,
	       (PEER_OPTIONS_COUNT + 1) * sizeof(struct option));
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
	 * error, as one from --socket is (issue 61 item 13: exit 1 then 2). */
	if (!a->load_only && !a->srv.socket_path) {
		char path[SOCKPATH_MAX], why[200];
		if (sockpath_default(path, sizeof(path), why, sizeof(why)) < 0) {
			log_err("%s", why);
			return -EINVAL;
		}
	}
	return check_names(a);
}

static int load_all(struct args *a)
{
	json_t *arr = json_array();
	int status = 0;

	if (srv_peers_start(&a->peers, false, false, &a->load) < 0)
		status = 1;
	for (int i = 0; i < a->nmodels; i++) {
		struct loaded_model *lm;
		struct errinfo e;

		a->load.loader.progress = a->json ? PROGRESS_OFF : PROGRESS_AUTO;
		if (model_load(a->names[i], a->paths[i], &a->load, &lm, &e) < 0) {
			log_err("model %s: %s", a->names[i], e.msg);
			status = 1;
			continue;
		}
		report_log_loaded(lm);
		if (a->json)
			json_array_append_new(arr, report_loaded_json(lm));
		else
			report_loaded(stdout, lm);
		loaded_model_free(lm);
	}
	if (a->json) {
		json_dumpf(arr, stdout, JSON_INDENT(2));
		fputc('\n', stdout);
	}
	json_decref(arr);
	return status;
}

/* SIGINT or SIGTERM waiting: serve() blocks them before it takes the socket,
 * so that they stop a load (which may take minutes) through the loader, and
 * the socket and its lock file are removed, instead of killing the process
 * and leaving both behind. srv_run reads them from then on. */
static bool stop_requested(void)
{
	sigset_t pending;

	return sigpending(&pending) == 0 &&
	       (sigismember(&pending, SIGINT) == 1 || sigismember(&pending, SIGTERM) == 1);
}

/* Model i from the predecessor's memfds, when it served the same name and
 * path and they still match the files; else NULL (why is logged). */
static struct loaded_model *adopt(struct args *a, int i, struct handover *h, uint64_t *gen)
{
	int seg[WSRV_MAX_FDS], idx, mfd;
	struct loaded_model *lm = NULL;
	struct errinfo e;
	uint32_t nseg = 0;
	uint64_t files = 0;
	const char *path = NULL;
	char name[64];

	if ((idx = handover_model(h, a->names[i], gen, &nseg, &files, &path)) < 0)
		return NULL;
	snprintf(name, sizeof(name), "m%d-manifest", idx);
	mfd = handover_take(h, name);
	for (uint32_t k = 0; k < nseg; k++) {
		snprintf(name, sizeof(name), "m%d-seg%u", idx, k);
		seg[k] = handover_take(h, name);
	}
	struct adopt_fds f = { mfd, seg, nseg, files };
	if (model_adopt(a->names[i], path, &a->load, &f, a->verify_adopted, &lm, &e) < 0) {
		log_warn("model %s: not adopted (%s); loading it from %s", a->names[i], e.msg, esc(a->paths[i]));
		if (mfd >= 0)
			close(mfd);
		for (uint32_t k = 0; k < nseg; k++)
			if (seg[k] >= 0)
				close(seg[k]);
		return NULL;
	}
	log_info("model %s adopted: generation %llu, %.3f s%s", esc(a->names[i]),
		 (unsigned long long)*gen, lm->total_seconds,
		 a->verify_adopted ? ", every checksum verified" : "");
	/* What was served goes on being served: a reload's path over the
	 * command line's (a restart without a take-over loads the latter). */
	if (strcmp(path, a->paths[i]) != 0)
		log_warn("model %s: serving generation %llu from %s, as the server taken over did (a reload), "
			 "not %s as the command line says; a plain restart loads the command line's, so put "
			 "the new path there to keep it", esc(a->names[i]), (unsigned long long)*gen, esc(path),
			 esc(a->paths[i]));
	return lm;
}

/* The take-over, asked again every 100 ms while the running server
 * answers EAGAIN (a model of its still loading, or it is stopping), until
 * a stop signal. EBUSY (another take-over under way) ends it. */
static int take_when_loaded(const char *path, struct handover *h, int *tconn, struct errinfo *e)
{
	double t0 = mono_now(), said = 0;
	int r;

	while ((r = successor_take(path, h, tconn, e)) == -EAGAIN && !stop_requested()) {
		if (mono_now() - said >= 10) {
			log_info("%s; asking again (%.0f s so far)", e->msg, mono_now() - t0);
			said = mono_now();
		}
		usleep(100000);
	}
	return r;
}

/* Tells the server taken over (tconn, closed here; -1: none) that this
 * one serves. 0: serve. A server that went away meanwhile is no reason
 * not to; one that refuses (the take-over ran past its deadline, and it
 * serves on) is: -1, and this one must leave it the socket. */
static int confirm_takeover(int tconn)
{
	struct errinfo e;
	int r;

	if (tconn < 0 || (r = successor_finish(tconn, &e)) == 0)
		return 0;
	if (r == -ENOTCONN) {
		log_warn("the server taken over did not confirm: %s (serving anyway)", e.msg);
		return 0;
	}
	log_err("the server taken over refused the hand-over: %s; it serves on, and this one stops", e.msg);
	return -1;
}

/* The listening socket: claimed (srv_listen), or with --take-over received
 * from the running server with everything it serves (into h; *tconn is the
 * connection to confirm on). No server to take over: claimed as usual. */
static int claim(struct args *a, struct server *srv, struct handover *h, int *lfd, int *lock,
		 int *tconn)
{
	const char *pause = test_seam("WSRV_TEST_TAKEOVER_PAUSE_MS");
	struct errinfo e;
	int r;

	if (a->take_over) {
		r = take_when_loaded(srv->cfg.socket_path, h, tconn, &e);
		if (r == 0) {
			log_info("taking over from the running server: %zu fds received", h->n);
			*lfd = handover_take(h, "listen");
			*lock = handover_take(h, "lock");
			if (pause) /* tests only: a window to kill either side in */
				usleep((useconds_t)atoi(pause) * 1000);
			if (*lfd >= 0 && *lock >= 0)
				return 0;
			log_err("the running server did not hand over its socket");
			return -EPROTO;
		}
		if (r != -ENOENT && r != -ECONNREFUSED) {
			log_err("%s", e.msg);
			return r;
		}
		log_info("%s; starting on its own", e.msg);
		*tconn = -1;
	}
	if ((r = srv_listen(srv->cfg.socket_path, srv->cfg.socket_mode, srv->cfg.socket_gid, lfd, lock, &e)) < 0)
		log_err("%s", e.msg);
	return r;
}

/* Segments of a model served while loading: LOAD_EARLY_SEGMENTS, or
 * fewer where RLIMIT_NOFILE is low and the server unprivileged (each
 * segment is an fd in every Attach reply in flight, charged to this user:
 * a model of many segments would leave room for few clients). */
static uint32_t loading_segment_count(void)
{
	struct rlimit rl;
	uint32_t n;

	if (geteuid() == 0 || getrlimit(RLIMIT_NOFILE, &rl) < 0 || rl.rlim_max == RLIM_INFINITY)
		return LOAD_EARLY_SEGMENTS;
	n = fd_fit_segments((uint64_t)rl.rlim_max, LOAD_EARLY_SEGMENTS);
	if (n < LOAD_EARLY_SEGMENTS)
		log_info("RLIMIT_NOFILE %llu: models served while loading get at most %u segments, so that "
			 "%u clients fit (a higher LimitNOFILE= gives finer readiness)",
			 (unsigned long long)rl.rlim_max, n, FD_FIT_WANT_CLIENTS);
	return n;
}

/* lm (owned by srv from now on) as the next model entry. */
static void add_entry(struct server *srv, struct loaded_model *lm, uint64_t gen, bool loading, uint64_t budget)
{
	srv->models[srv->nmodels].generation = gen;
	srv->models[srv->nmodels].budget = budget;
	srv->models[srv->nmodels].state = loading ? SM_LOADING : SM_READY;
	srv->models[srv->nmodels].load_t0 = mono_now();
	srv->models[srv->nmodels].name = strdup(lm->model->name); /* NULL: not in metrics */
	srv->models[srv->nmodels++].lm = lm;
}

/* Model i could not be loaded (why): listed as failed and not served,
 * while the others are: 0; or, with
 * --require-all-models, -EINVAL (the server does not start). */
static int unloaded(struct server *srv, const struct args *a, int i, const char *why)
{
	struct srv_unloaded *u = &srv->unloaded[srv->nunloaded];

	if (srv->cfg.require_all || srv->nunloaded >= SRV_MAX_UNLOADED)
		return -EINVAL;
	utf8_copy(u->name, sizeof(u->name), a->names[i]);
	utf8_copy(u->path, sizeof(u->path), a->paths[i]);
	utf8_copy(u->why, sizeof(u->why), why);
	srv->nunloaded++;
	return 0;
}

/* Model i laid out, its load begun on the early thread later: served
 * while it loads. */
static int add_early(struct args *a, struct server *srv, int i, uint64_t gen)
{
	struct loaded_model *lm;
	struct errinfo e;

	struct load_opts lo = a->load;
	if (a->budgets[i])
		lo.memory_budget = a->budgets[i];
	if (model_load_begin(a->names[i], a->paths[i], &lo, &lm, &e) < 0) {
		log_err("model %s: %s", a->names[i], e.msg);
		return unloaded(srv, a, i, e.msg);
	}
	log_info("model %s: laid out in %u segments; serving it while it loads", a->names[i],
		 lm->arena->nseg);
	add_entry(srv, lm, gen, true, lo.memory_budget);
	return 0;
}

/* Model i loaded whole before serving. */
static int add_loaded(struct args *a, struct server *srv, int i, uint64_t gen)
{
	struct loaded_model *lm;
	struct errinfo e;

	a->load.loader.progress = PROGRESS_AUTO;
	a->load.loader.stop = stop_requested;
	if (model_load(a->names[i], a->paths[i], &a->load, &lm, &e) < 0) {
		if (stop_requested()) {
			log_info("model %s: stopped by a signal while loading", a->names[i]);
			return -EINTR;
		}
		log_err("model %s: %s", a->names[i], e.msg);
		return unloaded(srv, a, i, e.msg);
	}
	report_log_loaded(lm);
	add_entry(srv, lm, gen, false, a->budgets[i] ? a->budgets[i] : a->load.memory_budget);
	return 0;
}

/* Model i: adopted from a predecessor (and offered to peers), or loaded,
 * while serving (early) or before. */
static int serve_model(struct args *a, struct server *srv, struct handover *h, int i, bool early)
{
	struct loaded_model *lm;
	struct errinfo e;
	uint64_t gen = 0;

	/* A disk tier's model is read again: a predecessor's arena was
	 * either all in memory or not handed over (srv_handover.c). */
	if (!a->load.memory_budget && !a->budgets[i] && (lm = adopt(a, i, h, &gen))) {
		add_entry(srv, lm, gen ? gen : 1, false, 0);
		if (srv->peers && peer_serve_offer_loaded(srv->peers, lm->model, lm->arena, &e) < 0)
			log_warn("model %s: not offered to peers: %s", a->names[i], e.msg);
		return 0;
	}
	/* Loaded again where a predecessor served other bytes: a new
	 * generation, so its clients learn their mapping is not it. */
	gen = gen + 1;
	return early ? add_early(a, srv, i, gen) : add_loaded(a, srv, i, gen);
}

/* Loads every model into srv (adopting what a predecessor left in h); any
 * failure stops the server from starting. */
static int load_for_serving(struct args *a, struct server *srv, struct handover *h)
{
	/* Peers fill from other hosts in their own order; those loads serve
	 * once whole. */
	bool early = !a->serve_late && !a->load.fill && !srv->peers;

	if (a->serve_early_asked && !early)
		log_warn("--serve-while-loading: not with peers or --serve-when-loaded; each model "
			 "serves once loaded");
	/* The server's layout option, so that a publish, a reload and an
	 * adoption lay the model out as the load did. */
	a->load.loading_segments = early ? loading_segment_count() : 0;
	a->load.model.layer_segments = a->load.loading_segments;
	srv->models = calloc((size_t)a->nmodels, sizeof(*srv->models));
	if (!srv->models)
		return -ENOMEM;
	for (int i = 0; i < a->nmodels; i++)
		if (serve_model(a, srv, h, i, early) < 0)
			return -EINVAL;
	if (srv->nmodels == 0) {
		log_err("no model could be loaded");
		return -EINVAL;
	}
	if (srv->nunloaded)
		log_warn("serving %zu of %d models: %zu failed to load (wsrvctl models says why; "
			 "--require-all-models stops instead)", srv->nmodels, a->nmodels, srv->nunloaded);
	if (srv->peers) /* every model is offered now */
		peer_serve_expect(srv->peers, NULL, 0);
	return 0;
}

/* --metrics-listen: the HTTP thread, before the loop publishes to it. */
static int start_metrics(const struct args *a, struct server *srv)
{
	struct errinfo e;

	if (!a->metrics_listen)
		return 0;
	if (srv_metrics_start(a->metrics_listen, a->take_over, &srv->metrics, &e) < 0) {
		log_err("%s", e.msg);
		return -1;
	}
	log_info("metrics on port %u: GET /metrics (--metrics-listen %s)", srv_metrics_port(srv->metrics),
		 a->metrics_listen);
	return 0;
}

/* Raises the soft RLIMIT_NOFILE to the hard one, sets each client's budget
 * of unread fds (four Attach replies of the largest model), and fits the
 * client limit and the device regions to what the limit carries
 * (srv_fdlimit.c): a default --max-clients is lowered, an asked one that
 * does not fit is refused. */
static int fd_limits(struct server *srv)
{
	struct fd_fit_in in = { .own = 32, .privileged = geteuid() == 0,
				.clients = srv->cfg.max_clients,
				.clients_asked = srv->cfg.max_clients_asked,
				.regions = srv->cfg.max_regions };
	uint32_t per_attach = 1;
	struct fd_fit fit;
	struct rlimit rl;
	char why[512];

	for (size_t i = 0; i < srv->nmodels; i++) {
		/* Served to peers, a 4 KiB arena's memfds are held again by its
		 * table (peer_table.h). */
		in.own += 1 + (srv->peers ? 2 : 1) * srv->models[i].lm->arena->nseg;
		if (1 + srv->models[i].lm->arena->nseg > per_attach)
			per_attach = 1 + srv->models[i].lm->arena->nseg;
		in.units += tier_count(srv->models[i].lm->tier) -
			    (srv->models[i].lm->tier ? srv->models[i].lm->arena->nseg : 0);
	}
	srv->fd_budget = in.fd_budget = 4 * per_attach;
	if (getrlimit(RLIMIT_NOFILE, &rl) < 0) {
		log_err("getrlimit: %s", strerror(errno));
		return -errno;
	}
	if (rl.rlim_cur < rl.rlim_max) {
		rl.rlim_cur = rl.rlim_max;
		if (setrlimit(RLIMIT_NOFILE, &rl) < 0)
			getrlimit(RLIMIT_NOFILE, &rl);
	}
	in.limit = rl.rlim_cur == RLIM_INFINITY ? UINT64_MAX : (uint64_t)rl.rlim_cur;
	if (fd_fit(&in, &fit, why, sizeof(why)) < 0) {
		log_err("%s", why);
		return -EMFILE;
	}
	if (fit.clients_fitted)
		log_info("serving at most %u clients at once: RLIMIT_NOFILE %llu carries no more "
			 "(%s); --max-clients or a higher LimitNOFILE= to change it", fit.clients,
			 (unsigned long long)in.limit,
			 in.privileged ? "one fd each" : "one fd each, and fds in flight to clients");
	if (fit.regions < srv->cfg.max_regions)
		log_info("RLIMIT_NOFILE leaves room for %u device regions (--max-regions)", fit.regions);
	if (in.units) {
		tier_unit_fd_limit(fit.unit_fds);
		if (fit.unit_fds < in.units)
			log_info("RLIMIT_NOFILE %llu leaves room for %u of the disk tier's %llu routed experts in "
				 "memory at once (one memfd each); a higher LimitNOFILE= caches more",
				 (unsigned long long)in.limit, fit.unit_fds, (unsigned long long)in.units);
	}
	srv->cfg.max_clients = fit.clients;
	srv->cfg.max_regions = fit.regions;
	srv->clients_fitted = fit.clients_fitted;
	log_debug("RLIMIT_NOFILE %llu; each client may hold %u unread fds",
		  (unsigned long long)in.limit, srv->fd_budget);
	return 0;
}

/* Serving other hosts starts before the load: a fleet's hosts fetch each
 * other's shares while they load. Taking over, the server taken over
 * listens for peers until it exits; this one listens once it has. */
static int start_peers(struct args *a, struct server *srv, bool taking_over)
{
	int r = srv_peers_start(&a->peers, true, taking_over, &a->load);

	srv->peers = a->peers.serve;
	if (srv->peers) /* until loaded, a peer asking for one is told "not yet" */
		peer_serve_expect(srv->peers, a->names, (size_t)a->nmodels);
	return r;
}

/* What wsrvd's start holds until it serves or gives up. */
struct start {
	struct handover h;           /* fds a predecessor handed over (owned) */
	int lfd, lock;               /* the listening socket and its lock (owned) */
	int tconn;                   /* the take-over connection to confirm on, or -1 */
	char path[SOCKPATH_MAX];     /* the default socket's path */
};

/* Step 1: the socket's path, and SIGINT and SIGTERM blocked (the loop
 * reads them from a signalfd). */
static int prepare(struct server *srv, struct start *st, int nmodels)
{
	struct errinfo e;
	sigset_t stop;

	if (!srv->cfg.socket_path) {
		if (sockpath_default(st->path, sizeof(st->path), e.msg, sizeof(e.msg)) < 0) {
			log_err("%s", e.msg);
			return -EINVAL;
		}
		srv->cfg.socket_path = st->path;
	}
	if (!srv->cfg.refuse_own_uid || geteuid() == 0)
		srv->cfg.allow_uid[srv->cfg.n_allow_uid++] = getuid(); /* room kept for it */
	else
		log_info("clients of this server's own user (uid %u) are refused (--refuse-own-uid)",
			 (unsigned)geteuid());
	log_info("starting: %d model%s, socket %s", nmodels, nmodels == 1 ? "" : "s",
		 srv->cfg.socket_path);
	sigemptyset(&stop);
	sigaddset(&stop, SIGINT);
	sigaddset(&stop, SIGTERM);
	sigaddset(&stop, SIGHUP); /* the loop says it is ignored; never a death while starting */
	sigprocmask(SIG_BLOCK, &stop, NULL);
	return 0;
}

/* Step 3, once the socket is claimed (step 2, claim): peers, the models,
 * metrics, the fd limits; a stop asked for meanwhile ends it too. */
static int get_ready(struct args *a, struct server *srv, struct start *st)
{
	if (start_peers(a, srv, st->tconn >= 0) < 0 || load_for_serving(a, srv, &st->h) < 0 ||
	    start_metrics(a, srv) < 0 || fd_limits(srv) < 0 || stop_requested())
		return -1;
	return 0;
}

/* Step 3 failed: the socket given up (or, taking over, left to the
 * running server, which still serves). 0 when a signal asked for it. */
static int give_up(struct server *srv, struct start *st)
{
	int status = stop_requested() ? 0 : 1; /* asked to stop: not a failure */

	if (st->tconn >= 0) {
		close(st->lfd);
		close(st->lock);
		close(st->tconn);
	} else {
		srv_unlisten(srv->cfg.socket_path, st->lfd, st->lock);
	}
	for (size_t i = 0; status == 0 && i < srv->nmodels; i++)
		if (srv_model_loading(&srv->models[i]))
			log_info("model %s: stopped by a signal while loading",
				 esc(srv->models[i].lm->model->name));
	return status;
}

/* Step 4: the take-over confirmed, then the loop until a stop. */
static int run(struct server *srv, struct start *st)
{
	struct errinfo e;

	if (confirm_takeover(st->tconn) < 0) {
		close(st->lfd); /* the running server serves on: its socket stays */
		close(st->lock);
		return 1;
	}
	srv->started_wall = st->h.started;
	handover_store(srv, &st->h);
	handover_done(&st->h); /* what was not adopted is closed now */
	if (srv_run(srv, st->lfd, st->lock, &e) < 0) {
		log_err("%s", e.msg);
		return 1;
	}
	return srv->failed ? 1 : 0; /* a model served while loading failed to load */
}

/* Step 5, whatever happened: everything the start and the loop held. */
static void finish(struct args *a, struct server *srv, struct start *st)
{
	handover_done(&st->h);
	srv_metrics_stop(srv->metrics);
	srv_peers_stop(&a->peers);
	region_free_all(srv);
	for (size_t i = 0; i < srv->nmodels; i++) {
		loaded_model_free(srv->models[i].lm);
		free(srv->models[i].name);
	}
	free(srv->models);
}

/* The socket first (step 2): a second server on the same path should
 * learn that before it spends minutes loading. Clients that connect
 * during the load wait in the backlog. Taking over, the socket is the
 * running server's, handed over with its models. */
static int serve(struct args *a)
{
	struct server srv = { .cfg = a->srv, .load = &a->load, .reload_efd = -1 };
	struct start st = { .lfd = -1, .lock = -1, .tconn = -1 };
	int status;

	handover_collect(&st.h); /* first: LISTEN_FDS are fds 3 and up */
	if (prepare(&srv, &st, a->nmodels) < 0 || claim(a, &srv, &st.h, &st.lfd, &st.lock, &st.tconn) < 0) {
		status = 1;
	} else {
		srv_reach_check(srv.cfg.socket_path, &srv.cfg);
		status = get_ready(a, &srv, &st) < 0 ? give_up(&srv, &st) : run(&srv, &st);
	}
	finish(a, &srv, &st);
	return status;
}

/* A fill from peers runs UCX in a forked process (peer_fill.h). UCX's
 * memory hooks (libucm) take a process-wide lock that the fork can leave
 * held, and the fill's process then hung in ucp_init (seen in CI-like
 * runs of a fleet of three); they read their setting when libucm loads,
 * before main. So wsrvd starts itself again, once, with them off (they
 * only keep RDMA registration caches right; over TCP they do nothing), when
 * the command line fills from peers. An operator's own UCX_MEM_EVENTS is
 * kept. */
static void no_ucx_memory_hooks(char **argv)
{
	bool fills = false;

	/* Only a fill forks (an exec costs a restart about 3 ms). */
	for (char **a = argv + 1; *a && !fills; a++)
		fills = strncmp(*a, "--fill-from", 11) == 0 || strncmp(*a, "--fleet", 7) == 0;
	if (!fills || getenv("UCX_MEM_EVENTS"))
		return;
	setenv("UCX_MEM_EVENTS", "no", 1);
	execv("/proc/self/exe", argv);
	/* No /proc: on without the fork's safety (peer fills may hang). */
}

int main(int argc, char **argv)
{
	struct args a = { .srv = { .max_clients = 1024, .max_leases = 4096, .max_attach = 64,
				   .max_message = WSRV_MAX_PACKET, .max_errors = 64,
				   .hello_timeout = 10, .max_regions = 64,
				   .max_region_bytes = 1ull << 40, .max_client_regions = 16,
				   .region_fill_timeout = 300,
				   .max_client_region_bytes = 256ull << 30, .socket_gid = (gid_t)-1 } };
	int status;

	if (argc == 2 && strcmp(argv[1], PEER_CHILD_ARG) == 0)
		return peer_child_main(PEER_CHILD_FD); /* the peer process (peer_serve.h) */
	no_ucx_memory_hooks(argv);
	log_set_ident("wsrvd");
	srv_peers_init(&a.peers);
	if (parse(argc, argv, &a) < 0) {
		log_info("see wsrvd --help");
		status = 2;
	}
	else if (a.load_only)
		status = load_all(&a);
	else
		status = serve(&a);
	srv_peers_stop(&a.peers);
	for (int i = 0; i < a.nmodels; i++)
		free(a.specs[i]);
	load_args_free(&a.load);
	return status;
}
