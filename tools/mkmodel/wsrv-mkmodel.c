// SPDX-License-Identifier: MIT
/* wsrv-mkmodel - writes a deterministic synthetic HF-style model directory. */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mkmodel.h"
#include "cliarg.h"
#include "units.h"

#define P "wsrv-mkmodel"

static void mkmodel_usage(FILE *f)
{
	fprintf(f, "usage: wsrv-mkmodel --preset tiny|llama-mini|deepseek-v3-mini --size SIZE\n"
		   "       wsrv-mkmodel --preset deepseek-v3-shape\n"
		   "                    [--shards N] [--layers L] [--seed S]\n"
		   "                    [--rope-scaling TYPE:FACTOR|JSON] [--hidden-act NAME]\n"
		   "                    [--experts N] [--topk K] --out DIR\n"
		   "  SIZE takes K, M, G, T suffixes, powers of 1024 (64M, 2G, 2GiB); the model\n"
		   "  is the largest of the preset's shapes that fits in SIZE, or its smallest\n"
		   "  where none fits\n"
		   "  (the line it prints gives the size written).\n"
		   "  --rope-scaling sets config.json's rope_scaling: linear:F, dynamic:F,\n"
		   "  llama3:F (as Llama 3.1: frequency factors 1 and 4), or any JSON object.\n"
		   "  --hidden-act sets its hidden_act (default silu).\n"
		   "  --experts and --topk (deepseek-v3-*): routed experts per MoE layer\n"
		   "  (default 16; 256 for -shape) and experts per token (default 4; 8).\n"
		   "  deepseek-v3-shape is DeepSeek-V3's checkpoint as laid out (61 layers,\n"
		   "  3 dense, 256 experts, a multi-token prediction layer: 91,991 tensors;\n"
		   "  --shards 163 as published) at a width that splits at world 8: 5.69 GiB.\n");
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "preset", required_argument, NULL, 'p' },
		{ "size", required_argument, NULL, 's' },
		{ "shards", required_argument, NULL, 'n' },
		{ "layers", required_argument, NULL, 'l' },
		{ "seed", required_argument, NULL, 'S' },
		{ "out", required_argument, NULL, 'o' },
		{ "rope-scaling", required_argument, NULL, 'r' },
		{ "hidden-act", required_argument, NULL, 'a' },
		{ "experts", required_argument, NULL, 'x' },
		{ "topk", required_argument, NULL, 'k' },
		{ "help", no_argument, NULL, 'h' },
		{ "version", no_argument, NULL, 'V' },
		{ 0 },
	};
	const char *preset = NULL, *out = NULL, *rope = NULL, *act = NULL;
	unsigned long shards = 1, layers = 0;
	unsigned long long seed = 0;
	uint64_t size = 0;
	struct mk_moe moe = { 0 };
	struct mk_spec spec;
	struct errinfo e;
	char *end;
	char b[32];
	int c;

	while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		switch (c) {
		case 'p': preset = optarg; break;
		case 's': size = cliarg_size(P, "--size", optarg, 1, 1ULL << 50); break;
		case 'n': shards = (unsigned long)cliarg_long(P, "--shards", optarg, 1, 4096); break;
		case 'l': layers = (unsigned long)cliarg_long(P, "--layers", optarg, 0, 1 << 20); break;
		case 'S':
			errno = 0;
			seed = strtoull(optarg, &end, 0);
			if (errno || end == optarg || *end || *optarg == '-') {
				fprintf(stderr, P ": --seed '%s': expected a whole number from 0 to 2^64-1\n", optarg);
				return 2;
			}
			break;
		case 'o': out = optarg; break;
		case 'r': rope = optarg; break;
		case 'a': act = optarg; break;
		case 'x': moe.experts = (unsigned)cliarg_long(P, "--experts", optarg, 1, 1024); break;
		case 'k': moe.topk = (unsigned)cliarg_long(P, "--topk", optarg, 1, 64); break;
		case 'h': mkmodel_usage(stdout); return 0;
		case 'V': printf("wsrv-mkmodel %s\n", WSRV_VERSION_STRING); return 0;
		default: mkmodel_usage(stderr); return 2;
		}
	}
	if (optind < argc) {
		fprintf(stderr, P ": unexpected argument '%s'\n", argv[optind]);
		return 2;
	}
	if (out && !*out) {
		fprintf(stderr, P ": --out '': a folder to write the model into\n");
		return 2;
	}
	if (preset && strcmp(preset, "deepseek-v3-shape") == 0 && !size)
		size = 1; /* one width: no size to choose it by */
	if (!preset || !out || !size) {
		fprintf(stderr, P ": %s is required\n", !preset ? "--preset" : !out ? "--out" : "--size");
		mkmodel_usage(stderr);
		return 2;
	}
	/* The preset, the size for it, the config's values: usage errors (2);
	 * writing the files: a failure (1). */
	if (mk_preset_moe(preset, size, (unsigned)layers, &moe, &spec, &e) < 0) {
		fprintf(stderr, "wsrv-mkmodel: %s\n", e.msg);
		return 2;
	}
	if ((rope && mk_config_rope(&spec, rope, &e) < 0) || (act && mk_config_act(&spec, act, &e) < 0)) {
		fprintf(stderr, "wsrv-mkmodel: %s\n", e.msg);
		mk_spec_free(&spec);
		return 2;
	}
	if (mk_write(&spec, out, (unsigned)shards, seed, &e) < 0) {
		fprintf(stderr, "wsrv-mkmodel: %s\n", e.msg);
		mk_spec_free(&spec);
		return 1;
	}
	printf("wrote %s: preset %s, %zu tensors, %s, %lu shard%s\n", out, preset, spec.n,
	       fmt_bytes(spec.bytes, b, sizeof(b)), shards, shards == 1 ? "" : "s");
	mk_spec_free(&spec);
	return 0;
}
