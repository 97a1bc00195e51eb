// SPDX-License-Identifier: MIT
/* ctl.h - wsrvctl's commands. Each returns the process exit status:
 * 0 success, 1 the thing checked is bad or the request failed, 2 usage. */
#ifndef WSRV_CTL_H
#define WSRV_CTL_H

#include <jansson.h>
#include <stdbool.h>

struct ctl_ctx {
	const char *socket;   /* --socket, or NULL for the default */
	bool json;
	int wait_ms;          /* --wait SECONDS: for a server not up yet */
};

struct ctl_command {
	const char *name;
	int (*run)(const struct ctl_ctx *, int, char **);
	const char *help;           /* its line of the usage */
	const char *opts;           /* its options, a line each, for COMMAND --help; or NULL */
};

struct wsrv_client;

/* ctl_util.c: connects as "wsrvctl"; prints the reason and returns 1 on failure. */
int ctl_connect(const struct ctl_ctx *c, struct wsrv_client **cl);
/* Prints j indented on stdout and drops it. */
void ctl_print_json(json_t *j);
/* A string a peer chose, for JSON: as it is when it is UTF-8, else escaped
 * (jansson refuses it, and the entry would vanish without a word). */
json_t *ctl_peer_str(const char *s);

int ctl_status(const struct ctl_ctx *c, int argc, char **argv);
int ctl_stats(const struct ctl_ctx *c, int argc, char **argv);
int ctl_models(const struct ctl_ctx *c, int argc, char **argv);
int ctl_inspect(const struct ctl_ctx *c, int argc, char **argv);
int ctl_plan(const struct ctl_ctx *c, int argc, char **argv);
int ctl_reload(const struct ctl_ctx *c, int argc, char **argv);
int ctl_publish(const struct ctl_ctx *c, int argc, char **argv);
int ctl_tensors(const struct ctl_ctx *c, int argc, char **argv);
int ctl_layers(const struct ctl_ctx *c, int argc, char **argv);
int ctl_verify(const struct ctl_ctx *c, int argc, char **argv);
int ctl_dump(const struct ctl_ctx *c, int argc, char **argv);

#endif
