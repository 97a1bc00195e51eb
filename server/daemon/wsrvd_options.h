// SPDX-License-Identifier: MIT
/* wsrvd_options.h - wsrvd's command line: one table of its own options
 * drives getopt, --help, and (through --help) the man page's check; the
 * load and peer options come from their rooms' tables. */
#ifndef WSRV_WSRVD_OPTIONS_H
#define WSRV_WSRVD_OPTIONS_H

#include <stdbool.h>
#include <stdint.h>

#include "loaded_door.h"
#include "generations_door.h"
#include "core_door.h"

#define MAX_MODELS 64

/* What the command line asked for. parse() owns specs[] (freed by
 * wsrvd_args_free); names[] and paths[] point into them. */
struct args {
	struct load_opts load;
	struct srv_config srv;
	const char *names[MAX_MODELS];
	const char *paths[MAX_MODELS];
	uint64_t budgets[MAX_MODELS];   /* --model NAME=PATH,budget=SIZE; 0: --memory-budget's */
	char *specs[MAX_MODELS];
	int nmodels;
	int load_only;
	int json;
	bool verify_adopted;
	bool take_over;
	const char *metrics_listen; /* --metrics-listen, or NULL: none */
	bool serve_late;            /* --serve-when-loaded */
	bool serve_early_asked;     /* --serve-while-loading (the default) */
	struct srv_peers peers;
};

/* The defaults of every serving limit. */
void wsrvd_args_init(struct args *a);
/* Parses argv into a; prints --help or --version and exits for those.
 * 0, or -EINVAL with the reason logged. */
int wsrvd_parse(int argc, char **argv, struct args *a);
/* Frees what parsing kept (the model specs, the load options). */
void wsrvd_args_free(struct args *a);

#endif
