// SPDX-License-Identifier: MIT
/* bench_util.c - a private wsrvd for benchmarks, and measurements. */
#include "prog_path.h"
#include "bench_util.h"

#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "wsrv.h"
#include "wsrvd_run.h"

const char *bench_wsrvd_path(void)
{
	static char p[PATH_MAX + 32];

	return prog_path(p, sizeof(p), "../server/daemon/wsrvd", "WSRVD", "wsrvd");
}

int bench_server_reserve(struct bench_server *bs)
{
	snprintf(bs->dir, sizeof(bs->dir), "/tmp/wsrv-bench-XXXXXX");
	if (!mkdtemp(bs->dir))
		return -errno;
	snprintf(bs->sock, sizeof(bs->sock), "%s/wsrv.sock", bs->dir);
	return 0;
}

/* Whether some model's 2 MiB folios are still being made (wsrvd makes
 * them on an idle thread once a model is ready, issue 38). */
static int folios_to_come(const char *sock)
{
	struct wsrv_model_list *l;
	struct wsrv_model_info mi;
	struct wsrv_client *c;
	int r = wsrv_connect(sock, NULL, &c), coming = 0;

	if (r < 0)
		return r;
	if ((r = wsrv_list_models(c, &l)) == 0) {
		for (size_t i = 0; wsrv_model_list_at(l, i, &mi) == 0; i++)
			coming |= mi.pages && strstr(mi.pages, "to be made now") != NULL;
		wsrv_model_list_free(l);
	}
	wsrv_disconnect(c);
	return r < 0 ? r : coming;
}

int bench_server_settle(const struct bench_server *bs)
{
	for (int tries = 0; tries < 1200; tries++) {
		int r = folios_to_come(bs->sock);
		if (r <= 0)
			return r;
		usleep(100 * 1000);
	}
	return -ETIMEDOUT;
}

