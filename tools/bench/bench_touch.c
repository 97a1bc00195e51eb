// SPDX-License-Identifier: MIT
/* bench_touch.c - `wsrv-bench touch`: a worker's first pass over a model.
 *
 * With the model in memory on both sides (wsrvd loaded it; the files were
 * read into the page cache), each worker maps it and reads one byte of
 * every 4 KiB page, twice: wsrv workers attach and walk every tensor, the
 * page-cache peers mmap every file and walk it (what safetensors'
 * safe_open does). One worker alone, then N at once. Per worker: the first
 * and second pass, the minor faults of the first, and the page tables it
 * grew (VmPTE) per byte mapped. Bars (issue 22): wsrv's first pass at 0.9x
 * or more of the peer's speed, and page tables at most 0.05% of the bytes.
 * --at-ready: the workers come as soon as the model is ready, not once
 * its 2 MiB folios are made, and the server's CPU time over its start
 * (the load and the folios, read from /proc once they are made) is
 * reported per GB.
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <jansson.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bench.h"
#include "bench_files.h"
#include "bench_util.h"
#include "cliarg.h"
#include "clock.h"
#include "wsrv.h"

#define MAX_WORKERS 64

/* What one worker measured. */
struct pass {
	double map_s, first_s, second_s;
	long faults;                /* minor faults of the first pass */
	long pte_bytes;             /* VmPTE grown by mapping and the first pass */
	uint64_t bytes;             /* mapped */
	int ok;
};

static long vm_pte_bytes(void)
{
	char line[256];
	long kb = -1;
	FILE *f = fopen("/proc/self/status", "re");

	while (f && fgets(line, sizeof(line), f))
		if (sscanf(line, "VmPTE: %ld kB", &kb) == 1)
			break;
	if (f)
		fclose(f);
	return kb * 1024;
}

static long minflt(void)
{
	struct rusage r;

	getrusage(RUSAGE_SELF, &r);
	return r.ru_minflt;
}

/* The regions a worker walks: a model's tensors, or the files' mappings
 * (arrays of room entries, owned; the worker exits without freeing). */
struct regions {
	const volatile uint8_t **p;
	uint64_t *n;
	size_t count, room;
};

static int regions_room(struct regions *r, size_t room)
{
	r->p = calloc(room ? room : 1, sizeof(*r->p));
	r->n = calloc(room ? room : 1, sizeof(*r->n));
	r->room = room;
	return r->p && r->n ? 0 : -ENOMEM;
}

static unsigned walk(const struct regions *r)
{
	unsigned sum = 0;

	for (size_t i = 0; i < r->count; i++)
		sum += touch_pages(r->p[i], r->n[i]);
	return sum;
}

static int map_wsrv(const char *sock, struct regions *r, struct wsrv_model **m, struct wsrv_client **c)
{
	if (wsrv_connect(sock, NULL, c) < 0 || wsrv_attach(*c, "m", m) < 0 ||
	    regions_room(r, wsrv_model_tensor_count(*m)) < 0)
		return -1;
	for (size_t i = 0; i < wsrv_model_tensor_count(*m); i++) {
		struct wsrv_tensor t = { .struct_size = sizeof(t) };
		if (wsrv_model_tensor(*m, i, &t) == 0 && t.size) {
			r->p[r->count] = t.data;
			r->n[r->count++] = t.size;
		}
	}
	return 0;
}

static int map_files(const struct files *f, struct regions *r)
{
	if (regions_room(r, f->n) < 0)
		return -1;
	for (size_t i = 0; i < f->n; i++) {
		int fd = open(f->path[i], O_RDONLY | O_CLOEXEC);
		struct stat st;
		void *p;
		if (fd < 0 || fstat(fd, &st) < 0)
			return -1;
		p = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_SHARED, fd, 0);
		close(fd);
		if (p == MAP_FAILED)
			return -1;
		r->p[r->count] = p;
		r->n[r->count++] = (uint64_t)st.st_size;
	}
	return 0;
}

/* A worker: waits for go, maps (sock: attaches; else the files), walks
 * twice, reports on out. */
