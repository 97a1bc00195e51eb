// SPDX-License-Identifier: MIT
/* ctl_util.c - what wsrvctl's commands share: a connection, JSON out. */
#include <jansson.h>
#include <stdio.h>

#include "ctl.h"
#include "escape.h"
#include "wsrv.h"

int ctl_connect(const struct ctl_ctx *c, struct wsrv_client **cl)
{
	struct wsrv_connect_opts o = { .struct_size = sizeof(o), .client_name = "wsrvctl", .wait_ms = c->wait_ms };

	if (wsrv_connect(c->socket, &o, cl) < 0) {
		fprintf(stderr, "wsrvctl: %s\n", wsrv_last_error());
		return 1;
	}
	return 0;
}

void ctl_print_json(json_t *j)
{
	json_dumpf(j, stdout, JSON_INDENT(2));
	putchar('\n');
	json_decref(j);
}

json_t *ctl_peer_str(const char *s)
{
	char buf[1024];

	return json_string(s) ?: json_string(str_escape(s, buf, sizeof(buf)));
}
