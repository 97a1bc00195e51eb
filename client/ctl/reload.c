// SPDX-License-Identifier: MIT
/* reload.c - asking the server for a new generation of a model, and what
 * the model list says of each generation. */
#include <errno.h>

#include "wire.h"

WSRV_EXPORT int wsrv_reload(struct wsrv_client *c, const char *model, const char *path)
{
	Wsrv__Request q = WSRV__REQUEST__INIT;
	Wsrv__Reload rl = WSRV__RELOAD__INIT;
	Wsrv__Response *r;
	int ret;

	CL_NEED(c);
	CL_NEED(model);
	rl.model = (char *)model;
	rl.path = (char *)(path ? path : "");
	q.body_case = WSRV__REQUEST__BODY_RELOAD;
	q.reload = &rl;
	if ((ret = cl_query(c, &q, WSRV__RESPONSE__BODY_OK, &r, "Reload")) < 0)
		return ret;
	wsrv__response__free_unpacked(r, NULL);
	return 0;
}
