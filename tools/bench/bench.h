// SPDX-License-Identifier: MIT
/* bench.h - wsrv-bench's benchmarks. Each measures its baseline in the same
 * run, prints both figures and their ratio, and returns the exit status. */
#ifndef WSRV_BENCH_H
#define WSRV_BENCH_H

int bench_load(int argc, char **argv);
int bench_header(int argc, char **argv);
int bench_share(int argc, char **argv);
int bench_attach(int argc, char **argv);
int bench_fetch(int argc, char **argv);
int bench_resolve(int argc, char **argv);
int bench_pipeline(int argc, char **argv);
int bench_serve(int argc, char **argv);
int bench_touch(int argc, char **argv);
int bench_first(int argc, char **argv);
int bench_share_device(int argc, char **argv);
int bench_layer_shard(int argc, char **argv);
int bench_restart(int argc, char **argv);
int bench_publish(int argc, char **argv);
int bench_fleet(int argc, char **argv);
int bench_experts(int argc, char **argv);
int bench_cold(int argc, char **argv);
int bench_join(int argc, char **argv);
int bench_copyd(int argc, char **argv);
int bench_tier(int argc, char **argv);

#endif
