// SPDX-License-Identifier: MIT
/* load_args.h - the command-line options that say how models are loaded,
 * shared by wsrvd and wsrv-bench so both load the same way. */
#ifndef WSRV_LOAD_ARGS_H
#define WSRV_LOAD_ARGS_H

#include <getopt.h>

#include "errinfo.h"
#include "model_load.h"

/* getopt_long entries; their vals start at LOAD_OPT_BASE. Terminated by a
 * zero entry, so callers copy them in front of their own. */
#define LOAD_OPT_BASE 0x1000
extern const struct option load_long_options[];
#define LOAD_OPTIONS_COUNT 20 /* entries before the terminator: load_args.c checks */

/* The help text for these options. */
extern const char load_options_help[];

/* Handles one option returned by getopt_long. Returns 1 if it was a load
 * option (applied to o), 0 if not, or a negative errno with e set. */
int load_args_handle(int opt, const char *arg, struct load_opts *o,
		     struct errinfo *e);

/* After every option: the ones that only work together (--ranks and
 * --world; --plan needs both). -EINVAL with a sentence. */
int load_args_check(const struct load_opts *o, struct errinfo *e);

/* Frees what the options allocated (layer patterns, the plan). */
void load_args_free(struct load_opts *o);

#endif