static int touch_worker(const char *sock, const struct files *f, int go, int out)
{
	struct regions *r = calloc(1, sizeof(*r));
	struct wsrv_client *c = NULL;
	struct wsrv_model *m = NULL;
	struct pass p = { 0 };
	long pte0, f0;
	char b;
	double t;

	if (!r || read(go, &b, 1) < 0)
		return 1;
	pte0 = vm_pte_bytes();
	t = mono_now();
	p.ok = (sock ? map_wsrv(sock, r, &m, &c) : map_files(f, r)) == 0;
	p.map_s = mono_now() - t;
	f0 = minflt();
	t = mono_now();
	walk(r);
	p.first_s = mono_now() - t;
	p.faults = minflt() - f0;
	p.pte_bytes = vm_pte_bytes() - pte0;
	t = mono_now();
	walk(r);
	p.second_s = mono_now() - t;
	for (size_t i = 0; i < r->count; i++)
		p.bytes += r->n[i];
	return write(out, &p, sizeof(p)) == sizeof(p) ? 0 : 1;
}

/* n workers at once; their passes into p[0..n). 0 or -EIO. */
static int crew(const char *sock, const struct files *f, int n, struct pass *p)
{
	int go[2], out[2], got = 0;
	pid_t pid[MAX_WORKERS];

	if (pipe2(go, O_CLOEXEC) < 0 || pipe2(out, O_CLOEXEC) < 0)
		return -errno;
	for (int i = 0; i < n; i++) {
		pid[i] = fork();
		if (pid[i] == 0) {
			prctl(PR_SET_PDEATHSIG, SIGKILL);
			close(go[1]);
			close(out[0]);
			_exit(touch_worker(sock, f, go[0], out[1]));
		}
	}
	close(go[0]);
	close(out[1]);
	close(go[1]); /* EOF on go: all of them start */
	while (got < n && read(out[0], &p[got], sizeof(*p)) == sizeof(*p))
		got++;
	close(out[0]);
	for (int i = 0; i < n; i++)
		if (pid[i] > 0)
			waitpid(pid[i], NULL, 0);
	for (int i = 0; i < got; i++)
		if (!p[i].ok)
			return -EIO;
	return got == n ? 0 : -EIO;
}

/* The median worker's figures (by first pass), and the slowest's first. */
struct summary {
	struct pass med;
	double slowest_s;
};

static int cmp_first(const void *a, const void *b)
{
	const struct pass *x = a, *y = b;

	return x->first_s < y->first_s ? -1 : x->first_s > y->first_s;
}

static struct summary summarize(struct pass *p, int n)
{
	qsort(p, (size_t)n, sizeof(*p), cmp_first);
	return (struct summary){ p[n / 2], p[n - 1].first_s };
}

static json_t *pass_json(const struct summary *s)
{
	return json_pack("{s:f, s:f, s:f, s:f, s:I, s:I, s:I, s:f}",
		"map_s", s->med.map_s, "first_s", s->med.first_s, "second_s", s->med.second_s,
		"slowest_first_s", s->slowest_s, "faults", (json_int_t)s->med.faults,
		"pte_bytes", (json_int_t)s->med.pte_bytes, "bytes", (json_int_t)s->med.bytes,
		"pte_fraction", (double)s->med.pte_bytes / (double)(s->med.bytes ? s->med.bytes : 1));
}

static void print_row(const char *what, const struct summary *s)
{
	printf("  %-30s first %7.4f s (slowest %7.4f)  second %7.4f s  %7ld faults  "
	       "page tables %6.2f MiB (%.3f%% of %.2f GB)\n", what, s->med.first_s, s->slowest_s,
	       s->med.second_s, s->med.faults, (double)s->med.pte_bytes / 1048576.0,
	       100.0 * (double)s->med.pte_bytes / (double)(s->med.bytes ? s->med.bytes : 1),
	       (double)s->med.bytes / 1e9);
}

/* Runs the four crews: wsrv and the peer, one alone and n at once. */
static int touch_measure(const char *sock, const struct files *f, int n, struct summary s[4])
{
	struct pass p[MAX_WORKERS];

	for (int k = 0; k < 4; k++) {
		int count = k % 2 ? n : 1;
		if (crew(k < 2 ? sock : NULL, f, count, p) < 0) {
			fprintf(stderr, "wsrv-bench touch: a worker failed\n");
			return -EIO;
		}
		s[k] = summarize(p, count);
	}
	return 0;
}

