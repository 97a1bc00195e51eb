// SPDX-License-Identifier: MIT
/* load_args.c - parsing the load options. */
#include "load_args.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "format_door.h"
#include "units.h"

enum {
	O_NUMA = LOAD_OPT_BASE, O_NUMA_NODE, O_HUGEPAGES, O_NO_LOCK, O_QD,
	O_BLOCK, O_SHARDS, O_BUFFERED, O_ALIGN, O_MAX_SEGMENT, O_LAYER_PATTERN, O_LOCK, O_READ,
	O_PLAN, O_RANKS, O_WORLD, O_READ_RATE, O_MEMORY_BUDGET, O_MEMORY_SHARE, O_FOLIOS,
};

const struct option load_long_options[] = {
	{ "numa", required_argument, NULL, O_NUMA },
	{ "numa-node", required_argument, NULL, O_NUMA_NODE },
	{ "hugepages", required_argument, NULL, O_HUGEPAGES },
	{ "folios", required_argument, NULL, O_FOLIOS },
	{ "lock", required_argument, NULL, O_LOCK },
	{ "no-lock", no_argument, NULL, O_NO_LOCK },
	{ "queue-depth", required_argument, NULL, O_QD },
	{ "block-size", required_argument, NULL, O_BLOCK },
	{ "concurrent-shards", required_argument, NULL, O_SHARDS },
	{ "read", required_argument, NULL, O_READ },
	{ "buffered", no_argument, NULL, O_BUFFERED },
	{ "align", required_argument, NULL, O_ALIGN },
	{ "max-segment", required_argument, NULL, O_MAX_SEGMENT },
	{ "layer-pattern", required_argument, NULL, O_LAYER_PATTERN },
	{ "plan", required_argument, NULL, O_PLAN },
	{ "ranks", required_argument, NULL, O_RANKS },
	{ "world", required_argument, NULL, O_WORLD },
	{ "read-rate", required_argument, NULL, O_READ_RATE },
	{ "memory-budget", required_argument, NULL, O_MEMORY_BUDGET },
	{ "memory-budget-share", required_argument, NULL, O_MEMORY_SHARE },
	{ 0 },
};
/* Callers copy exactly this many in front of their own options: a count
 * that lags the table drops options and the terminator. */
_Static_assert(sizeof(load_long_options) / sizeof(load_long_options[0]) == LOAD_OPTIONS_COUNT + 1,
	       "LOAD_OPTIONS_COUNT must count load_long_options");

const char load_options_help[] =
	"  --numa auto|interleave    arena placement (auto: hwloc decides)\n"
	"  --numa-node N             bind the arena to NUMA node N\n"
	"  --hugepages auto|on|off   2 MiB pages (auto: hugetlb when enough are free, else\n"
	"                            2 MiB folios by MADV_COLLAPSE where the kernel allows;\n"
	"                            on: hugetlb only; off: 4 KiB pages)\n"
	"  --folios auto|write|after 2 MiB folios (no hugetlb): written straight into, or\n"
	"                            made behind the load from 4 KiB pages (auto: as a\n"
	"                            probe at start finds fresh folios cheap or not)\n"
	"  --lock auto|on|off        mlock the arena (auto: when the machine has swap)\n"
	"  --no-lock                 the same as --lock off\n"
	"  --queue-depth N           reads in flight (default 64)\n"
	"  --block-size SIZE         bytes per read, multiple of 4K (default 1M)\n"
	"  --concurrent-shards N     shards read at once (default 4)\n"
	"  --read auto|direct|dontcache|buffered\n"
	"                            O_DIRECT, buffered reads that leave nothing\n"
	"                            cached (RWF_DONTCACHE), or plain buffered (auto,\n"
	"                            the default: dontcache for a file the page cache\n"
	"                            holds 90% of, else direct)\n"
	"  --buffered                the same as --read buffered\n"
	"  --read-rate SIZE          read at most SIZE bytes a second (default: no limit),\n"
	"                            to leave the disk to others\n"
	"  --align SIZE              tensor alignment in the arena (default 256)\n"
	"  --max-segment SIZE        split the arena into memfds of at most SIZE\n"
	"  --layer-pattern PAT       extra layer name pattern, e.g. 'enc.block.{N}.'\n"
	"  --ranks A-B --world W     load only what ranks A..B of W see (a partial load)\n"
	"  --plan FILE               under this plan's \"tp_plan\" and \"stages\"\n"
	"  --memory-budget SIZE      keep at most SIZE of each model in memory: the global\n"
	"                            group and whole layers in order stay, the rest is read\n"
	"                            from disk as workers need it (docs/operations.md)\n"
	"  --memory-budget-share PCT the most of a budget's cache one worker process may\n"
	"                            hold over all its connections, in percent (1-100,\n"
	"                            default 50; never less than its largest piece: a\n"
	"                            layer, or one routed expert)\n";

