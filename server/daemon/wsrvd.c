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
#include "loaded_door.h"
#include "log.h"
#include "peer_door.h"
#include "core_door.h"
#include "tier_door.h"
#include "generations_door.h"
#include "serving_door.h"
#include "metrics_door.h"
#include "holds_door.h"
#include "sockpath.h"
#include "listen_socket.h"
#include "utf8.h"
#include "wsrvd_options.h"
#include "test_seam.h"



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

/* The listening socket: claimed (listen_claim), or with --take-over received
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
	if ((r = listen_claim(srv->cfg.socket_path, "wsrvd", srv->cfg.socket_mode, srv->cfg.socket_gid, lfd, lock, &e)) < 0)
		log_err("%s%s", e.msg, r == -EADDRINUSE ? " (wsrvd --take-over replaces the running one, keeping what it serves)"
					    : "");
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
		 arena_nseg(lm->arena));
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
		in.own += 1 + (srv->peers ? 2 : 1) * arena_nseg(srv->models[i].lm->arena);
		if (1 + arena_nseg(srv->models[i].lm->arena) > per_attach)
			per_attach = 1 + arena_nseg(srv->models[i].lm->arena);
		in.units += tier_count(srv->models[i].lm->tier) -
			    (srv->models[i].lm->tier ? arena_nseg(srv->models[i].lm->arena) : 0);
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
		listen_release(srv->cfg.socket_path, st->lfd, st->lock);
	}
	for (size_t i = 0; status == 0 && i < srv->nmodels; i++)
		if (srv_model_loading(&srv->models[i]))
			log_info("model %s: stopped by a signal while loading",
				 esc(srv->models[i].lm->model->name));
	return status;
}

/* Step 4: the take-over confirmed, then the loop until a stop. */
static int run(const struct args *a, struct server *srv, struct start *st)
{
	struct errinfo e;

	if (confirm_takeover(st->tconn) < 0) {
		close(st->lfd); /* the running server serves on: its socket stays */
		close(st->lock);
		return 1;
	}
	srv->started_wall = st->h.started;
	handover_store(srv, &st->h);
	handover_say_dropped(&st->h, a->names, a->nmodels);
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
		status = get_ready(a, &srv, &st) < 0 ? give_up(&srv, &st) : run(a, &srv, &st);
	}
	finish(a, &srv, &st);
	return status;
}

/* A fill from peers runs UCX in a forked process (peer_fill.h). UCX's
 * memory hooks (libucm) take a process-wide lock that the fork can leave
 * held, and the fill's process then hangs in ucp_init; they read their
 * setting when libucm loads,
 * before main. So wsrvd starts itself again, once, with them off (they
 * only keep RDMA registration caches right; over TCP they do nothing), when
 * the command line fills from peers. An operator's own UCX_MEM_EVENTS is
 * kept. */
static void no_ucx_memory_hooks(char **argv)
{
	bool fills = false;

	/* Only a fill forks: no other start pays for the exec. */
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
	struct args a;
	int status;

	if (argc == 2 && strcmp(argv[1], PEER_CHILD_ARG) == 0)
		return peer_child_main(PEER_CHILD_FD); /* the peer process (peer_serve.h) */
	no_ucx_memory_hooks(argv);
	log_set_ident("wsrvd");
	wsrvd_args_init(&a);
	if (wsrvd_parse(argc, argv, &a) < 0) {
		log_info("see wsrvd --help");
		status = 2;
	}
	else if (a.load_only)
		status = load_all(&a);
	else
		status = serve(&a);
	srv_peers_stop(&a.peers);
	wsrvd_args_free(&a);
	return status;
}
