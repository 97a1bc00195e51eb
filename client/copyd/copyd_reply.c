// SPDX-License-Identifier: MIT
/* copyd_reply.c - the service's answers to a worker (copyd.h): one
 * packet each, dropped when the worker does not take it. */
#include <errno.h>
#include <stdint.h>

#include "copyd.h"
#include "log.h"
#include "packet.h"
#include "wire.h"

/* Sends rs: false when the worker does not take it (it is dropped). */
bool cd_reply(struct cd_conn *c, Wsrv__CopyResponse *rs)
{
	uint8_t buf[WSRV_MAX_PACKET];
	size_t len = wsrv__copy_response__get_packed_size(rs);

	if (len > sizeof(buf))
		return false;
	wsrv__copy_response__pack(rs, buf);
	return pkt_send(c->fd, buf, len, NULL, 0) == 0;
}

bool cd_reply_error(struct copyd *cd, struct cd_conn *c, uint64_t seq, int r, const struct errinfo *err)
{
	Wsrv__CopyResponse rs = WSRV__COPY_RESPONSE__INIT;
	Wsrv__CopyError er = WSRV__COPY_ERROR__INIT;

	rs.seq = seq;
	er.code = -r;
	er.message = (char *)err->msg;
	rs.body_case = WSRV__COPY_RESPONSE__BODY_ERROR, rs.error = &er;
	cd->refused++;
	log_debug("process %d: %s", (int)c->cred.pid, er.message);
	return cd_reply(c, &rs);
}

bool cd_reply_done(struct cd_conn *c, uint64_t seq, uint64_t bytes, double secs, unsigned waited)
{
	Wsrv__CopyResponse rs = WSRV__COPY_RESPONSE__INIT;
	Wsrv__CopyDone dn = WSRV__COPY_DONE__INIT;

	rs.seq = seq;
	dn.bytes = bytes;
	dn.seconds = secs;
	dn.waited_slices = waited;
	rs.body_case = WSRV__COPY_RESPONSE__BODY_DONE, rs.done = &dn;
	return cd_reply(c, &rs);
}
