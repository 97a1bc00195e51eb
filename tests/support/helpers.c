// SPDX-License-Identifier: MIT
/* helpers.c - shared test helpers. */
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

bool server_log_has(const struct test_server *ts, const char *needle)
{
	size_t len;
	uint8_t *b = read_file(ts->log, &len);
	bool has = b && strstr((const char *)b, needle);

	free(b);
	return has;
}

int server_log_wait(const struct test_server *ts, const char *needle, int timeout_s)
{
	for (int i = 0; i < timeout_s * 50; i++) {
		if (server_log_has(ts, needle))
			return 0;
		sleep_ms(20);
	}
	return server_log_has(ts, needle) ? 0 : -ETIMEDOUT;
}

void need_test_seams(const char *what)
{
	if (test_seams_built())
		return;
	fprintf(stderr, "[  SKIPPED ] this build has no test seams (-Dtest_seams): %s\n", what);
	skip();
}

const char *fixtures_dir(void)
{
	return WSRV_FIXTURES_DIR;
}

#include <signal.h>
#include <sys/prctl.h>
#include <sched.h>
#include <sys/wait.h>
#include <time.h>

#include "wsrvd_run.h"
#include "fdstore_peer.h"
#include "netlab.h"
#include "wsrv.h"

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

int server_metrics_port(const struct test_server *ts)
{
	size_t n;
	char *log = (char *)read_file(ts->log, &n), *p;
	int port = -1;

	if (log && (p = strstr(log, "metrics on port ")))
		port = atoi(p + strlen("metrics on port "));
	free(log);
	return port;
}

/* In the server's process, before exec: what the test asked of it. */
static pid_t relayed;

static void relay_signal(int sig)
{
	kill(relayed, sig);
}

/* In the server's process, made the first of a new pid namespace: the
 * process that forked it stays outside as its relay (ts->pid), passing
 * signals in and its exit status out. 0 in the server; the relay never
 * returns. */
static int enter_pidns(void)
{
	static const int sigs[] = { SIGTERM, SIGINT, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2 };
	int st;

	if (unshare(CLONE_NEWPID) < 0 || (relayed = fork()) < 0)
		return 123;
	if (relayed == 0) {
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		return 0;
	}
	for (size_t i = 0; i < sizeof(sigs) / sizeof(sigs[0]); i++)
		signal(sigs[i], relay_signal);
	while (waitpid(relayed, &st, 0) < 0)
		if (errno != EINTR)
			_exit(122);
	if (WIFSIGNALED(st)) {
		signal(WTERMSIG(st), SIG_DFL);
		raise(WTERMSIG(st));
	}
	_exit(WIFEXITED(st) ? WEXITSTATUS(st) : 122);
}

static int in_server(void *arg)
{
	struct test_server *ts = arg;
	int fd = open(ts->log, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);

	if (fd >= 0)
		dup2(fd, 2);
	if (ts->nofile) {
		struct rlimit rl = { ts->nofile, ts->nofile };
		if (setrlimit(RLIMIT_NOFILE, &rl) < 0)
			return 126;
	}
	if (ts->uid && (chmod(ts->dir, 0777) < 0 || setgid(ts->gid) < 0 || setuid(ts->uid) < 0))
		return 126;
	/* Changing credentials cleared it: a server left behind held the
	 * test runner's stdout, and meson waited for it until the timeout. */
	if (ts->uid)
		prctl(PR_SET_PDEATHSIG, SIGKILL);
	if (ts->store && fdstore_pass(ts->store) < 0)
		return 126;
	if (ts->netlab && netlab_enter(ts->netlab, ts->host) < 0)
		return 125;
	if (ts->pidns && enter_pidns() != 0)
		return 123;
	for (size_t k = 0; ts->env && ts->env[k]; k++)
		putenv((char *)ts->env[k]);
	if (ts->seccomp && (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0 ||
			    prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ts->seccomp) < 0))
		return 124;
	return 0;
}

const struct sock_fprog *families_filter(const int *allowed, size_t n)
{
	static struct sock_filter f[24];
	static struct sock_fprog prog;
	size_t k = 0;

	assert_true(n <= 16);
	f[k++] = (struct sock_filter)BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr));
	f[k++] = (struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_socket, 1, 0);
	f[k++] = (struct sock_filter)BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW);
	f[k++] = (struct sock_filter)BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, args[0]));
	for (size_t i = 0; i < n; i++) /* an allowed family: on to the ALLOW after the last */
		f[k++] = (struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, (uint32_t)allowed[i],
						      (uint8_t)(n - i), 0);
	f[k++] = (struct sock_filter)BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | EAFNOSUPPORT);
	f[k++] = (struct sock_filter)BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW);
	prog = (struct sock_fprog){ .len = (unsigned short)k, .filter = f };
	return &prog;
}

