// SPDX-License-Identifier: MIT
/* ctl.h - wsrvctl's commands. Each returns the process exit status:
 * 0 success, 1 the thing checked is bad or the request failed, 2 usage. */
#ifndef WSRV_CTL_H
#define WSRV_CTL_H

#include <stdbool.h>

struct ctl_ctx {
	const char *socket;   /* --socket, or NULL for the default */
	bool json;
};

struct ctl_command {
	const char *name;
	int (*run)(const struct ctl_ctx *, int, char **);
	const char *help;
};

int ctl_inspect(const struct ctl_ctx *c, int argc, char **argv);
int ctl_plan(const struct ctl_ctx *c, int argc, char **argv);

/* The commands that talk to wsrvd; NULL-terminated. */
extern const struct ctl_command ctl_server_commands[];

#endif
