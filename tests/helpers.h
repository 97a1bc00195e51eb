// SPDX-License-Identifier: MIT
/* helpers.h - what every test program shares: temp dirs, fd leak checks,
 * building safetensors files by hand, generating models. */
#ifndef WSRV_TEST_HELPERS_H
#define WSRV_TEST_HELPERS_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

struct wsrv_client;
struct wsrv_device;

/* Open fds of this process (from /proc/self/fd). */
int count_fds(void);

/* 0 when this process has as many fds open as `before`; else -1 and a line
 * on stderr (for a cmocka group teardown). */
int fd_leak_check(int before);


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

/* Writes a model with tools/mkmodel into dir. Returns 0 or negative errno. */
int make_model(const char *dir, const char *preset, uint64_t size, unsigned layers,
	       unsigned shards, uint64_t seed);

/* Reads a whole file (caller frees). */
uint8_t *read_file(const char *path, size_t *len);

/* Where the reference fixtures are. */
const char *fixtures_dir(void);

#endif

/* A wsrvd started for a test, on a unique socket in its own directory. */
struct test_server {
	pid_t pid;
	char dir[256];
	char sock[200];
	char log[300];
};

/* Starts $WSRVD --socket ... --no-lock --hugepages off --model NAME=PATH
 * plus extra args (NULL-terminated), stderr to a log file, and waits until
 * it answers (10 s at most). 0 or a negative errno. */
int server_start(struct test_server *ts, const char *name, const char *model, ...);
/* Starts again on the same socket and directory (after a kill). */
int server_restart(struct test_server *ts, const char *name, const char *model);
/* Sends sig and reaps it; returns its exit status (128+sig if killed). */
int server_stop(struct test_server *ts, int sig);
/* Open fds of a process, from /proc. */
int pid_fd_count(pid_t pid);

/* A server with two generated models, "llama" (llama-mini, 6 MiB: 8 heads,
 * 2 KV heads) and "ds" (deepseek-v3-mini, 40 MiB, FP8), each of `layers`
 * layers, a client connected to it and a host device. */
struct two_models {
	char *dir_llama, *dir_ds;
	struct test_server ts;
	struct wsrv_client *cl;
	struct wsrv_device *dev;
};
int two_models_start(struct two_models *f, const char *tag, unsigned layers);
void two_models_stop(struct two_models *f);
