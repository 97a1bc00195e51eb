// SPDX-License-Identifier: MIT
/* wsrv-bench - benchmarks that measure a baseline in the same run. */
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "bench.h"
#include "log.h"
#include "ticker.h"

static const struct {
	const char *name;
	int (*run)(int, char **);
	const char *help;
} benches[] = {
	{ "load", bench_load,
	  "load --model DIR [--repeat N] [--contend] [--json] [load options]\n"
	  "      the loader vs a raw O_DIRECT io_uring read and a buffered read() loop;\n"
	  "      its CPU per GB; --contend keeps one core busy meanwhile" },
	{ "serve", bench_serve,
	  "serve --model DIR [--workers N] [--repeat N] [--hugepages MODE] [--serve-while-loading] [--json]\n"
	  "      wsrvd + N workers touching every page vs N processes mmapping the files" },
	{ "first-layer", bench_first,
	  "first-layer --model DIR [--repeat N] [--json]\n"
	  "      serving while loading: wsrvd's start to a worker holding layer 0, vs\n"
	  "      50 ms + layer 0's share of a raw O_DIRECT read; the whole model vs a plain start" },
	{ "touch", bench_touch,
	  "touch --model DIR [--workers N] [--hugepages on|off|auto] [--json]\n"
	  "      a worker's first pass over an attached model (time, faults, page tables) vs\n"
	  "      the same pass over a page-cache mmap of the files, one worker and N at once" },
	{ "header", bench_header,
	  "header [--tensors N] [--json]\n"
	  "      the safetensors reader on an N-tensor header vs a bare jansson parse" },
	{ "share", bench_share,
	  "share --model DIR [--clients N] [--json]\n"
	  "      RAM of a server and N workers vs N private copies" },
	{ "share-device", bench_share_device,
	  "share-device --model DIR [--clients N] [--device host|cuda] [--plan FILE] [--slots D] [--json]\n"
	  "      device bytes and stream-open times of N workers sharing one device copy of the\n"
	  "      resident tensors vs N private copies" },
	{ "layer-shard", bench_layer_shard,
	  "layer-shard --model DIR [--workers 2..8] [--device host|cuda] [--passes N] [--compute-us US] [--json]\n"
	  "      K workers on K devices over a layer-sharded series (o_proj, q_b_proj): each layer\n"
	  "      from its owner's device vs from host memory, same run: host-to-device bytes, the\n"
	  "      link's rate, the hidden fraction" },
	{ "restart", bench_restart,
	  "restart --model DIR [--repeat N] [--json]\n"
	  "      a wsrvd restart that adopts its models from systemd's fd store (played by the\n"
	  "      benchmark) vs a cold load of the same model" },
	{ "publish", bench_publish,
	  "publish --model DIR [--json]\n"
	  "      a producer publishing a new generation (fill, seal, checksum, publish) vs a\n"
	  "      memcpy of the same bytes; the time until a streaming worker runs on it" },
	{ "fleet", bench_fleet,
	  "fleet --model DIR [--hosts N] [--json]\n"
	  "      N hosts (network namespaces) starting together as a fleet vs N independent\n"
	  "      cold loads: bytes from storage, time until all serve; peer fill rate vs\n"
	  "      ucx_perftest's ucp_get over the same transport" },
	{ "attach", bench_attach,
	  "attach (--model DIR ... | --sizes 64M,1G,... [--workdir D] [--clean]) [--json]\n"
	  "      a new worker's attach time vs a safe_open of the same files; --sizes makes\n"
	  "      llama-mini models in D (default /tmp/wsrv-bench-models, kept for the next\n"
	  "      run; --clean removes those the run made)" },
	{ "fetch", bench_fetch,
	  "fetch --model DIR [--clients N] [--requests R] [--json]\n"
	  "      fetch-layer round trips vs a raw SOCK_SEQPACKET ping-pong" },
	{ "resolve", bench_resolve,
	  "resolve --model DIR [--json]\n"
	  "      system calls and time of local tensor/layer lookups vs a FetchLayer RPC" },
	{ "experts", bench_experts,
	  "experts --model DIR [--bandwidth GBPS] [--cache F] [--topk K] [--steps N] [--no-prefetch] [--json]\n"
	  "      MoE experts on demand from a device cache of fraction F of the experts vs\n"
	  "      streaming whole layers and vs everything resident: bytes and time per token,\n"
	  "      hit rate, logits; uniform and Zipf routing, batch 1 and 16" },
	{ "tier", bench_tier,
	  "tier --model DIR --budget SIZE [--workers N] [--json]\n"
	  "      a model larger than its memory budget (wsrvd --memory-budget): passes of 1\n"
	  "      and N workers, bytes read from disk, vs the O_DIRECT rate and N mmap processes\n"
	  "      in a memory cgroup of the same size" },
	{ "cold", bench_cold,
	  "cold --model DIR [--workers N] [--device host|cuda] [--plan default|resident]\n"
	  "     [--memory fresh|reported] [--repeat R] [--json]\n"
	  "      wsrvd and N workers from a dropped page cache to every weight on each one's device\n"
	  "      vs N processes reading the files to the device as safetensors' load_file does" },
	{ "join", bench_join,
	  "join --model DIR [--repeat R] [--json]\n"
	  "      a worker process joining a running wsrvd, from exec to every weight on its GPU,\n"
	  "      vs the model's bytes at the pinned copy rate measured in the same run" },
	{ "copyd", bench_copyd,
	  "copyd --model DIR [--repeat R] [--workers N] [--private] [--json]\n"
	  "      a worker joining through the copy service (wsrv-copyd), one and N at once, vs the\n"
	  "      same join page-locking by itself and the pinned copy rate, in the same run" },
	{ "pipeline", bench_pipeline,
	  "pipeline --model DIR [--device host|cuda] [--compute-us C] [--bandwidth GBPS] [--slots D]\n"
	  "         [--trace F] [--json]\n"
	  "      a layer stream vs all-resident and synchronous offload (host); on a GPU (cuda),\n"
	  "      the stream's copy rate vs pinned cuMemcpyHtoDAsync, and the copy time hidden" },
};

