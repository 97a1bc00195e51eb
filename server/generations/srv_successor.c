// SPDX-License-Identifier: MIT
/* srv_successor.c - the taking side of a live hand-over (wsrvd
 * --take-over): connect to the running server as a client, ask for
 * everything (TakeOver), adopt it, and say when this process serves
 * (TakeOverDone), after which the old one says Goodbye and exits. */
#include "srv_successor.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/un.h>
#include <unistd.h>

#include "packet.h"
#include "srv_handover.h"
#include "wsrv.pb-c.h"

/* One request and its reply, with the reply's fds. */
static int call(int fd, Wsrv__Request *q, Wsrv__Response **r, int *fds, int *nfds, struct errinfo *e)
{
	static uint8_t buf[WSRV_MAX_PACKET];
	size_t len = wsrv__request__get_packed_size(q);
	long n;

	wsrv__request__pack(q, buf);
	if (pkt_send(fd, buf, len, NULL, 0) < 0)
		return err_set(e, -ENOTCONN, "the running server went away");
	n = pkt_recv(fd, buf, sizeof(buf), fds, WSRV_MAX_FDS, nfds);
	if (n <= 0 || !(*r = wsrv__response__unpack(NULL, (size_t)n, buf))) {
		pkt_close_fds(fds, *nfds);
		return err_set(e, -ENOTCONN, "the running server did not answer");
	}
	if ((*r)->body_case == WSRV__RESPONSE__BODY_ERROR) {
		int code = (*r)->error && (*r)->error->code > 0 ? (*r)->error->code : EPROTO;
		err_set(e, -code, "the running server refused: %s",
			(*r)->error && (*r)->error->message ? (*r)->error->message : "");
		pkt_close_fds(fds, *nfds);
		wsrv__response__free_unpacked(*r, NULL);
		return -code;
	}
	return 0;
}

static int connect_to(const char *path, struct errinfo *e)
{
	struct sockaddr_un a = { .sun_family = AF_UNIX };
	struct timeval tv = { 30, 0 };
	int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);

	if (fd < 0)
		return err_set(e, -errno, "socket: %s", strerror(errno));
	snprintf(a.sun_path, sizeof(a.sun_path), "%s", path);
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	if (connect(fd, (struct sockaddr *)&a, sizeof(a)) < 0) {
		int code = errno;
		close(fd);
		return err_set(e, -code, "no server to take over at %s: %s", path, strerror(code));
	}
	return fd;
}

static int hello(int fd, struct errinfo *e)
{
	Wsrv__Request q = WSRV__REQUEST__INIT;
	Wsrv__Hello h = WSRV__HELLO__INIT;
	Wsrv__Response *r;
	int fds[WSRV_MAX_FDS], n = 0, ret;

	h.protocol = WSRV_PROTOCOL_VERSION;
	h.client_name = "wsrvd --take-over";
	h.pid = (uint32_t)getpid();
	q.body_case = WSRV__REQUEST__BODY_HELLO;
	q.hello = &h;
	if ((ret = call(fd, &q, &r, fds, &n, e)) < 0)
		return ret;
	pkt_close_fds(fds, n);
	wsrv__response__free_unpacked(r, NULL);
	return 0;
}

int successor_take(const char *path, struct handover *h, int *conn, struct errinfo *e)
{
	Wsrv__Request q = WSRV__REQUEST__INIT;
	Wsrv__TakeOver t = WSRV__TAKE_OVER__INIT;
	Wsrv__Response *r;
	int fds[WSRV_MAX_FDS], n = 0, fd, ret;

	if ((fd = connect_to(path, e)) < 0)
		return fd;
	q.body_case = WSRV__REQUEST__BODY_TAKE_OVER;
	q.take_over = &t;
	if ((ret = hello(fd, e)) < 0 || (ret = call(fd, &q, &r, fds, &n, e)) < 0) {
		close(fd);
		return ret;
	}
	if (r->body_case != WSRV__RESPONSE__BODY_TAKE_OVER || !r->take_over ||
	    r->take_over->n_fd_names != (size_t)n) {
		pkt_close_fds(fds, n);
		wsrv__response__free_unpacked(r, NULL);
		close(fd);
		return err_set(e, -EPROTO, "the running server's take-over reply is malformed");
	}
	for (int i = 0; i < n; i++)
		if (handover_add(h, r->take_over->fd_names[i], fds[i]) < 0)
			close(fds[i]);
	wsrv__response__free_unpacked(r, NULL);
	handover_read_state(h);
	*conn = fd;
	return 0;
}

int successor_finish(int conn, struct errinfo *e)
{
	Wsrv__Request q = WSRV__REQUEST__INIT;
	Wsrv__TakeOverDone d = WSRV__TAKE_OVER_DONE__INIT;
	Wsrv__Response *r;
	int fds[WSRV_MAX_FDS], n = 0, ret;

	q.body_case = WSRV__REQUEST__BODY_TAKE_OVER_DONE;
	q.take_over_done = &d;
	ret = call(conn, &q, &r, fds, &n, e);
	if (ret == 0) {
		pkt_close_fds(fds, n);
		wsrv__response__free_unpacked(r, NULL);
	}
	close(conn);
	return ret;
}
