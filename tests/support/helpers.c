// SPDX-License-Identifier: MIT
/* helpers.c - shared test helpers: temp dirs, files, models, processes,
 * counters. Starting a server is server.c's; raw protocol, raw.c's; HTTP,
 * http.c's. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include "helpers.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "mkmodel.h"
#include "wsrv.h"
#include "test_seam.h"
#include "packet.h"
#include "srv_stats.h"
#include "wsrv.pb-c.h"
#include <stdarg.h>

char *test_tmpdir(const char *tag)
{
	char *p;

	if (asprintf(&p, "/tmp/wsrv-test-%s-XXXXXX", tag) < 0)
		return NULL;
	if (!mkdtemp(p)) {
		free(p);
		return NULL;
	}
	return p;
}

static int rm_one(const char *p, const struct stat *sb, int flag, struct FTW *ftw)
{
	(void)sb;
	(void)flag;
	(void)ftw;
	return remove(p);
}

void rm_rf(const char *path)
{
	if (path)
		nftw(path, rm_one, 16, FTW_DEPTH | FTW_PHYS);
}

const char *pjoin(const char *dir, const char *name)
{
	static char buf[8][4096];
	static int k;

	k = (k + 1) % 8;
	snprintf(buf[k], sizeof(buf[k]), "%s/%s", dir, name);
	return buf[k];
}

uint8_t *st_build(const char *header, size_t dlen, const void *data, size_t *len)
{
	size_t hl = strlen(header);
	uint8_t *b = malloc(8 + hl + dlen + 1);

	if (!b)
		return NULL;
	for (int i = 0; i < 8; i++)
		b[i] = (uint8_t)((uint64_t)hl >> (8 * i));
	memcpy(b + 8, header, hl);
	for (size_t i = 0; i < dlen; i++)
		b[8 + hl + i] = data ? ((const uint8_t *)data)[i] : (uint8_t)i;
	*len = 8 + hl + dlen;
	return b;
}

int st_write(const char *path, const char *header, size_t dlen, const void *data)
{
	size_t len;
	uint8_t *b = st_build(header, dlen, data, &len);
	FILE *f;
	int r = 0;

	if (!b)
		return -ENOMEM;
	f = fopen(path, "we");
	if (!f || fwrite(b, 1, len, f) != len)
		r = -EIO;
	if (f && fclose(f) != 0)
		r = -EIO;
	free(b);
	return r;
}

const char *hdr(const char *fmt, ...)
{
	static char buf[1 << 16];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(buf, sizeof(buf), fmt, ap);
	va_end(ap);
	return buf;
}

int make_model(const char *dir, const char *preset, uint64_t size, unsigned layers,
	       unsigned shards, uint64_t seed)
{
	return make_model_moe(dir, preset, size, layers, shards, seed, 0, 0);
}

int make_model_moe(const char *dir, const char *preset, uint64_t size, unsigned layers,
		   unsigned shards, uint64_t seed, unsigned experts, unsigned topk)
{
	struct mk_moe moe = { experts, topk };
	struct mk_spec spec;
	struct errinfo e;
	int r = mk_preset_moe(preset, size, layers, &moe, &spec, &e);

	if (r == 0)
		r = mk_write(&spec, dir, shards, seed, &e);
	if (r < 0)
		fprintf(stderr, "make_model: %s\n", e.msg);
	mk_spec_free(&spec);
	return r;
}

uint8_t *read_file(const char *path, size_t *len)
{
	FILE *f = fopen(path, "re");
	uint8_t *b = NULL;
	long n;

	if (!f)
		return NULL;
	if (fseek(f, 0, SEEK_END) == 0 && (n = ftell(f)) >= 0 && fseek(f, 0, SEEK_SET) == 0) {
		b = malloc((size_t)n + 1);
		if (b && fread(b, 1, (size_t)n, f) != (size_t)n) {
			free(b);
			b = NULL;
		}
		if (b)
			b[n] = 0; /* text files can be searched as strings */
		*len = (size_t)n;
	}
	fclose(f);
	return b;
}

bool file_has(const char *path, size_t from, const char *needle)
{
	size_t len = 0;
	uint8_t *b = read_file(path, &len);
	bool has = b && len >= from && strstr((const char *)b + from, needle);

	free(b);
	return has;
}