int main(int argc, char **argv)
{
	log_set_ident("wsrv-bench");
	log_set_level(LOG_WARN);
	if (argc >= 2)
		for (size_t i = 0; i < sizeof(benches) / sizeof(benches[0]); i++) {
			if (strcmp(argv[1], benches[i].name) != 0)
				continue;
			if (argc == 3 && (!strcmp(argv[2], "--help") || !strcmp(argv[2], "-h"))) {
				printf("usage: wsrv-bench %s\n", benches[i].help);
				return 0;
			}
			/* A benchmark silent past 2 s says it runs (its steps may
			 * say more: ticker.h). */
			ticker_start("wsrv-bench");
			ticker_step("%s: measuring", benches[i].name);
			int r = benches[i].run(argc - 1, argv + 1);
			ticker_stop();
			return r;
		}
	if (argc == 2 && strcmp(argv[1], "--version") == 0) {
		printf("wsrv-bench %s\n", WSRV_VERSION_STRING);
		return 0;
	}
	/* --help: the usage on stdout, exit 0; a mistake: all of it on stderr. */
	bool help = argc == 2 && (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0);
	FILE *f = help ? stdout : stderr;

	if (!help && argc >= 2)
		fprintf(stderr, "wsrv-bench: no benchmark '%s'\n", argv[1]);
	fprintf(f, "usage: wsrv-bench BENCHMARK [ARGS]   (wsrv-bench BENCHMARK --help: its options)\n");
	for (size_t i = 0; i < sizeof(benches) / sizeof(benches[0]); i++)
		fprintf(f, "  %s\n", benches[i].help);
	return help ? 0 : 2;
}
