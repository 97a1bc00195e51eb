// SPDX-License-Identifier: MIT
/* copyd_main.c - wsrv-copyd's options, its socket, its loop and its
 * lifecycle (copyd.h). The loop serves one request at a time: copies
 * share the host's link to each GPU, and a request holds it only for its
 * own bytes. */
#include <errno.h>
#include <getopt.h>
#include <jansson.h>
#include <grp.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>
#ifdef HAVE_SYSTEMD
#include <systemd/sd-daemon.h>
#endif

#include "cliarg.h"
#include "copy_client.h"
#include "copyd.h"
#include "dev_serve.h"
#include "lifecycle.h"
#include "listen_socket.h"
#include "cliopt.h"
#include "log.h"
#include "peer_allow.h"
#include "wire.h"

#define CD_POLL_MAX 1100
#define CD_TICK_MS 200

static const char *const state_names[CD_STATE_MAX] = {
	[CD_STARTING] = "starting", [CD_SERVING] = "serving", [CD_DRAINING] = "draining", [CD_STOPPED] = "stopped",
};

static const unsigned moves[CD_STATE_MAX] = {
	[CD_STARTING] = LIFE_BIT(CD_SERVING) | LIFE_BIT(CD_STOPPED),
	[CD_SERVING] = LIFE_BIT(CD_DRAINING),
	[CD_DRAINING] = LIFE_BIT(CD_STOPPED),
};

static const struct lifecycle copyd_life = { "copy service", CD_STATE_MAX, state_names, moves };

void cd_to(struct copyd *cd, enum cd_state to)
{
	if (life_check(&copyd_life, 0, cd->state, to) == 0)
		cd->state = to;
}

static int add_uid(struct cd_config *c, const char *arg)
{
	char err[256];

	if (c->n_allow_uid >= CD_MAX_ALLOW)
		return log_err("--allow-uid: %d at most", CD_MAX_ALLOW), -EINVAL;
	if (peer_uid_arg("allow-uid", arg, &c->allow_uid[c->n_allow_uid], err, sizeof(err)) < 0)
		return log_err("%s", err), -EINVAL;
	c->n_allow_uid++;
	return 0;
}

static int add_gid(struct cd_config *c, const char *opt, const char *arg, gid_t *out)
{
	char err[256];

	if (peer_gid_arg(opt, arg, out, err, sizeof(err)) < 0)
		return log_err("%s", err), -EINVAL;
	return 0;
}

enum { O_SOCKET = 256, O_WSRVD, O_DEVICE, O_MODEL, O_ALLOW_UID, O_ALLOW_GID, O_MODE, O_GROUP, O_MAXC,
       O_MAXCU, O_MAXBP, O_MAXBU, O_STATS, O_QUIET, O_VERBOSE, O_VERSION, O_HELP };

/* Its options, in --help's order: getopt's list and --help come from
 * here (cliopt.h, as wsrvd's), and the man page's check from --help. */
static const struct cli_opt copyd_opts[] = {
	{ "socket", "PATH", O_SOCKET, "where workers connect (default " WSRV_COPYD_SOCKET ")" },
	{ "wsrvd", "PATH", O_WSRVD, "wsrvd's socket (default: libwsrv's)" },
	{ "device", "N", O_DEVICE, "a GPU to serve, by ordinal; repeated (default: every one)" },
	{ "model", "NAME", O_MODEL, "held and page-locked at start; repeated (others when\nfirst asked)" },
	{ "allow-uid", "USER", O_ALLOW_UID, "may connect (root and the service's own user always may)" },
	{ "allow-gid", "GROUP", O_ALLOW_GID, "members may connect" },
	{ "socket-mode", "MODE", O_MODE, "0600, 0660 (default) or 0666" },
	{ "socket-group", "GROUP", O_GROUP, "the socket's group" },
	{ "max-clients", "N", O_MAXC, "connections in all (default 1024)" },
	{ "max-connections-per-uid", "N", O_MAXCU, "(default 64)" },
	{ "max-buffers-per-process", "N", O_MAXBP, "buffers mapped at once (default 4)" },
	{ "max-buffers-per-uid", "N", O_MAXBU, "(default 64)" },
	{ "stats", NULL, O_STATS, "print a running service's counters as JSON, and exit" },
	{ "quiet", NULL, O_QUIET, "log less" },
	{ "verbose", NULL, O_VERBOSE, "log more" },
	{ "version", NULL, O_VERSION, "the version" },
	{ "help", NULL, O_HELP, "this text" },
};
#define NOPTS (sizeof(copyd_opts) / sizeof(copyd_opts[0]))