int child_status(pid_t pid)
{
	int st;

	if (waitpid(pid, &st, 0) != pid)
		return -1;
	return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

const char *fixtures_dir(void)
{
	return WSRV_FIXTURES_DIR;
}


int copy_file(const char *from, const char *to, mode_t mode)
{
	int in = open(from, O_RDONLY | O_CLOEXEC), out = -1, r = -1;
	struct stat st;

	if (in >= 0 && fstat(in, &st) == 0 &&
	    (out = open(to, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode)) >= 0 && fchmod(out, mode) == 0) {
		size_t len = (size_t)st.st_size;
		ssize_t w = 1;
		while (len > 0 && (w = copy_file_range(in, NULL, out, NULL, len, 0)) > 0)
			len -= (size_t)w;
		r = len == 0 ? 0 : -1;
	}
	if (in >= 0)
		close(in);
	if (out >= 0)
		close(out);
	return r;
}

int pid_fd_count(pid_t pid)
{
	char path[64];
	DIR *d;
	struct dirent *de;
	int n = 0;

	snprintf(path, sizeof(path), "/proc/%d/fd", (int)pid);
	d = opendir(path);
	if (!d)
		return -1;
	while ((de = readdir(d)))
		n += de->d_name[0] != '.';
	closedir(d);
	return n;
}

int pid_fd_target(pid_t pid, int fd, char *buf, size_t len)
{
	char path[64];
	ssize_t n;

	snprintf(path, sizeof(path), "/proc/%d/fd/%d", (int)pid, fd);
	n = readlink(path, buf, len - 1);
	if (n < 0)
		return -errno;
	buf[n] = 0;
	return 0;
}

long long pid_locked_bytes(pid_t pid)
{
	char path[64], line[128];
	long long kb = -1;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
	if (!(f = fopen(path, "re")))
		return -1;
	while (fgets(line, sizeof(line), f))
		if (sscanf(line, "VmLck: %lld kB", &kb) == 1)
			break;
	fclose(f);
	return kb < 0 ? -1 : kb << 10;
}

void sleep_ms(int ms)
{
	struct timespec t = { ms / 1000, (long)(ms % 1000) * 1000000L };
	nanosleep(&t, NULL);
}

uint64_t model_pages_settled(const char *sock, char *numa, size_t len)
{
	struct wsrv_client *c;
	struct wsrv_model_list *l;
	struct wsrv_model_info mi = { .struct_size = sizeof(mi) };
	uint64_t page = 0;

	if (wsrv_connect(sock, NULL, &c) < 0)
		return 0;
	for (int i = 0; i < 600; i++) {
		bool settled;
		if (wsrv_list_models(c, &l) < 0)
			break;
		if (wsrv_model_list_at(l, 0, &mi) < 0) {
			wsrv_model_list_free(l);
			break;
		}
		settled = !mi.loading && mi.pages && !strstr(mi.pages, "to come") &&
			  (strstr(mi.pages, "chunks") || !strstr(mi.pages, "MADV_COLLAPSE"));
		page = mi.page_size;
		snprintf(numa, len, "%s", mi.numa ? mi.numa : "");
		wsrv_model_list_free(l);
		if (settled)
			break;
		sleep_ms(50);
	}
	wsrv_disconnect(c);
	return page;
}

struct test_child test_child_spawn(int (*fn)(void *arg, int out, int go), void *arg)
{
	static const int sigs[] = { SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGABRT, SIGSYS };
	int o[2], g[2];
	struct test_child ch;

	assert_int_equal(pipe2(o, O_CLOEXEC), 0);
	assert_int_equal(pipe2(g, O_CLOEXEC), 0);
	ch.pid = fork();
	assert_true(ch.pid >= 0);
	if (ch.pid == 0) {
		for (size_t i = 0; i < sizeof(sigs) / sizeof(sigs[0]); i++)
			signal(sigs[i], SIG_DFL);
		close(o[0]);
		close(g[1]);
		_exit(fn(arg, o[1], g[0]));
	}
	close(o[1]);
	close(g[0]);
	ch.out = o[0];
	ch.go = g[1];
	return ch;
}

/* Whether every thread of pid is stopped: 1, 0, or a negative errno. */
static int pid_all_stopped(pid_t pid)
{
	char path[64];
	DIR *d;
	struct dirent *e;
	int stopped = 1;

	snprintf(path, sizeof(path), "/proc/%d/task", (int)pid);
	d = opendir(path);
	if (!d)
		return -errno;
	while ((e = readdir(d)) && stopped == 1) {
		char stat[400], buf[512], *p;
		FILE *f;

		if (e->d_name[0] == '.')
			continue;
		snprintf(stat, sizeof(stat), "%s/%s/stat", path, e->d_name);
		f = fopen(stat, "re");
		if (!f)
			continue; /* a thread that just exited */
		p = fgets(buf, sizeof(buf), f) ? strrchr(buf, ')') : NULL;
		fclose(f);
		if (p && p[1] == ' ' && p[2] != 'T' && p[2] != 't')
			stopped = 0;
	}
	closedir(d);
	return stopped;
}

int pid_stop(pid_t pid)
{
	if (kill(pid, SIGSTOP) < 0)
		return -errno;
	for (int i = 0; i < 1000; i++) {
		int r = pid_all_stopped(pid);
		if (r != 0)
			return r < 0 ? r : 0;
		sleep_ms(10);
	}
	return -ETIMEDOUT;
}

int pid_fd_quiet(pid_t pid)
{
	int a = pid_fd_count(pid), same = 0;

	for (int i = 0; i < 100 && same < 2; i++) {
		sleep_ms(20);
		int b = pid_fd_count(pid);
		same = b == a ? same + 1 : 0;
		a = b;
	}
	return a;
}

int two_models_start(struct two_models *f, const char *tag, unsigned layers)
{
	char t1[64], t2[64], spec[600];

	snprintf(t1, sizeof(t1), "%s-llama", tag);
	snprintf(t2, sizeof(t2), "%s-ds", tag);
	memset(f, 0, sizeof(*f));
	f->dir_llama = test_tmpdir(t1);
	f->dir_ds = test_tmpdir(t2);
	if (!f->dir_llama || !f->dir_ds || make_model(f->dir_llama, "llama-mini", 6 << 20, layers, 2, 1) < 0 ||
	    make_model(f->dir_ds, "deepseek-v3-mini", 40 << 20, layers, 2, 2) < 0)
		return -1;
	snprintf(spec, sizeof(spec), "ds=%s", f->dir_ds);
	return server_start(&f->ts, "llama", f->dir_llama, "--model", spec, NULL) < 0 ? -1 : 0;
}

int two_models_open(struct two_models *f)
{
	return wsrv_connect(f->ts.sock, NULL, &f->cl) < 0 || wsrv_device_host(NULL, &f->dev) < 0 ? -1 : 0;
}

int two_models_close(struct two_models *f)
{
	wsrv_device_destroy(f->dev);
	f->dev = NULL;
	wsrv_disconnect(f->cl);
	f->cl = NULL;
	return 0;
}

void two_models_stop(struct two_models *f)
{
	two_models_close(f);
	server_stop(&f->ts, SIGTERM);
	rm_rf(f->ts.dir);
	rm_rf(f->dir_llama);
	rm_rf(f->dir_ds);
	free(f->dir_llama);
	free(f->dir_ds);
}

int run_prog(const char *const *argv, const char *const *env, const char *out,
	     const char *err, unsigned nofile, int timeout_s)
{
	pid_t pid = fork();
	int st;

	if (pid < 0)
		return -errno;
	if (pid == 0) {
		int o = open(out, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
		int e = open(err, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
		dup2(o, 1);
		dup2(e, 2);
		for (int i = 0; env && env[i]; i++)
			putenv((char *)env[i]);
		if (nofile) {
			struct rlimit rl = { nofile, nofile };
			setrlimit(RLIMIT_NOFILE, &rl);
		}
		execv(argv[0], (char *const *)argv);
		_exit(127);
	}
	for (int i = 0; i < timeout_s * 100; i++) {
		struct timespec t = { 0, 10000000 };
		if (waitpid(pid, &st, WNOHANG) == pid)
			return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
		nanosleep(&t, NULL);
	}
	kill(pid, SIGKILL);
	waitpid(pid, &st, 0);
	return 128 + SIGKILL;
}

int server_counters(struct wsrv_client *c, struct wsrv_server_stats *out)
{
	struct wsrv_stats *s;
	int r = wsrv_stats(c, &s);

	if (r < 0)
		return r;
	r = wsrv_stats_server(s, out);
	wsrv_stats_free(s);
	return r;
}

int file_flip_kept(const char *path)
{
	char keep[700];
	struct stat sb;
	int fd, r;

	snprintf(keep, sizeof(keep), "%s.keep", path);
	if ((r = copy_file(path, keep, 0644)) < 0)
		return r;
	if ((fd = open(path, O_RDWR | O_CLOEXEC)) < 0)
		return -errno;
	r = fstat(fd, &sb) < 0 ? -errno : 0;
	for (off_t off = 65536; r == 0 && off < sb.st_size; off += 65536) {
		uint8_t b;
		if (pread(fd, &b, 1, off) != 1)
			r = -EIO;
		b ^= 0x5a;
		if (r == 0 && pwrite(fd, &b, 1, off) != 1)
			r = -EIO;
	}
	close(fd);
	return r;
}

int file_restore_kept(const char *path)
{
	char keep[700];

	snprintf(keep, sizeof(keep), "%s.keep", path);
	return rename(keep, path) < 0 ? -errno : 0;
}

int tier_counters(struct wsrv_client *c, struct wsrv_tier_info *out)
{
	struct wsrv_model_list *l;
	int r = wsrv_list_models(c, &l);

	if (r < 0)
		return r;
	r = wsrv_model_list_tier(l, 0, out);
	wsrv_model_list_free(l);
	return r;
}

int publish_fill(struct wsrv_client *c, struct wsrv_publish *p, const char *model, uint8_t v)
{
	struct wsrv_model *m;
	struct wsrv_tensor t;
	uint8_t *b = NULL;
	int r;

	if ((r = wsrv_attach(c, model, &m)) < 0)
		return r;
	for (size_t i = 0; r == 0 && i < wsrv_model_tensor_count(m); i++) {
		if ((r = wsrv_model_tensor(m, i, &t)) < 0)
			break;
		uint8_t *nb = realloc(b, t.size + 1);
		if (!nb) {
			r = -ENOMEM;
			break;
		}
		b = nb;
		memset(b, v, t.size);
		r = wsrv_publish_write(p, t.name, 0, b, t.size);
	}
	free(b);
	wsrv_detach(m);
	return r;
}
