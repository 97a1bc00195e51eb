// SPDX-License-Identifier: MIT
/* bench_fleet.c - `wsrv-bench fleet`: N hosts (network namespaces joined by
 * a bridge, tools/harness/netlab.c; loopback where they cannot be made) starting
 * together as a fleet, against N independent cold loads in the same run;
 * and one host filling from another, against ucx_perftest's ucp_get over
 * the same transport.
 *
 * storage_bytes: bytes the hosts read from their files (wsrvd's stats),
 * for the fleet and for the independent loads. *_ready_s: from the start
 * of the N servers (page cache dropped, as root) until every one answers an
 * Attach. peer_gbps: a fill's peer bytes over its read phase
 * (wsrvd --load-only --json --fill-from), in Gbit/s. UCX is pinned to TCP
 * (UCX_TLS=tcp) unless UCX_TLS is set. */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <jansson.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "bench.h"
#include "bench_util.h"
#include "cliarg.h"
#include "clock.h"
#include "netlab.h"
#include "wsrv.h"

struct fl {
	struct netlab nl;
	int n;
	char dir[64], token[128], spec[4200];
	char sock[NETLAB_MAX][128];
	pid_t pid[NETLAB_MAX];
};

/* Runs argv in host i's namespace, stdout to out (or /dev/null). */
static pid_t spawn_in(const struct fl *f, int i, const char *const *argv, const char *out)
{
	pid_t pid = fork();

	if (pid == 0) {
		int fd = open(out ? out : "/dev/null", O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
		int nul = open("/dev/null", O_WRONLY | O_CLOEXEC);
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		if (fd < 0 || nul < 0 || netlab_enter(&f->nl, i) < 0)
			_exit(126);
		dup2(fd, 1);
		dup2(nul, 2);
		execvp(argv[0], (char *const *)argv);
		_exit(127);
	}
	return pid;
}

/* Host i's wsrvd, serving the model, with more arguments (NULL-ended). */
static void start_host(struct fl *f, int i, const char *a1, const char *a2, const char *a3,
		       const char *a4)
{
	const char *argv[] = { bench_wsrvd_path(), "--quiet", "--socket", f->sock[i], "--model", f->spec,
			       "--peer-allow", f->nl.net, "--peer-token", f->token,
			       a1, a2, a3, a4, NULL };

	snprintf(f->sock[i], sizeof(f->sock[i]), "%s/h%d.sock", f->dir, i);
	f->pid[i] = spawn_in(f, i, argv, NULL);
}

/* Until every host serves the whole model (an Attach, then, where the
 * host serves it while it loads, the wait for the last layer); seconds
 * since t0, or -1. */
static double all_ready(struct fl *f, int n, double t0)
{
	for (int i = 0; i < n; i++)
		for (;;) {
			struct wsrv_client *c;
			struct wsrv_model *m;
			struct timespec ts = { 0, 1000000 };
			int r = -1;
			if (wsrv_connect(f->sock[i], NULL, &c) == 0) {
				if ((r = wsrv_attach(c, "m", &m)) == 0) {
					r = wsrv_model_wait(m, WSRV_LAYER_ALL, 900000);
					wsrv_detach(m);
				}
				wsrv_disconnect(c);
			}
			if (r == 0)
				break;
			if (waitpid(f->pid[i], NULL, WNOHANG) == f->pid[i] || mono_now() - t0 > 900)
				return -1;
			nanosleep(&ts, NULL);
		}
	return mono_now() - t0;
}

/* Bytes host i read from its files, and got from peers. */
static void host_bytes(struct fl *f, int i, uint64_t *disk, uint64_t *peers)
{
	struct wsrv_client *c;
	struct wsrv_stats *s;
	struct wsrv_model_stats m;
	struct wsrv_fill_source src;

	if (wsrv_connect(f->sock[i], NULL, &c) < 0)
		return;
	if (wsrv_stats(c, &s) == 0) {
		if (wsrv_stats_model(s, 0, &m) == 0)
			*disk += m.disk_bytes;
		for (size_t j = 0; wsrv_stats_model_source(s, 0, j, &src) == 0; j++)
			*peers += src.bytes;
		wsrv_stats_free(s);
	}
	wsrv_disconnect(c);
}

static void stop_all(struct fl *f, int n)
{
	for (int i = 0; i < n; i++)
		if (f->pid[i] > 0) {
			kill(f->pid[i], SIGTERM);
			waitpid(f->pid[i], NULL, 0);
			f->pid[i] = 0;
		}
}

/* N hosts started together, as a fleet or each on its own. */
static double start_together(struct fl *f, bool fleet, uint64_t *disk, uint64_t *peers)
{
	char list[NETLAB_MAX * 64] = "", idx[NETLAB_MAX][16];
	double t0, t;

	netlab_ports(&f->nl);
	for (int i = 0; i < f->n; i++)
		snprintf(list + strlen(list), sizeof(list) - strlen(list), "%s%s", i ? "," : "", f->nl.addr[i]);
	bench_drop_caches();
	t0 = mono_now();
	for (int i = 0; i < f->n; i++) {
		snprintf(idx[i], sizeof(idx[i]), "%d", i);
		if (fleet)
			start_host(f, i, "--fleet", list, "--fleet-index", idx[i]);
		else
			start_host(f, i, NULL, NULL, NULL, NULL);
	}
	t = all_ready(f, f->n, t0);
	for (int i = 0; t >= 0 && i < f->n; i++)
		host_bytes(f, i, disk, peers);
	stop_all(f, f->n);
	return t;
}

/* One host filling from another: peer bytes over the fill's read phase,
 * in Gbit/s (best of `repeat`); 0 when it did not run. */
static double peer_rate(struct fl *f, int repeat)
{
	char out[160], spec_from[80];
	double best = 0;

	netlab_ports(&f->nl);
	start_host(f, 0, "--peer-listen", f->nl.addr[0], NULL, NULL);
	if (all_ready(f, 1, mono_now()) < 0)
		return stop_all(f, 1), 0;
	snprintf(out, sizeof(out), "%s/fill.json", f->dir);
	snprintf(spec_from, sizeof(spec_from), "%s", f->nl.addr[0]);
	for (int k = 0; k < repeat; k++) {
		const char *argv[] = { bench_wsrvd_path(), "--quiet", "--load-only", "--json", "--model", f->spec,
				       "--fill-from", spec_from, "--peer-token", f->token, NULL };
		pid_t pid = spawn_in(f, 1, argv, out);
		json_t *j, *m;
		int st;
		waitpid(pid, &st, 0);
		if (!(j = json_load_file(out, 0, NULL)))
			continue;
		m = json_array_get(j, 0);
		double read_s = json_real_value(json_object_get(json_object_get(m, "phases"), "read_s"));
		json_t *src = json_array_get(json_object_get(m, "sources"), 0);
		double bytes = (double)json_integer_value(json_object_get(src, "bytes"));
		if (read_s > 0 && bytes * 8 / read_s / 1e9 > best)
			best = bytes * 8 / read_s / 1e9;
		json_decref(j);
	}
	stop_all(f, 1);
	return best;
}

/* ucx_perftest's ucp_get between hosts 0 and 1, pieces of `size` bytes, in
 * Gbit/s; 0 when ucx_perftest is not there or did not run. */
static double ucx_peak(struct fl *f, size_t size)
{
	char port[16], sz[32], out[160], line[512];
	double best = 0, mbs;
	FILE *fp;

	netlab_ports(&f->nl);
	snprintf(port, sizeof(port), "%d", f->nl.port);
	snprintf(sz, sizeof(sz), "%zu", size);
	snprintf(out, sizeof(out), "%s/perftest.out", f->dir);
	const char *srv[] = { "ucx_perftest", "-p", port, NULL };
	const char *cli[] = { "ucx_perftest", f->nl.ip[0], "-p", port, "-t", "ucp_get", "-s", sz, "-n", "400", NULL };
	pid_t s = spawn_in(f, 0, srv, NULL);
	usleep(500 * 1000);
	pid_t c = spawn_in(f, 1, cli, out);
	waitpid(c, NULL, 0);
	kill(s, SIGTERM);
	waitpid(s, NULL, 0);
	if (!(fp = fopen(out, "r")))
		return 0;
	/* "Final: iters lat50 lat_avg lat_overall bw_avg bw_overall ..." (MB/s = MiB/s) */
	while (fgets(line, sizeof(line), fp))
		if (sscanf(line, "Final: %*f %*f %*f %*f %*f %lf", &mbs) == 1)
			best = mbs * 1048576.0 * 8 / 1e9;
	fclose(fp);
	return best;
}

static void fleet_report(const struct fl *f, const char *path, bool json, uint64_t model, uint64_t fdisk,
		   uint64_t idisk, double fready, double iready, double peer, double peak)
{
	if (json) {
		json_t *o = json_pack("{s:s, s:i, s:b, s:I, s:I, s:I, s:f, s:f, s:f, s:f, s:f, s:f}",
			"model", path, "hosts", f->n, "namespaces", f->nl.ns, "model_bytes", (json_int_t)model,
			"storage_bytes", (json_int_t)fdisk, "independent_storage_bytes", (json_int_t)idisk,
			"fleet_ready_s", fready, "independent_ready_s", iready,
			"storage_vs_model", (double)fdisk / (double)model, "peer_gbps", peer,
			"ucx_peak_gbps", peak, "peer_vs_peak", peak > 0 ? peer / peak : 0.0);
		json_dumpf(o, stdout, JSON_INDENT(2));
		putchar('\n');
		json_decref(o);
		return;
	}
	printf("%s, %d hosts (%s), UCX_TLS=%s\n", path, f->n,
	       f->nl.ns ? "network namespaces on a bridge" : "loopback: no namespaces here",
	       getenv("UCX_TLS"));
	printf("  storage_bytes, fleet           %14llu  %.3fx the model\n", (unsigned long long)fdisk,
	       (double)fdisk / (double)model);
	printf("  storage_bytes, independent     %14llu  %.3fx the model (baseline)\n",
	       (unsigned long long)idisk, (double)idisk / (double)model);
	printf("  fleet_ready_s                  %10.3f s  %.2fx the independent loads\n", fready,
	       iready > 0 ? fready / iready : 0.0);
	printf("  independent_ready_s            %10.3f s  (baseline)\n", iready);
	printf("  peer_gbps                      %10.2f Gbit/s  %.2fx ucx_perftest\n", peer,
	       peak > 0 ? peer / peak : 0.0);
	printf("  ucx_peak_gbps (ucp_get, 4 MiB) %10.2f Gbit/s  (baseline%s)\n", peak,
	       peak > 0 ? "" : ": ucx_perftest did not run");
}

int bench_fleet(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "model", required_argument, NULL, 'm' }, { "hosts", required_argument, NULL, 'n' },
		{ "json", no_argument, NULL, 'j' }, { 0 },
	};
	struct fl *f = calloc(1, sizeof(*f));
	const char *path = NULL;
	uint64_t fdisk = 0, fpeers = 0, idisk = 0, ipeers = 0, model = 0;
	int json = 0, c, fd;

	optind = 1;
	f->n = 3;
	while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		if (c == 'm') path = optarg;
		else if (c == 'n') f->n = (int)cliarg_long("wsrv-bench fleet", "--hosts", optarg, 2, NETLAB_MAX);
		else if (c == 'j') json = 1;
		else return 2;
	}
	if (!path || optind != argc) {
		fprintf(stderr, "usage: wsrv-bench fleet --model DIR [--hosts N] [--json]\n");
		return 2;
	}
	setenv("UCX_TLS", "tcp", 0);
	setenv("UCX_WARN_UNUSED_ENV_VARS", "n", 0);
	snprintf(f->dir, sizeof(f->dir), "/tmp/wsrv-fleet-XXXXXX");
	if (!mkdtemp(f->dir))
		return 1;
	snprintf(f->token, sizeof(f->token), "%s/token", f->dir);
	snprintf(f->spec, sizeof(f->spec), "m=%s", path);
	fd = open(f->token, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
	if (fd < 0 || write(fd, "wsrv-bench-fleet-token-0001\n", 28) != 28)
		return 1;
	close(fd);
	netlab_up(&f->nl, f->n, "wsrvb");
	double iready = start_together(f, false, &idisk, &ipeers);
	double fready = start_together(f, true, &fdisk, &fpeers);
	double peer = peer_rate(f, 3), peak = ucx_peak(f, 4u << 20);
	bool ns = f->nl.ns;
	netlab_down(&f->nl);
	f->nl.ns = ns; /* for the report */
	model = idisk / (uint64_t)f->n;
	char cmd[200];
	snprintf(cmd, sizeof(cmd), "rm -rf %s", f->dir);
	if (system(cmd) != 0)
		fprintf(stderr, "wsrv-bench fleet: could not remove %s\n", f->dir);
	if (iready < 0 || fready < 0) {
		fprintf(stderr, "wsrv-bench fleet: a host did not serve\n");
		free(f);
		return 1;
	}
	fleet_report(f, path, json, model, fdisk, idisk, fready, iready, peer, peak);
	free(f);
	return 0;
}