static void usage(FILE *f)
{
	fputs("usage: wsrv-copyd [options]\n", f);
	cliopt_usage(f, copyd_opts, NOPTS);
}

/* One option: 0, 1 to exit 0 (help, version), <0 to exit 2. */
static int option(struct cd_config *c, int o, const char *arg, bool *stats)
{
	const char *p = "wsrv-copyd";

	switch (o) {
	case O_SOCKET: c->socket = arg; return 0;
	case O_WSRVD: c->wsrvd = arg; return 0;
	case O_DEVICE:
		if (c->ndevices >= CD_MAX_DEVICES)
			return log_err("--device: %d at most", CD_MAX_DEVICES), -EINVAL;
		c->ordinals[c->ndevices++] = (int)cliarg_long(p, "--device", arg, 0, 255);
		return 0;
	case O_MODEL:
		if (c->npreload >= 16)
			return log_err("--model: 16 at most"), -EINVAL;
		c->preload[c->npreload++] = arg;
		return 0;
	case O_ALLOW_UID: return add_uid(c, arg);
	case O_ALLOW_GID:
		if (c->n_allow_gid >= CD_MAX_ALLOW)
			return log_err("--allow-gid: %d at most", CD_MAX_ALLOW), -EINVAL;
		return add_gid(c, "allow-gid", arg, &c->allow_gid[c->n_allow_gid++]);
	case O_MODE:
		c->socket_mode = (mode_t)strtoul(arg, NULL, 8);
		if (c->socket_mode != 0600 && c->socket_mode != 0660 && c->socket_mode != 0666)
			return log_err("--socket-mode '%s': 0600, 0660 or 0666", arg), -EINVAL;
		return 0;
	case O_GROUP: return add_gid(c, "socket-group", arg, &c->socket_gid);
	case O_MAXC: c->max_clients = (unsigned)cliarg_long(p, "--max-clients", arg, 1, 1000); return 0;
	case O_MAXCU: c->max_conns_per_uid = (unsigned)cliarg_long(p, "--max-connections-per-uid", arg, 1, 1000); return 0;
	case O_MAXBP: c->max_buffers_per_process = (unsigned)cliarg_long(p, "--max-buffers-per-process", arg, 1, 64); return 0;
	case O_MAXBU: c->max_buffers_per_uid = (unsigned)cliarg_long(p, "--max-buffers-per-uid", arg, 1, 4096); return 0;
	case O_STATS: *stats = true; return 0;
	case O_QUIET: log_set_level(LOG_WARN); return 0;
	case O_VERBOSE: log_set_level(LOG_DEBUG); return 0;
	case O_VERSION: printf("wsrv-copyd %s\n", wsrv_version()); return 1;
	case O_HELP: usage(stdout); return 1;
	default: usage(stderr); return -EINVAL;
	}
}

static int parse(int argc, char **argv, struct cd_config *c, bool *stats)
{
	struct option long_opts[NOPTS + 1] = { 0 };
	int o, r;

	*c = (struct cd_config){ .socket = WSRV_COPYD_SOCKET, .socket_mode = 0660, .socket_gid = (gid_t)-1,
				 .max_clients = 1024, .max_conns_per_uid = 64, .max_buffers_per_process = 4,
				 .max_buffers_per_uid = 64 };
	char err[512];

	cliopt_getopt(copyd_opts, NOPTS, long_opts);
	if (cliopt_exact(argc, argv, long_opts, err, sizeof(err)) < 0)
		return log_err("%s", err), -EINVAL;
	while ((o = getopt_long(argc, argv, "", long_opts, NULL)) != -1)
		if ((r = option(c, o, optarg, stats)) != 0)
			return r;
	if (optind != argc) {
		usage(stderr);
		return -EINVAL;
	}
	c->allow_uid[c->n_allow_uid++] = geteuid(); /* its own user: room kept for it */
	return 0;
}