static int add_pattern(struct model_opts *mo, const char *arg, struct errinfo *e)
{
	const char **v;

	if (layer_pattern_check(arg) < 0)
		return err_set(e, -EINVAL, "--layer-pattern '%s': needs exactly one {N}", arg);
	v = realloc((void *)mo->layer_patterns, (mo->n_layer_patterns + 1) * sizeof(*v));
	if (!v)
		return err_set(e, -ENOMEM, "out of memory");
	v[mo->n_layer_patterns++] = arg;
	mo->layer_patterns = v;
	return 0;
}

static int args_number(const char *opt, const char *arg, unsigned long max,
		  unsigned long *out, struct errinfo *e)
{
	char *end;
	unsigned long v;

	errno = 0;
	v = strtoul(arg, &end, 10);
	if (errno || *end || end == arg || v > max)
		return err_set(e, -EINVAL, "--%s '%s': not a number up to %lu", opt, arg, max);
	*out = v;
	return 0;
}

static int size_opt(const char *opt, const char *arg, uint64_t *out, struct errinfo *e)
{
	if (parse_size(arg, out) < 0)
		return err_set(e, -EINVAL, "--%s '%s': not a size (e.g. 4096, 1M)", opt, arg);
	return 0;
}

static int enum_opt(const char *opt, const char *arg, const char *const *names,
		    int n, int *out, struct errinfo *e)
{
	for (int i = 0; i < n; i++)
		if (strcmp(arg, names[i]) == 0) {
			*out = i;
			return 0;
		}
	return err_set(e, -EINVAL, "--%s '%s': unknown value", opt, arg);
}

/* --plan FILE: parsed now, so a bad plan stops the start before any load. */
static int plan_opt(const char *arg, struct model_opts *mo, struct errinfo *e)
{
	json_error_t je;
	json_t *j = json_load_file(arg, JSON_REJECT_DUPLICATES, &je);

	if (!j)
		return err_set(e, -EINVAL, "--plan %s: %s (line %d)", arg, je.text, je.line);
	json_decref((json_t *)mo->plan);
	mo->plan = j;
	return 0;
}

/* --ranks A-B, or one rank A. */
static int ranks_opt(const char *arg, struct model_opts *mo, struct errinfo *e)
{
	unsigned long a, b;
	char *end;

	errno = 0;
	a = strtoul(arg, &end, 10);
	b = a;
	if (!errno && end != arg && *end == '-')
		b = strtoul(end + 1, &end, 10);
	if (errno || end == arg || *end || a > b || b >= 1u << 20)
		return err_set(e, -EINVAL, "--ranks '%s': not A-B (or one rank A), A <= B", arg);
	mo->rank_first = (uint32_t)a;
	mo->rank_last = (uint32_t)b;
	return 0;
}

void load_args_free(struct load_opts *o)
{
	free((void *)o->model.layer_patterns);
	json_decref((json_t *)o->model.plan);
	o->model.layer_patterns = NULL;
	o->model.plan = NULL;
}

int load_args_check(const struct load_opts *o, struct errinfo *e)
{
	const struct model_opts *mo = &o->model;

	if ((mo->world == 0) != !mo->ranks_given)
		return err_set(e, -EINVAL, "--ranks and --world go together");
	return model_hold_check(mo, e);
}

