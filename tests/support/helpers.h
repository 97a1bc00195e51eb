// SPDX-License-Identifier: MIT
/* helpers.h - what every test program shares: temp dirs, fd leak checks,
 * building safetensors files by hand, generating models. */
#ifndef WSRV_TEST_HELPERS_H
#define WSRV_TEST_HELPERS_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

struct wsrv_client;
struct wsrv_device;
struct wsrv_server_stats;
struct wsrv_tier_info;
struct netlab;

/* The server's totals through wsrv_stats (the snapshot freed): 0 or the
 * call's negative errno. */
int server_counters(struct wsrv_client *c, struct wsrv_server_stats *out);
/* The disk tier's counters of the server's first model (wsrv_list_models):
 * 0 or the call's negative errno. */
int tier_counters(struct wsrv_client *c, struct wsrv_tier_info *out);

#include "fd_check.h"
#include "runner.h"

/* A loopback TCP port nothing listens on now (bound to 0, then closed). */
int free_tcp_port(void);

/* A TCP connection to 127.0.0.1:port, or -1. */
int tcp_connect_loopback(int port);

/* A TCP connection to the IPv4 address addr (host order):port, or -1. */
int tcp_connect_to(uint32_t addr, int port);

/* Sends an HTTP request (len bytes) to 127.0.0.1:port and reads the answer
 * until the server closes or 5 s pass: the status code (0: none), and the
 * body in *body when body is not NULL (the caller frees it). */
int http_request(int port, const char *req, size_t len, char **body);

/* GET path with Connection: close (http_request). */
int http_get(int port, const char *path, char **body);

/* http_get to the IPv4 address addr (host order) instead of 127.0.0.1. */
int http_get_to(uint32_t addr, int port, const char *path, char **body);




/* A fresh directory /tmp/wsrv-test-<tag>-XXXXXX (caller frees, rm_rf). */
char *test_tmpdir(const char *tag);
void rm_rf(const char *path);

/* path = dir + "/" + name, into a static buffer rotated among 8. */
const char *pjoin(const char *dir, const char *name);

/* An in-memory safetensors file: 8-byte N, the header, then dlen data bytes
 * (data may be NULL: bytes 0..dlen-1 mod 256). Caller frees. */
