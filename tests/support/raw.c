// SPDX-License-Identifier: MIT
/* raw.c - the wire protocol spoken by hand: a connection, a request sent,
 * a reply's code, for tests that say what libwsrv never would. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include "helpers.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "packet.h"
#include "wsrv.h"
#include "wsrv.pb-c.h"

int raw_connect(const char *path)
{
	struct sockaddr_un a = { .sun_family = AF_UNIX };
	struct timeval tv = { 5, 0 };
	int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);

	if (fd < 0)
		return -errno;
	snprintf(a.sun_path, sizeof(a.sun_path), "%s", path);
	if (connect(fd, (struct sockaddr *)&a, sizeof(a)) < 0) {
		int r = -errno;
		close(fd);
		return r;
	}
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	return fd;
}

int raw_send(int fd, const void *q, const int *fds, int nfds)
{
	static uint8_t buf[WSRV_MAX_PACKET];
	size_t n = wsrv__request__get_packed_size(q);

	if (n > sizeof(buf))
		return -EMSGSIZE;
	wsrv__request__pack(q, buf);
	return pkt_send(fd, buf, n, fds, nfds);
}

int raw_hello(int fd, const char *name)
{
	Wsrv__Request q = WSRV__REQUEST__INIT;
	Wsrv__Hello h = WSRV__HELLO__INIT;

	h.protocol = WSRV_PROTOCOL_VERSION;
	h.client_name = (char *)(name ? name : "");
	h.disk_tier = WSRV_DISK_TIER;
	q.body_case = WSRV__REQUEST__BODY_HELLO;
	q.hello = &h;
	return raw_send(fd, &q, NULL, 0);
}

int raw_recv_code(int fd, int *keep, int *nkeep)
{
	static uint8_t buf[WSRV_MAX_PACKET];
	int fds[WSRV_MAX_FDS], n = 0, code;
	long len = pkt_recv(fd, buf, sizeof(buf), fds, WSRV_MAX_FDS, &n);
	Wsrv__Response *r;

	if (len <= 0)
		return -1;
	r = wsrv__response__unpack(NULL, (size_t)len, buf);
	if (!r) {
		pkt_close_fds(fds, n);
		return -2;
	}
	code = r->body_case == WSRV__RESPONSE__BODY_ERROR ? r->error->code : 0;
	wsrv__response__free_unpacked(r, NULL);
	if (keep) {
		memcpy(keep, fds, sizeof(int) * (size_t)n);
		*nkeep = n;
	} else {
		pkt_close_fds(fds, n);
	}
	return code;
}
