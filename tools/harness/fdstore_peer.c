// SPDX-License-Identifier: MIT
/* fdstore_peer.c - the fd store's service-manager side (fdstore_peer.h). */
#include "fdstore_peer.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "clock.h"

int fdstore_open(struct fdstore *s, const char *dir)
{
	struct sockaddr_un a = { .sun_family = AF_UNIX };

	memset(s, 0, sizeof(*s));
	snprintf(s->path, sizeof(s->path), "%s/notify.sock", dir);
	snprintf(a.sun_path, sizeof(a.sun_path), "%.100s", s->path);
	if ((s->sock = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0)) < 0)
		return -errno;
	if (bind(s->sock, (struct sockaddr *)&a, sizeof(a)) < 0) {
		int e = errno;
		close(s->sock);
		return -e;
	}
	return 0;
}

void fdstore_remove(struct fdstore *s, const char *name)
{
	for (int i = 0; i < s->n; i++)
		if (strcmp(s->names[i], name) == 0) {
			close(s->fds[i]);
			s->fds[i] = s->fds[--s->n];
			memcpy(s->names[i], s->names[s->n], sizeof(s->names[0]));
			i--;
		}
}

/* One message: its assignments, and the fds that came with it. */
static void message(struct fdstore *s, const char *msg, const int *fds, int nfds)
{
	const char *name = strstr(msg, "FDNAME=");
	char nm[64] = "stored";

	if (name)
		sscanf(name + 7, "%63[^\n]", nm);
	if (strstr(msg, "FDSTOREREMOVE=1"))
		fdstore_remove(s, nm);
	for (int i = 0; i < nfds; i++) {
		if (!strstr(msg, "FDSTORE=1") || s->n == FDSTORE_MAX) {
			close(fds[i]);
			continue;
		}
		snprintf(s->names[s->n], sizeof(s->names[0]), "%s", nm);
		s->fds[s->n++] = fds[i];
	}
	s->ready |= strstr(msg, "READY=1") != NULL;
	s->stopping |= strstr(msg, "STOPPING=1") != NULL;
}

static void receive_one(struct fdstore *s)
{
	char buf[4096], ctrl[CMSG_SPACE(sizeof(int) * 16)];
	struct iovec iov = { buf, sizeof(buf) - 1 };
	struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctrl,
			     .msg_controllen = sizeof(ctrl) };
	int fds[16], nfds = 0;
	ssize_t n = recvmsg(s->sock, &mh, MSG_CMSG_CLOEXEC);

	if (n < 0)
		return;
	buf[n] = 0;
	for (struct cmsghdr *c = CMSG_FIRSTHDR(&mh); c; c = CMSG_NXTHDR(&mh, c))
		if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS) {
			int k = (int)((c->cmsg_len - CMSG_LEN(0)) / sizeof(int));
			if (nfds + k > 16)
				k = 16 - nfds;
			memcpy(fds + nfds, CMSG_DATA(c), sizeof(int) * (size_t)k);
			nfds += k;
		}
	message(s, buf, fds, nfds);
}

void fdstore_drain(struct fdstore *s, int ms, bool until_ready)
{
	double end = mono_now() + ms / 1e3;

	while (mono_now() < end && !(until_ready && s->ready)) {
		struct pollfd p = { s->sock, POLLIN, 0 };
		if (poll(&p, 1, 5) > 0)
			receive_one(s);
	}
}

void fdstore_drain_queued(struct fdstore *s)
{
	struct pollfd p = { s->sock, POLLIN, 0 };

	while (poll(&p, 1, 0) > 0)
		receive_one(s);
}

const char *fdstore_names(const struct fdstore *s)
{
	static char buf[FDSTORE_MAX * 64];
	size_t n = 0;

	buf[0] = 0;
	for (int i = 0; i < s->n; i++)
		n += (size_t)snprintf(buf + n, sizeof(buf) - n, "%s%s", i ? ":" : "", s->names[i]);
	return buf;
}

int fdstore_pass(const struct fdstore *s)
{
	int high[FDSTORE_MAX];
	char v[32];

	setenv("NOTIFY_SOCKET", s->path, 1);
	if (s->n == 0)
		return 0;
	for (int i = 0; i < s->n; i++)   /* out of the way of 3..n+2 first */
		if ((high[i] = fcntl(s->fds[i], F_DUPFD, 3 + FDSTORE_MAX + 64)) < 0)
			return -errno;
	for (int i = 0; i < s->n; i++)
		if (dup2(high[i], 3 + i) < 0)
			return -errno;
	snprintf(v, sizeof(v), "%d", s->n);
	setenv("LISTEN_FDS", v, 1);
	snprintf(v, sizeof(v), "%d", (int)getpid());
	setenv("LISTEN_PID", v, 1);
	setenv("LISTEN_FDNAMES", fdstore_names(s), 1);
	return 0;
}

void fdstore_close(struct fdstore *s)
{
	for (int i = 0; i < s->n; i++)
		close(s->fds[i]);
	s->n = 0;
	close(s->sock);
	unlink(s->path);
}
