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
	char ctrl[CMSG_SPACE(sizeof(int) * 8)];
	int fds[8], n;

	err.code = code;
	err.message = (char *)why;
	resp.body_case = WSRV__RESPONSE__BODY_ERROR;
	resp.error = &err;
	if (wsrv__response__get_packed_size(&resp) <= sizeof(buf))
		(void)send(fd, buf, wsrv__response__pack(&resp, buf), MSG_DONTWAIT | MSG_NOSIGNAL);
	/* A close with unread data makes the client's next receive fail
	 * with ECONNRESET before it reaches our reply. A few packets at
	 * most: a peer cannot keep us here. */
	for (int i = 0; i < 4; i++) {
		struct iovec iov = { buf, sizeof(buf) };
		struct msghdr msg = { .msg_iov = &iov, .msg_iovlen = 1,
				      .msg_control = ctrl, .msg_controllen = sizeof(ctrl) };
		if (recvmsg(fd, &msg, MSG_DONTWAIT | MSG_CMSG_CLOEXEC) < 0)
			break;
		pkt_take_fds(&msg, fds, 8, &n);
		pkt_close_fds(fds, n);
	}
	shutdown(fd, SHUT_RDWR);
	close(fd);
}