/* The GPUs served, each with its context; the first's registrations
 * portable (every other borrows them). 0 or <0, said. */
static int open_devices(struct copyd *cd)
{
	int all[CD_MAX_DEVICES], n = cd->cfg.ndevices, r;

	if (!n)
		for (n = 0; n < CD_MAX_DEVICES; n++)
			all[n] = n;
	for (int k = 0; k < n; k++) {
		struct wsrv_cuda_opts o = { .struct_size = sizeof(o),
					    .device = cd->cfg.ndevices ? cd->cfg.ordinals[k] : all[k] };
		struct cd_device *dv = &cd->dev[cd->ndev];
		if ((r = wsrv_device_cuda(&o, &dv->d)) < 0) {
			if (!cd->cfg.ndevices && cd->ndev > 0)
				break; /* every one the driver sees */
			return log_err("device %d: %s", o.device, wsrv_last_error()), r;
		}
		if ((r = dv->d->ops->share_info(dv->d, &dv->info)) < 0) {
			wsrv_device_destroy(dv->d);
			return log_err("device %d cannot take workers' buffers: %s", o.device, wsrv_last_error()), r;
		}
		dev_serve_portable(dv->d);
		log_info("serving device %d (%s)", o.device, dv->info.id);
		cd->ndev++;
	}
	return cd->ndev ? 0 : -ENODEV;
}

/* The socket, claimed as wsrvd claims its own (listen_socket.h): a lock
 * file keeps a second service off it, a live socket is never replaced, a
 * dead one's is, the mode is set before bind. */
static int listen_on(struct copyd *cd)
{
	struct errinfo e;
	int r = listen_claim(cd->cfg.socket, "wsrv-copyd", cd->cfg.socket_mode, cd->cfg.socket_gid, &cd->listen_fd,
			     &cd->lock_fd, &e);

	if (r < 0)
		log_err("%s", e.msg);
	return r;
}

static void preload(struct copyd *cd)
{
	struct errinfo err;

	for (unsigned i = 0; i < cd->cfg.npreload; i++) {
		if (cd_model_hold(cd, cd->cfg.preload[i], &err) < 0)
			log_warn("--model %s: %s (held when a worker first asks)", cd->cfg.preload[i], err.msg);
	}
}

/* One round of the loop: the signal, new connections, requests, wsrvd. */
static void round_once(struct copyd *cd, int sfd)
{
	struct pollfd p[CD_POLL_MAX];
	struct cd_conn *cs[CD_POLL_MAX];
	nfds_t n = 0;
	int wfd = cd_wsrvd_fd(cd);

	p[n++] = (struct pollfd){ .fd = sfd, .events = POLLIN };
	p[n++] = (struct pollfd){ .fd = cd->listen_fd, .events = POLLIN };
	p[n++] = (struct pollfd){ .fd = wfd, .events = POLLIN };
	for (struct cd_conn *c = cd->conns; c && n < CD_POLL_MAX; c = c->next) {
		cs[n] = c;
		p[n++] = (struct pollfd){ .fd = c->fd, .events = POLLIN };
	}
	/* Copies queued: look at the sockets without waiting, between slices. */
	if (poll(p, n, cd->njobs ? 0 : CD_TICK_MS) < 0 && errno != EINTR)
		return;
	if (p[0].revents & POLLIN) {
		if (cd->njobs)
			log_info("stopping: %u copies queued are not done (their workers copy by themselves)", cd->njobs);
		else
			log_info("stopping");
		cd_to(cd, CD_DRAINING);
		return;
	}
	for (nfds_t i = 3; i < n; i++)
		if (p[i].revents && !cd_serve(cd, cs[i]))
			cd_conn_close(cd, cs[i]);
	if (p[1].revents & POLLIN)
		cd_accept(cd);
	cd_schedule(cd);
	cd_models_tick(cd);
}

static int print_stats(const char *path);

