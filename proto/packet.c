// SPDX-License-Identifier: MIT
/* packet.c - sending and receiving packets with SCM_RIGHTS. */
#include "packet.h"

#include <errno.h>
#include <stdint.h>
#include <string.h>
#include <sys/uio.h>
#include <unistd.h>

int pkt_send(int sock, const void *buf, size_t len, const int *fds, int nfds)
{
	char ctrl[CMSG_SPACE(sizeof(int) * WSRV_MAX_FDS)];
	struct iovec iov = { (void *)buf, len };
	struct msghdr msg = { .msg_iov = &iov, .msg_iovlen = 1 };
	ssize_t n;

	if (nfds < 0 || nfds > WSRV_MAX_FDS)
		return -EINVAL;
	if (nfds) {
		struct cmsghdr *c;
		memset(ctrl, 0, sizeof(ctrl));
		msg.msg_control = ctrl;
		msg.msg_controllen = CMSG_SPACE(sizeof(int) * (size_t)nfds);
		c = CMSG_FIRSTHDR(&msg);
		c->cmsg_level = SOL_SOCKET;
		c->cmsg_type = SCM_RIGHTS;
		c->cmsg_len = CMSG_LEN(sizeof(int) * (size_t)nfds);
		memcpy(CMSG_DATA(c), fds, sizeof(int) * (size_t)nfds);
	}
	do
		n = sendmsg(sock, &msg, MSG_NOSIGNAL);
	while (n < 0 && errno == EINTR);
	if (n < 0)
		return -errno;
	return (size_t)n == len ? 0 : -EIO;
}

void pkt_close_fds(const int *fds, int n)
{
	for (int i = 0; i < n; i++)
		if (fds[i] >= 0)
			close(fds[i]);
}

void pkt_drain_close(int fd)
{
	uint8_t buf[512];
	char ctrl[CMSG_SPACE(sizeof(int) * 8)];
	int fds[8], n;

	for (int i = 0; i < PKT_DRAIN_MAX; i++) {
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

int pkt_take_fds(struct msghdr *msg, int *fds, int max, int *n)
{
	int total = 0;

	*n = 0;
	for (struct cmsghdr *c = CMSG_FIRSTHDR(msg); c; c = CMSG_NXTHDR(msg, c)) {
		if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS ||
		    c->cmsg_len < CMSG_LEN(0))
			continue;
		size_t k = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
		for (size_t i = 0; i < k; i++) {
			int fd;
			memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
			if (*n < max)
				fds[(*n)++] = fd;
			else
				close(fd);
			total++;
		}
	}
	return total;
}

long pkt_recv(int sock, void *buf, size_t cap, int *fds, int maxfds, int *nfds)
{
	char ctrl[CMSG_SPACE(sizeof(int) * WSRV_MAX_FDS)];
	struct iovec iov = { buf, cap };
	struct msghdr msg = { .msg_iov = &iov, .msg_iovlen = 1,
			      .msg_control = ctrl, .msg_controllen = sizeof(ctrl) };
	ssize_t n;
	int total;

	*nfds = 0;
	do
		n = recvmsg(sock, &msg, MSG_CMSG_CLOEXEC);
	while (n < 0 && errno == EINTR);
	if (n < 0)
		return -errno;
	total = pkt_take_fds(&msg, fds, maxfds, nfds);
	if ((msg.msg_flags & (MSG_TRUNC | MSG_CTRUNC)) || total > maxfds) {
		pkt_close_fds(fds, *nfds);
		*nfds = 0;
		return -EMSGSIZE;
	}
	if (n == 0 && total == 0)
		return -ECONNRESET; /* SEQPACKET: 0 with nothing is the peer's close */
	return n;
}