int load_args_handle(int opt, const char *arg, struct load_opts *o,
		     struct errinfo *e)
{
	static const char *const numa[] = { "auto", "node", "interleave" };
	static const char *const hp[] = { "auto", "on", "off" };
	static const char *const fo[] = { "auto", "write", "after" };
	static const char *const rd[] = { "auto", "direct", "dontcache", "buffered" };
	unsigned long v = 0;
	uint64_t sz = 0;
	int r = 0, iv = 0;

	switch (opt) {
	case O_NUMA:
		r = enum_opt("numa", arg, numa, 3, &iv, e);
		if (r == 0 && iv == NUMA_NODE)
			r = err_set(e, -EINVAL, "--numa node: use --numa-node N");
		o->arena.numa = (enum numa_mode)iv;
		break;
	case O_NUMA_NODE:
		r = args_number("numa-node", arg, 63, &v, e);
		o->arena.numa = NUMA_NODE;
		o->arena.numa_node = (int)v;
		break;
	case O_HUGEPAGES:
		r = enum_opt("hugepages", arg, hp, 3, &iv, e);
		o->arena.hugepages = (enum hugepages_mode)iv;
		break;
	case O_FOLIOS:
		r = enum_opt("folios", arg, fo, 3, &iv, e);
		o->arena.folio_mode = iv;
		break;
	case O_LOCK:
		r = enum_opt("lock", arg, hp, 3, &iv, e);
		o->arena.lock = (enum lock_mode)iv;
		break;
	case O_NO_LOCK: o->arena.lock = LOCK_OFF; break;
	case O_QD:
		r = args_number("queue-depth", arg, 1024, &v, e);
		if (r == 0 && v == 0) /* not "the default": a number of reads */
			r = err_set(e, -EINVAL, "--queue-depth '%s': a number from 1 to 1024", arg);
		o->loader.queue_depth = (unsigned)v;
		break;
	case O_BLOCK:
		r = size_opt("block-size", arg, &sz, e);
		if (r == 0 && (sz == 0 || sz % 4096 || sz > (64u << 20)))
			r = err_set(e, -EINVAL, "--block-size '%s': a multiple of 4K from 4K to 64M", arg);
		o->loader.block_size = (size_t)sz;
		break;
	case O_SHARDS:
		r = args_number("concurrent-shards", arg, 1024, &v, e);
		o->loader.max_shards = (unsigned)v;
		break;
	case O_READ:
		r = enum_opt("read", arg, rd, 4, &iv, e);
		o->loader.read = (enum read_mode)iv;
		break;
	case O_BUFFERED: o->loader.read = READ_BUFFERED; break;
	case O_ALIGN:
		r = size_opt("align", arg, &sz, e);
		if (r == 0 && (sz < MODEL_MIN_ALIGN || (sz & (sz - 1)) || sz > (1u << 30)))
			r = err_set(e, -EINVAL, "--align '%s': a power of two from 256 to 1G", arg);
		o->model.tensor_align = sz;
		break;
	case O_MAX_SEGMENT: r = size_opt("max-segment", arg, &o->model.max_segment, e); break;
	case O_READ_RATE: r = size_opt("read-rate", arg, &o->loader.read_rate, e); break;
	case O_MEMORY_BUDGET:
		r = size_opt("memory-budget", arg, &o->memory_budget, e);
		if (r == 0 && o->memory_budget == 0)
			r = err_set(e, -EINVAL, "--memory-budget: more than 0");
		break;
	case O_MEMORY_SHARE: {
		char *end;
		unsigned long pct = strtoul(arg, &end, 10);
		if (!*arg || *end || pct < 1 || pct > 100)
			r = err_set(e, -EINVAL, "--memory-budget-share '%s': a percentage from 1 to 100", arg);
		o->memory_share = (uint32_t)pct;
		break;
	}
	case O_LAYER_PATTERN: r = add_pattern(&o->model, arg, e); break;
	case O_PLAN: r = plan_opt(arg, &o->model, e); break;
	case O_RANKS:
		r = ranks_opt(arg, &o->model, e);
		o->model.ranks_given = true;
		break;
	case O_WORLD:
		r = args_number("world", arg, 1u << 20, &v, e);
		if (r == 0 && v == 0)
			r = err_set(e, -EINVAL, "--world: at least 1");
		o->model.world = (uint32_t)v;
		break;
	default: return 0;
	}
	return r < 0 ? r : 1;
}