static int run(struct copyd *cd)
{
	sigset_t stop;
	int sfd, r;

	sigemptyset(&stop);
	sigaddset(&stop, SIGINT);
	sigaddset(&stop, SIGTERM);
	sigprocmask(SIG_BLOCK, &stop, NULL);
	signal(SIGPIPE, SIG_IGN);
	if ((sfd = signalfd(-1, &stop, SFD_CLOEXEC)) < 0)
		return 1;
	/* No device to serve (no CUDA driver here, no GPU): a restart
	 * would find none either, so the exit status says so, and the unit
	 * does not restart on it (RestartPreventExitStatus). */
	if ((r = open_devices(cd)) < 0) {
		log_err("no GPU to serve here: exiting (status %d, which the unit does not restart on); workers copy "
			"by themselves", CD_EXIT_NO_DEVICE);
		cd_to(cd, CD_STOPPED);
		close(sfd);
		return CD_EXIT_NO_DEVICE;
	}
	if ((r = listen_on(cd)) < 0) {
		cd_to(cd, CD_STOPPED);
		close(sfd);
		return 1;
	}
	preload(cd);
	cd_to(cd, CD_SERVING);
	log_info("serving on %s", cd->cfg.socket);
#ifdef HAVE_SYSTEMD
	sd_notify(0, "READY=1");
#endif
	while (cd->state == CD_SERVING)
		round_once(cd, sfd);
	while (cd->conns)
		cd_conn_close(cd, cd->conns);
	listen_release(cd->cfg.socket, cd->listen_fd, cd->lock_fd);
	cd_models_free(cd);
	free(cd->users);
	for (int k = cd->ndev; k-- > 0;)
		wsrv_device_destroy(cd->dev[k].d);
	cd_to(cd, CD_STOPPED);
	close(sfd);
	return 0;
}

int main(int argc, char **argv)
{
	static struct copyd cd;
	bool stats = false;
	int r;

	log_set_ident("wsrv-copyd");
	if ((r = parse(argc, argv, &cd.cfg, &stats)) != 0)
		return r > 0 ? 0 : 2;
	if (stats)
		return print_stats(cd.cfg.socket);
	cd.listen_fd = cd.lock_fd = -1;
	return run(&cd);
}

static const char *hex16(uint64_t v, char *buf)
{
	snprintf(buf, 17, "%016llx", (unsigned long long)v);
	return buf;
}

static json_t *models_json(const Wsrv__CopyStatsReply *s)
{
	json_t *a = json_array();
	char hx[17];

	for (size_t i = 0; i < s->n_models; i++)
		json_array_append_new(a, json_pack("{s:s, s:I, s:s, s:I, s:I, s:i}", "name", s->models[i]->name,
						   "generation", (json_int_t)s->models[i]->generation,
						   "identity", hex16(s->models[i]->identity, hx),
						   "bytes", (json_int_t)s->models[i]->bytes,
						   "registered_bytes", (json_int_t)s->models[i]->registered_bytes,
						   "users", (int)s->models[i]->users));
	return a;
}

/* --stats: a running service's counters, as JSON. */
static int print_stats(const char *path)
{
	Wsrv__CopyResponse *rs = NULL;
	const Wsrv__CopyStatsReply *s;
	struct copy_conn *c = NULL;
	json_t *o, *devs;

	if (copy_connect(path, &c) < 0 || copy_stats(c, &rs) < 0) {
		fprintf(stderr, "wsrv-copyd: %s\n", wsrv_last_error());
		copy_close(c);
		return 1;
	}
	s = rs->stats;
	devs = json_array();
	for (size_t i = 0; i < s->n_devices; i++)
		json_array_append_new(devs, json_string(s->devices[i]));
	o = json_pack("{s:I, s:I, s:I, s:I, s:I, s:i, s:i, s:I, s:f, s:I, s:I, s:o, s:o}",
		      "registered_bytes", (json_int_t)s->registered_bytes, "copies", (json_int_t)s->copies,
		      "copied_bytes", (json_int_t)s->copied_bytes, "requests", (json_int_t)s->requests,
		      "refused", (json_int_t)s->refused, "clients", (int)s->clients, "buffers", (int)s->buffers,
		      "imports", (json_int_t)s->imports, "import_seconds", s->import_seconds,
		      "slices", (json_int_t)s->slices, "side_by_side", (json_int_t)s->side_by_side,
		      "models", models_json(s), "devices", devs);
	json_dumpf(o, stdout, JSON_INDENT(2));
	putchar('\n');
	json_decref(o);
	wsrv__copy_response__free_unpacked(rs, NULL);
	copy_close(c);
	return 0;
}
