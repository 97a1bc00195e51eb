// SPDX-License-Identifier: MIT
/* bench_join.h - a worker process joining a running wsrvd, to every
 * weight on its GPU (bench_join.c), shared by `join` and `copyd`
 * (bench_copyd.c), and the check of what landed (bench_samples.c). */
#ifndef WSRV_BENCH_JOIN_H
#define WSRV_BENCH_JOIN_H

#include <stdint.h>
#include <sys/types.h>

#include "wsrv.h"

/* What the worker reports (ok 0 when it failed). */
struct join_report {
	int ok;
	double ready_at;            /* CLOCK_MONOTONIC */
	double attach_s, context_s, open_s, register_s, wait_s;
	uint64_t copied_bytes;
	uint64_t register_bytes;    /* this process page-locked */
	uint64_t service_bytes;     /* the copy service copied */
	uint64_t service_fallbacks;
	uint64_t samples, sampled_bad; /* bytes checked after ready (bench_samples.c) */
};

/* A worker started and not yet reported. */
struct join_proc {
	pid_t pid;
	int fd;                     /* its report's pipe */
	double t0;                  /* just before the exec */
};

/* Starts a worker (this program, exec'd) on the socket: 0 or <0. */
int join_start(const char *sock, struct join_proc *j);
/* Its report: seconds from exec to ready, or -1 when it failed. */
double join_finish(struct join_proc *j, struct join_report *r);
double join_once(const char *sock, struct join_report *r);
/* Bytes from page-locked memory to the device at the driver's rate:
 * GB/s, or -1. */
double pinned_gbps(uint64_t bytes);

/* The stream's resident tensors on the device checked against the shared
 * mapping at samples: 64 bytes at each address that is a multiple of 16
 * MiB (what the test driver's sampled mode keeps). Samples that differ;
 * the count checked into the report's samples. */
uint64_t join_check_samples(struct wsrv_model *m, struct wsrv_stream *s, uint64_t *checked);

#endif