uint8_t *st_build(const char *header, size_t dlen, const void *data, size_t *len);
/* The same, written to path. Returns 0 or a negative errno. */
int st_write(const char *path, const char *header, size_t dlen, const void *data);
/* A header from a printf format, for st_build. Static buffer. */
const char *hdr(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

struct wsrv_client;
struct wsrv_publish;
/* Writes byte v over every tensor of p, a publish of model on c (by
 * wsrv_publish_write): a publish whose commit is not refused for bytes
 * never written. 0 or a negative errno. */
int publish_fill(struct wsrv_client *c, struct wsrv_publish *p, const char *model, uint8_t v);

/* Writes a model with tools/mkmodel into dir. Returns 0 or negative errno. */
int make_model(const char *dir, const char *preset, uint64_t size, unsigned layers,
	       unsigned shards, uint64_t seed);
/* The same with a MoE shape (deepseek-v3-mini): experts and top-k, 0 the
 * preset's. */
int make_model_moe(const char *dir, const char *preset, uint64_t size, unsigned layers,
		   unsigned shards, uint64_t seed, unsigned experts, unsigned topk);

/* Reads a whole file (caller frees), NUL-terminated past its *len bytes. */
uint8_t *read_file(const char *path, size_t *len);

/* Where the reference fixtures are. */
const char *fixtures_dir(void);

/* A wsrvd started for a test, on a unique socket in its own directory. */
struct sock_fprog;

struct test_server {
	pid_t pid;
	char dir[256];
	char sock[200];
	char log[300];
	/* Set before server_start, or left 0: the server's RLIMIT_NOFILE (soft
	 * and hard), and a uid (and gid) to run as instead of ours. */
	unsigned nofile;
	uid_t uid;
	gid_t gid;
	/* Playing systemd: its notify socket and the fds it hands to the
	 * server (tools/harness/fdstore_peer.h), or NULL. */
	struct fdstore *store;
	/* Or left NULL: a network namespace (ip netns) to run it in, extra
	 * environment (NAME=VALUE, NULL-terminated), and whether
	 * server_start returns at once (then server_wait_ready). */
	const struct netlab *netlab;
	int host;                   /* in netlab: which host's namespace */
	const char *const *env;
	/* Or NULL: a seccomp filter the server runs under (as a unit's
	 * RestrictAddressFamilies= or SystemCallFilter= would make one). */
	const struct sock_fprog *seccomp;
	int no_wait;
	/* Run it as the first process of a pid namespace of its own (a
	 * container's, systemd's PrivatePIDs=): the clients' pids are 0 to it.
	 * A relay outside passes signals in and its exit status out. */
	bool pidns;
	/* Set by the helpers when the test's arguments say
	 * --serve-while-loading: server_wait_ready then does not wait for
	 * the load (wsrvd serves while loading by default, and the other
	 * tests start once their models are loaded). */
	bool early;
};

/* Starts $WSRVD --socket ... --no-lock --hugepages off --model NAME=PATH
 * plus extra args (NULL-terminated), stderr to a log file, and waits until
 * it answers (10 s at most). 0 or a negative errno. */
int server_start(struct test_server *ts, const char *name, const char *model, ...);
/* Copies ap's strings up to its NULL into out, NULL-terminated, at most
 * max entries in all. */
void args_collect(va_list ap, const char **out, size_t max);
/* The same with the extra arguments in a NULL-terminated array. */
int server_start_argv(struct test_server *ts, const char *name, const char *model,
		      const char *const *extra);
/* Waits until a server started with no_wait answers (timeout_s at most). */
int server_wait_ready(struct test_server *ts, int timeout_s);
/* Starts again on the same socket and directory (after a kill). */
int server_restart(struct test_server *ts, const char *name, const char *model);
/* The same with one more argument (NULL: none). */
int server_restart_with(struct test_server *ts, const char *name, const char *model, const char *arg);
/* The same with any arguments (NULL-terminated). */
int server_restart_args(struct test_server *ts, const char *name, const char *model, ...);
/* Whether the server's log holds needle. */
bool server_log_has(const struct test_server *ts, const char *needle);
/* Whether the file at path holds needle past its first `from` bytes. */
bool file_has(const char *path, size_t from, const char *needle);
/* Waits for child pid: its exit status, 128 + the signal that killed it,
 * or -1 when it is no child of this process. */
int child_status(pid_t pid);
/* Sends sig and reaps it; returns its exit status (128+sig if killed). */
int server_stop(struct test_server *ts, int sig);
/* Stops ts with SIGTERM, fails the case (naming the log) unless it exits
 * 0, and removes its directory. */
void server_done(struct test_server *ts);
/* A process's locked memory (VmLck in /proc/PID/status), in bytes; -1 if
 * it cannot be read. */
long long pid_locked_bytes(pid_t pid);
/* Sleeps ms milliseconds. */
void sleep_ms(int ms);
/* A worker process of a test: its pid, the pipe end it reports on (read
 * it) and the one it is told on (write it). */
struct test_child {
	pid_t pid;
	int out, go;
};
/* Forks a child that runs fn(arg, out, go) and exits with its status,
 * cmocka's signal handlers put back to the defaults (they would go on to
 * the next case in the child: a worker that faults dies of it, and its
 * parent says so); a failure to fork fails the case. */
struct test_child test_child_spawn(int (*fn)(void *arg, int out, int go), void *arg);

/* Sends pid SIGSTOP and returns once every thread of it is stopped ('T'
 * in /proc/PID/task/TID/stat): kill(2) returns before the stop, and a
 * process on another core may run on a moment (accept a connection, say).
 * 0, or -ETIMEDOUT after 10 s, or kill's -errno. */
int pid_stop(pid_t pid);
/* A seccomp filter that refuses socket(2) of any address family but the
 * n in allowed with EAFNOSUPPORT, as systemd's RestrictAddressFamilies=
 * does. Static storage: one filter at a time. */
const struct sock_fprog *families_filter(const int *allowed, size_t n);
/* Polls ts's log every 20 ms for needle, up to timeout_s: 0 once it is
 * there, -ETIMEDOUT if it never came. */
int server_log_wait(const struct test_server *ts, const char *needle, int timeout_s);
/* A case that needs wsrvd's test seams ($WSRV_TEST_*, test_seam.h) skips,
 * saying why, in a build without them (a packager's: issue 61 item 2). */
void need_test_seams(const char *what);
/* Open fds of a process, from /proc. */
int pid_fd_count(pid_t pid);
/* What a process's fd points at (readlink of /proc/PID/fd/FD) into buf;
 * 0 or a negative errno (-ENOENT: the fd is closed). */
int pid_fd_target(pid_t pid, int fd, char *buf, size_t len);
/* The same once it has settled: unchanged over 3 samples 20 ms apart (a
 * server still closing a connection, such as the start's own readiness
 * check, is not counted as a baseline); at most 2 s. */
int pid_fd_quiet(pid_t pid);
/* The first model's page size and NUMA word (into numa) from the server
 * on sock, once its pages have settled: loaded, and no folios still to
 * come (a note that counts the chunks made, when it makes them); at most
 * 30 s, then as they are. */
uint64_t model_pages_settled(const char *sock, char *numa, size_t len);

/* Raw protocol, for tests that play a client libwsrv would never be. */
struct ProtobufCMessage;
/* Connects to path (5 s receive timeout); -errno on failure. */
int raw_connect(const char *path);
/* Packs the Request q (a Wsrv__Request *) and sends it with nfds fds. */
int raw_send(int fd, const void *q, const int *fds, int nfds);
/* Sends Hello with name (NULL: none). */
int raw_hello(int fd, const char *name);
/* Receives one Response: its Error code, 0 for any other reply, -1 when the
 * connection ended. fds received are closed unless keep is non-NULL. */
int raw_recv_code(int fd, int *keep, int *nkeep);

/* Runs argv[0] with argv (NULL-terminated) and env assignments (NAME=VALUE,
 * NULL-terminated, may be NULL), stdout and stderr into the files out and
 * err; nofile > 0 sets RLIMIT_NOFILE. Gives up (SIGKILL) after timeout_s.
 * Returns the exit status, 128 + signal when killed. */
/* Copies file from to to (made, or truncated) with mode: 0 or -1. */
int copy_file(const char *from, const char *to, mode_t mode);
/* Copies path to path.keep, then changes one byte in every 64 KiB past
 * the first (a safetensors header's): 0 or -errno. */
int file_flip_kept(const char *path);
/* Puts path.keep back as path: 0 or -errno. */
int file_restore_kept(const char *path);
/* The port a server's --metrics-listen took, from its log; -1: none. */
int server_metrics_port(const struct test_server *ts);

int run_prog(const char *const *argv, const char *const *env, const char *out,
	     const char *err, unsigned nofile, int timeout_s);

/* Runs $WSRVD --load-only --model spec with args (NULL-terminated), its
 * output into log; returns its exit status (run_prog). */
int wsrvd_options_run(const char *spec, const char *const *args, const char *log);

/* A server with two generated models, "llama" (llama-mini, 6 MiB: 8 heads,
 * 2 KV heads) and "ds" (deepseek-v3-mini, 40 MiB, FP8), each of `layers`
 * layers (two_models_start, in a group's setup); a client connected to it
 * and a host device (two_models_open, in each case's process: the device's
 * copy thread does not cross a fork). */
struct two_models {
	char *dir_llama, *dir_ds;
	struct test_server ts;
	struct wsrv_client *cl;
	struct wsrv_device *dev;
};
int two_models_start(struct two_models *f, const char *tag, unsigned layers);
int two_models_open(struct two_models *f);
/* Undoes two_models_open; returns 0 (a case teardown's kept fds). */
int two_models_close(struct two_models *f);
void two_models_stop(struct two_models *f);

#endif