double bench_server_cpu(const struct bench_server *bs)
{
	char path[64], buf[1024], *p;
	unsigned long long ut = 0, st = 0;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%d/stat", (int)bs->pid);
	if (!(f = fopen(path, "re")))
		return -1;
	p = fgets(buf, sizeof(buf), f) ? strrchr(buf, ')') : NULL;
	fclose(f);
	/* After the name: state, then fields 4..13, then utime and stime. */
	if (!p || sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu", &ut, &st) != 2)
		return -1;
	return (double)(ut + st) / (double)sysconf(_SC_CLK_TCK);
}

int bench_server_start(struct bench_server *bs, const char *const *specs, size_t n)
{
	int r = bench_server_reserve(bs);

	if (r == 0)
		r = bench_server_launch(bs, specs, n);
	return r < 0 || bs->at_ready ? r : bench_server_settle(bs);
}

static bool early_asked(const struct bench_server *bs)
{
	for (size_t i = 0; i < 4 && bs->extra[i]; i++)
		if (strcmp(bs->extra[i], "--serve-while-loading") == 0)
			return true;
	return false;
}

/* In wsrvd's child: its stderr into the log beside its socket (arg), so
 * that its lines never mix with the figures. */
static int to_log(void *arg)
{
	int fd = open(arg, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);

	if (fd < 0 || dup2(fd, 2) < 0)
		return -errno;
	close(fd);
	return 0;
}

/* What wsrvd warned of, said once it has stopped: how many warnings and
 * errors, and the first. The log then goes with the directory. */
static void say_log(const struct bench_server *bs, const char *log)
{
	char line[600], first[600] = "";
	unsigned n = 0;
	FILE *f = fopen(log, "re");

	while (f && fgets(line, sizeof(line), f))
		if (strstr(line, " warn: ") || strstr(line, " error: "))
			if (n++ == 0)
				snprintf(first, sizeof(first), "%s", line);
	if (f)
		fclose(f);
	if (n)
		fprintf(stderr, "wsrv-bench: the wsrvd it ran logged %u warning%s or error%s; the first: %s", n,
			n == 1 ? "" : "s", n == 1 ? "" : "s", first);
	unlink(log);
	(void)bs;
}

int bench_server_launch(struct bench_server *bs, const char *const *specs, size_t n)
{
	const char *argv[80];
	size_t k = 0;
	int r;

	argv[k++] = bench_wsrvd_path();
	argv[k++] = "--quiet";
	argv[k++] = "--socket";
	argv[k++] = bs->sock;
	if (geteuid() != 0)
		argv[k++] = "--no-lock";
	for (size_t i = 0; i < n && k < 70; i++) {
		argv[k++] = "--model";
		argv[k++] = specs[i];
	}
	for (size_t i = 0; i < 4 && bs->extra[i]; i++)
		argv[k++] = bs->extra[i];
	argv[k] = NULL;
	/* Models may take a while to load; wsrvd serves while loading by
	 * default: a bench that did not ask for that starts once every model
	 * is loaded. */
	snprintf(bs->log, sizeof(bs->log), "%s/wsrvd.log", bs->dir);
	if ((r = wsrvd_spawn(argv, to_log, bs->log, &bs->pid)) < 0)
		return r;
	return wsrvd_wait_ready(bs->pid, bs->sock, early_asked(bs), 120, NULL, NULL);
}

void bench_server_stop(struct bench_server *bs)
{
	char lock[240];

	if (bs->pid > 0) {
		kill(bs->pid, SIGTERM);
		waitpid(bs->pid, NULL, 0);
	}
	if (bs->log[0])
		say_log(bs, bs->log);
	bs->log[0] = 0;
	snprintf(lock, sizeof(lock), "%s.lock", bs->sock);
	unlink(lock);
	rmdir(bs->dir);
}

int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

double percentile(double *v, size_t n, double p)
{
	size_t i;

	if (!n)
		return 0;
	qsort(v, n, sizeof(*v), cmp_double);
	i = (size_t)(p / 100.0 * (double)(n - 1) + 0.5);
	return v[i < n ? i : n - 1];
}

void bench_drop_caches(void)
{
	FILE *f;

	sync();
	if (geteuid() == 0 && (f = fopen("/proc/sys/vm/drop_caches", "w"))) {
		fputs("3\n", f);
		fclose(f);
	}
}

unsigned touch_pages(const volatile uint8_t *p, uint64_t n)
{
	unsigned sum = 0;

	for (uint64_t o = 0; o < n; o += 4096)
		sum += p[o];
	return sum;
}

uint64_t bench_max_layer(struct wsrv_model *m)
{
	uint64_t max = 0;

	for (size_t i = 1; i < wsrv_model_layer_count(m); i++) {
		struct wsrv_layer l;
		wsrv_model_layer_at(m, i, &l);
		max = l.length > max ? l.length : max;
	}
	return max;
}

int tier_now(const char *sock, struct wsrv_tier_info *t)
{
	struct wsrv_model_list *l;
	struct wsrv_client *c;
	int r = wsrv_connect(sock, NULL, &c);

	if (r < 0)
		return r;
	if ((r = wsrv_list_models(c, &l)) == 0) {
		r = wsrv_model_list_tier(l, 0, t);
		wsrv_model_list_free(l);
	}
	wsrv_disconnect(c);
	return r;
}

/* Every tensor resident: a plan's "*" is one dot-free component. */
static const char resident_plan[] =
	"{\"residency\": {\"*\": \"resident\", \"*.*\": \"resident\", \"*.*.*\": \"resident\", "
	"\"*.*.*.*\": \"resident\", \"*.*.*.*.*\": \"resident\", \"*.*.*.*.*.*\": \"resident\", "
	"\"*.*.*.*.*.*.*\": \"resident\"}}";

int bench_resident_plan(struct wsrv_plan **out)
{
	return wsrv_plan_parse(resident_plan, strlen(resident_plan), out);
}

struct wsrv_device *bench_open_device(bool cuda)
{
	struct wsrv_device *d = NULL;

	if ((cuda ? wsrv_device_cuda(NULL, &d) : wsrv_device_host(NULL, &d)) < 0)
		return NULL;
	return d;
}

const char *bench_at_most(double v, double bar)
{
	return !isfinite(v) ? "n/a" : v <= bar ? "OK" : "SHORT";
}

const char *bench_at_least(double v, double bar)
{
	return !isfinite(v) ? "n/a" : v >= bar ? "OK" : "SHORT";
}