/* A server run as another uid may not reach the build tree (a clone
 * inside a folder only its owner enters: mktemp -d, a packager's build
 * root): it runs a copy of wsrvd in its own folder (ts->dir, which it is
 * given), removed with it. */
static const char *wsrvd_for(struct test_server *ts, char *buf, size_t len)
{
	const char *src = getenv("WSRVD");

	if (!ts->uid || !src)
		return src;
	snprintf(buf, len, "%s/wsrvd", ts->dir);
	return copy_file(src, buf, 0755) == 0 ? buf : src;
}

static int spawn_argv(struct test_server *ts, const char *name, const char *model,
		      const char *const *extra)
{
	const char *argv[40];
	char spec[4200], exe[400];
	int n = 0, r;

	snprintf(spec, sizeof(spec), "%s=%s", name, model);
	argv[n++] = wsrvd_for(ts, exe, sizeof(exe));
	argv[n++] = "--socket";
	argv[n++] = ts->sock;
	argv[n++] = "--no-lock";
	argv[n++] = "--hugepages";
	argv[n++] = "off";
	argv[n++] = "--model";
	argv[n++] = spec;
	ts->early = false;
	for (size_t k = 0; n < 38 && extra && extra[k]; k++) {
		ts->early = ts->early || strcmp(extra[k], "--serve-while-loading") == 0;
		argv[n++] = extra[k];
	}
	argv[n] = NULL;
	if ((r = wsrvd_spawn(argv, in_server, ts, &ts->pid)) < 0)
		return r;
	return ts->no_wait ? 0 : server_wait_ready(ts, 60);
}

void args_collect(va_list ap, const char **out, size_t max)
{
	size_t n = 0;

	while (n + 1 < max && (out[n] = va_arg(ap, const char *)))
		n++;
	out[n] = NULL;
}

static int spawn(struct test_server *ts, const char *name, const char *model, va_list ap)
{
	const char *extra[32];

	args_collect(ap, extra, 32);
	return spawn_argv(ts, name, model, extra);
}

/* A server with a store pushes to it as it loads: keep taking what it
 * sends, or its sd_notify would block on a full queue. */
static void drain_store(void *arg)
{
	struct test_server *ts = arg;

	if (ts->store)
		fdstore_drain_queued(ts->store);
}

int server_wait_ready(struct test_server *ts, int timeout_s)
{
	/* Ready when a client can say hello and, unless the test serves while
	 * loading, every model is loaded. */
	return wsrvd_wait_ready(ts->pid, ts->sock, ts->early, timeout_s, drain_store, ts);
}

int server_start(struct test_server *ts, const char *name, const char *model, ...)
{
	const char *extra[32];
	va_list ap;

	va_start(ap, model);
	args_collect(ap, extra, 32);
	va_end(ap);
	return server_start_argv(ts, name, model, extra);
}

int server_start_argv(struct test_server *ts, const char *name, const char *model,
		      const char *const *extra)
{
	char *d = test_tmpdir("srv");

	if (!d)
		return -ENOMEM;
	snprintf(ts->dir, sizeof(ts->dir), "%s", d);
	snprintf(ts->sock, sizeof(ts->sock), "%s/wsrv.sock", d);
	snprintf(ts->log, sizeof(ts->log), "%s/wsrvd.log", d);
	free(d);
	return spawn_argv(ts, name, model, extra);
}

int server_restart(struct test_server *ts, const char *name, const char *model)
{
	return server_restart_args(ts, name, model, NULL);
}

int server_restart_with(struct test_server *ts, const char *name, const char *model, const char *arg)
{
	return server_restart_args(ts, name, model, arg, NULL);
}

int server_restart_args(struct test_server *ts, const char *name, const char *model, ...)
{
	va_list ap;
	int r;

	va_start(ap, model);
	r = spawn(ts, name, model, ap);
	va_end(ap);
	return r;
}

