// SPDX-License-Identifier: MIT
/* srv_refuse.c - a refused connection costs no session: it is answered and
 * closed in the accept's completion. */
#include "srv_refuse.h"

#include <errno.h>
#include <stdint.h>
#include <sys/socket.h>
#include <unistd.h>

#include "packet.h"
#include "wsrv.pb-c.h"

void srv_refuse_fd(int fd, int code, const char *why)
{
	Wsrv__Response resp = WSRV__RESPONSE__INIT;
	Wsrv__Error err = WSRV__ERROR__INIT;
	uint8_t buf[512];

	err.code = code;
	err.message = (char *)why;
	resp.body_case = WSRV__RESPONSE__BODY_ERROR;
	resp.error = &err;
	if (wsrv__response__get_packed_size(&resp) <= sizeof(buf))
		(void)send(fd, buf, wsrv__response__pack(&resp, buf), MSG_DONTWAIT | MSG_NOSIGNAL);
	pkt_drain_close(fd);
}