static void touch_report(const struct files *f, int n, const struct summary s[4], double cpu, int json)
{
	double speed1 = s[2].med.first_s / s[0].med.first_s, speedn = s[3].med.first_s / s[1].med.first_s;
	double pte = (double)s[0].med.pte_bytes / (double)(s[0].med.bytes ? s[0].med.bytes : 1);

	if (json) {
		json_t *o = json_pack("{s:I, s:i, s:o, s:o, s:o, s:o, s:f, s:f, s:f, s:b, s:b}",
			"model_bytes", (json_int_t)f->bytes, "workers", n,
			"wsrv_one", pass_json(&s[0]), "wsrv_n", pass_json(&s[1]),
			"mmap_one", pass_json(&s[2]), "mmap_n", pass_json(&s[3]),
			"first_pass_speed_vs_mmap", speed1, "first_pass_speed_vs_mmap_n", speedn,
			"wsrv_pte_fraction", pte, "speed_within_bar", speed1 >= 0.9 && speedn >= 0.9,
			"pte_within_bar", pte <= 0.0005);
		if (cpu >= 0) /* --at-ready */
			json_object_set_new(o, "server_cpu_s_per_gb", json_real(cpu / ((double)f->bytes / 1e9)));
		json_dumpf(o, stdout, JSON_INDENT(2));
		putchar('\n');
		json_decref(o);
		return;
	}
	printf("a worker's first pass, one byte of every 4 KiB page; %zu files, %.3f GB, in memory on both sides\n",
	       f->n, (double)f->bytes / 1e9);
	print_row("wsrv, 1 worker", &s[0]);
	print_row("page-cache mmap, 1 worker", &s[2]);
	char what[64];
	snprintf(what, sizeof(what), "wsrv, %d workers at once", n);
	print_row(what, &s[1]);
	snprintf(what, sizeof(what), "page-cache mmap, %d at once", n);
	print_row(what, &s[3]);
	printf("  wsrv's first pass runs at %.2fx the page cache's speed alone, %.2fx with %d (bar 0.9: %s);\n"
	       "  its page tables are %.3f%% of the bytes mapped (bar 0.05%%: %s)\n", speed1, speedn, n,
	       bench_at_least(speed1 < speedn ? speed1 : speedn, 0.9), 100 * pte, bench_at_most(100 * pte, 0.05));
	if (cpu >= 0)
		printf("  the server's CPU over its start, load and folios: %.2f CPU-s/GB\n", cpu / ((double)f->bytes / 1e9));
}

int bench_touch(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "model", required_argument, NULL, 'm' },
		{ "workers", required_argument, NULL, 'w' },
		{ "json", no_argument, NULL, 'j' },
		{ "hugepages", required_argument, NULL, 'H' },
		{ "at-ready", no_argument, NULL, 'r' },
		{ "folios", required_argument, NULL, 'F' },
		{ 0 },
	};
	struct bench_server bs = { 0 };
	struct summary s[4];
	struct files f = { 0 };
	char spec[4200];
	const char *specs[1] = { spec }, *path = NULL, *hugepages = NULL, *folios = NULL;
	int n = 4, json = 0, c, r, k = 0;

	optind = 1;
	while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		if (c == 'm') path = optarg;
		else if (c == 'w') n = (int)cliarg_long("wsrv-bench touch", "--workers", optarg, 1, MAX_WORKERS);
		else if (c == 'j') json = 1;
		else if (c == 'r') bs.at_ready = true;
		else if (c == 'F') folios = optarg;
		else if (c == 'H') hugepages = optarg;
		else
			return 2;
	}
	if (!path || optind != argc) {
		fprintf(stderr, "usage: wsrv-bench touch --model DIR [--workers 1..%d] [--hugepages on|off|auto] [--at-ready] [--folios auto|write|after] [--json]\n",
			MAX_WORKERS);
		return 2;
	}
	if (hugepages)
		bs.extra[k++] = "--hugepages", bs.extra[k++] = hugepages;
	if (folios)
		bs.extra[k++] = "--folios", bs.extra[k++] = folios;
	if (model_files(path, NULL, &f) < 0)
		return 1;
	snprintf(spec, sizeof(spec), "m=%s", path);
	buffered_read(&f, LOADER_DEFAULT_BLOCK); /* the peer's pages, in the page cache */
	if (bench_server_start(&bs, specs, 1) < 0) {
		files_free(&f);
		return 1;
	}
	r = touch_measure(bs.sock, &f, n, s);
	/* At ready: the server's CPU over its whole start, once its folios
	 * are made (the load and whatever made them). */
	double cpu = r == 0 && bs.at_ready && bench_server_settle(&bs) == 0 ? bench_server_cpu(&bs) : -1;
	bench_server_stop(&bs);
	if (r == 0)
		touch_report(&f, n, s, cpu, json);
	files_free(&f);
	return r == 0 ? 0 : 1;
}