int server_stop(struct test_server *ts, int sig)
{
	int st = 0;

	if (ts->pid <= 0)
		return -1;
	kill(ts->pid, sig);
	waitpid(ts->pid, &st, 0);
	ts->pid = 0;
	return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

void server_done(struct test_server *ts)
{
	int st = server_stop(ts, SIGTERM);

	if (st != 0)
		fail_msg("wsrvd exited with %d; its log is %s", st, ts->log);
	rm_rf(ts->dir);
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

int raw_connect(const char *path)
{
	struct sockaddr_un a = { .sun_family = AF_UNIX };
	struct timeval tv = { 5, 0 };
	int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);

	if (fd < 0)
		return -errno;
	snprintf(a.sun_path, sizeof(a.sun_path), "%s", path);
	if (connect(fd, (struct sockaddr *)&a, sizeof(a)) < 0) {
		int r = -errno;
		close(fd);
		return r;
	}
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	return fd;
}

int raw_send(int fd, const void *q, const int *fds, int nfds)
{
	static uint8_t buf[WSRV_MAX_PACKET];
	size_t n = wsrv__request__get_packed_size(q);

	if (n > sizeof(buf))
		return -EMSGSIZE;
	wsrv__request__pack(q, buf);
	return pkt_send(fd, buf, n, fds, nfds);
}

int raw_hello(int fd, const char *name)
{
	Wsrv__Request q = WSRV__REQUEST__INIT;
	Wsrv__Hello h = WSRV__HELLO__INIT;

	h.protocol = WSRV_PROTOCOL_VERSION;
	h.client_name = (char *)(name ? name : "");
	h.disk_tier = WSRV_DISK_TIER;
	q.body_case = WSRV__REQUEST__BODY_HELLO;
	q.hello = &h;
	return raw_send(fd, &q, NULL, 0);
}

int raw_recv_code(int fd, int *keep, int *nkeep)
{
	static uint8_t buf[WSRV_MAX_PACKET];
	int fds[WSRV_MAX_FDS], n = 0, code;
	long len = pkt_recv(fd, buf, sizeof(buf), fds, WSRV_MAX_FDS, &n);
	Wsrv__Response *r;

	if (len <= 0)
		return -1;
	r = wsrv__response__unpack(NULL, (size_t)len, buf);
	if (!r) {
		pkt_close_fds(fds, n);
		return -2;
	}
	code = r->body_case == WSRV__RESPONSE__BODY_ERROR ? r->error->code : 0;
	wsrv__response__free_unpacked(r, NULL);
	if (keep) {
		memcpy(keep, fds, sizeof(int) * (size_t)n);
		*nkeep = n;
	} else {
		pkt_close_fds(fds, n);
	}
	return code;
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

int wsrvd_options_run(const char *spec, const char *const *args, const char *log)
{
	const char *argv[40] = { getenv("WSRVD"), "--load-only", "--model", spec };
	int n = 4;

	for (int k = 0; args && args[k] && n < 39; k++)
		argv[n++] = args[k];
	argv[n] = NULL;
	return run_prog(argv, NULL, log, log, 0, 20);
}

int tcp_connect_loopback(int port)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port) };
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (fd >= 0 && connect(fd, (struct sockaddr *)&a, sizeof(a)) < 0) {
		close(fd);
		fd = -1;
	}
	return fd;
}

/* Reads fd until EOF or 5 s of silence, into a NUL-ended buffer. */
static char *read_answer(int fd)
{
	size_t cap = 1 << 16, got = 0;
	char *buf = malloc(cap + 1), *n;
	struct pollfd p = { .fd = fd, .events = POLLIN };
	ssize_t r;

	while (buf && poll(&p, 1, 5000) == 1 && (r = read(fd, buf + got, cap - got)) > 0) {
		got += (size_t)r;
		if (got == cap) {
			if (!(n = realloc(buf, (cap *= 2) + 1)))
				break;
			buf = n;
		}
	}
	if (buf)
		buf[got] = 0;
	return buf;
}

int http_request(int port, const char *req, size_t len, char **body)
{
	int fd = tcp_connect_loopback(port), status = 0;
	char *buf, *b;
	ssize_t n;

	if (fd < 0)
		return 0;
	for (size_t off = 0; off < len; off += (size_t)n)
		if ((n = send(fd, req + off, len - off, MSG_NOSIGNAL)) <= 0)
			break; /* refused mid-way: the answer may still be there */
	buf = read_answer(fd);
	close(fd);
	if (!buf)
		return 0;
	sscanf(buf, "HTTP/1.%*d %d", &status);
	b = strstr(buf, "\r\n\r\n");
	if (body)
		*body = strdup(b ? b + 4 : "");
	free(buf);
	return status;
}

int http_get(int port, const char *path, char **body)
{
	char req[256];
	int n = snprintf(req, sizeof(req), "GET %s HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", path);

	return http_request(port, req, (size_t)n, body);
}

int free_tcp_port(void)
{
	struct sockaddr_in a = { .sin_family = AF_INET };
	socklen_t len = sizeof(a);
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), port = -1;

	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (fd >= 0 && bind(fd, (struct sockaddr *)&a, sizeof(a)) == 0 &&
	    getsockname(fd, (struct sockaddr *)&a, &len) == 0)
		port = ntohs(a.sin_port);
	if (fd >= 0)
		close(fd);
	return port;
}
