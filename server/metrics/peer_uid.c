// SPDX-License-Identifier: MIT
/* peer_uid.c - the uid at the other end of a local connection
 * (peer_uid.h): a sock_diag dump of TCP sockets whose source port is the
 * peer's and whose destination port is ours, matched on the address. */
#include "peer_uid.h"

#include <errno.h>
#include <linux/inet_diag.h>
#include <linux/netlink.h>
#include <linux/rtnetlink.h>
#include <linux/sock_diag.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <string.h>
#include <unistd.h>

struct diag_req {
	struct nlmsghdr nh;
	struct inet_diag_req_v2 r;
	struct rtattr rta;
	struct inet_diag_bc_op bc[4];
};

/* The peer's family, address (16 bytes: IPv4 in the first 4, as
 * inet_diag has it) and port, host order. -EAFNOSUPPORT otherwise. */
static int peer_parts(const struct sockaddr *sa, int *family, uint32_t addr[4], uint16_t *port)
{
	memset(addr, 0, 16);
	if (sa->sa_family == AF_INET) {
		const struct sockaddr_in *a = (const struct sockaddr_in *)(const void *)sa;
		*family = AF_INET;
		addr[0] = a->sin_addr.s_addr;
		*port = ntohs(a->sin_port);
		return 0;
	}
	if (sa->sa_family == AF_INET6) {
		const struct sockaddr_in6 *a = (const struct sockaddr_in6 *)(const void *)sa;
		*port = ntohs(a->sin6_port);
		if (IN6_IS_ADDR_V4MAPPED(&a->sin6_addr)) {
			*family = AF_INET; /* the client's socket is IPv4 */
			memcpy(&addr[0], &a->sin6_addr.s6_addr[12], 4);
		} else {
			*family = AF_INET6;
			memcpy(addr, &a->sin6_addr, 16);
		}
		return 0;
	}
	return -EAFNOSUPPORT;
}

/* A dump request of TCP sockets (every state) with source port sport and
 * destination port dport: the bytecode rejects by jumping past its end. */
static void build(struct diag_req *q, int family, uint16_t sport, uint16_t dport)
{
	memset(q, 0, sizeof(*q));
	q->nh.nlmsg_len = sizeof(*q);
	q->nh.nlmsg_type = SOCK_DIAG_BY_FAMILY;
	q->nh.nlmsg_flags = NLM_F_REQUEST | NLM_F_DUMP;
	q->r.sdiag_family = (uint8_t)family;
	q->r.sdiag_protocol = IPPROTO_TCP;
	/* Full sockets only: a TIME_WAIT one left by an earlier connection
	 * from the same port (loopback reuses them at once) says uid 0, and
	 * request sockets are the listener's side. */
	q->r.idiag_states = (1u << TCP_ESTABLISHED) | (1u << TCP_SYN_SENT) | (1u << TCP_FIN_WAIT1) |
			    (1u << TCP_FIN_WAIT2) | (1u << TCP_CLOSE_WAIT) | (1u << TCP_LAST_ACK) | (1u << TCP_CLOSING);
	q->rta.rta_type = INET_DIAG_REQ_BYTECODE;
	q->rta.rta_len = RTA_LENGTH(sizeof(q->bc));
	q->bc[0] = (struct inet_diag_bc_op){ INET_DIAG_BC_S_EQ, 8, 16 + 4 };
	q->bc[1] = (struct inet_diag_bc_op){ 0, 0, sport };
	q->bc[2] = (struct inet_diag_bc_op){ INET_DIAG_BC_D_EQ, 8, 8 + 4 };
	q->bc[3] = (struct inet_diag_bc_op){ 0, 0, dport };
}

/* Reads the dump's replies: 0 with *uid when the sockets at addr are
 * one user's; -ENOTUNIQ when two users' are (nothing can be said). */
static int read_dump(int fd, int family, const uint32_t addr[4], uid_t *uid)
{
	static __thread char buf[16384] __attribute__((aligned(8)));
	int found = -ENOENT;

	for (;;) {
		ssize_t n = recv(fd, buf, sizeof(buf), 0);
		if (n < 0)
			return errno == EINTR ? found : -errno;
		for (struct nlmsghdr *h = (struct nlmsghdr *)buf; NLMSG_OK(h, (size_t)n); h = NLMSG_NEXT(h, n)) {
			const struct inet_diag_msg *m = NLMSG_DATA(h);
			if (h->nlmsg_type == NLMSG_DONE)
				return found;
			if (h->nlmsg_type == NLMSG_ERROR)
				return -EPROTO;
			if (h->nlmsg_len < NLMSG_LENGTH(sizeof(*m)))
				continue;
			/* An orphan (its process closed it; inode 0) says uid 0
			 * whoever made it: it is nobody's. */
			if (memcmp(m->id.idiag_src, addr, family == AF_INET ? 4 : 16) != 0 || !m->idiag_inode)
				continue;
			if (found == 0 && *uid != m->idiag_uid)
				found = -ENOTUNIQ;
			else if (found == -ENOENT)
				found = 0;
			*uid = m->idiag_uid;
		}
	}
}

int local_peer_uid(const struct sockaddr *peer, uint16_t local_port, uid_t *uid)
{
	struct sockaddr_nl k = { .nl_family = AF_NETLINK };
	struct timeval tv = { .tv_sec = 1 };
	struct diag_req q;
	uint32_t addr[4];
	uint16_t port;
	int family, fd, r;

	if ((r = peer_parts(peer, &family, addr, &port)) < 0)
		return r;
	if ((fd = socket(AF_NETLINK, SOCK_DGRAM | SOCK_CLOEXEC, NETLINK_SOCK_DIAG)) < 0)
		return -errno;
	(void)setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	build(&q, family, port, local_port);
	if (sendto(fd, &q, sizeof(q), 0, (struct sockaddr *)&k, sizeof(k)) < 0)
		r = -errno;
	else
		r = read_dump(fd, family, addr, uid);
	close(fd);
	return r;
}
