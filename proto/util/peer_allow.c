// SPDX-License-Identifier: MIT
/* peer_allow.c - who may use a daemon's socket, and which process a peer
 * is (peer_allow.h). */
#include "peer_allow.h"

#include <errno.h>
#include <grp.h>
#include <poll.h>
#include <pwd.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

/* A number from 0 to UINT32_MAX - 1 (-1 is "no change" to chown), all of s. */
static int id_number(const char *s, uint32_t *out)
{
	char *end;
	unsigned long long v;

	if (!*s || *s == '-' || *s == '+')
		return -EINVAL;
	errno = 0;
	v = strtoull(s, &end, 10);
	if (errno || *end || v >= UINT32_MAX)
		return -EINVAL;
	*out = (uint32_t)v;
	return 0;
}

int peer_uid_arg(const char *opt, const char *arg, uid_t *out, char *err, size_t errlen)
{
	const struct passwd *pw;
	uint32_t v;

	if (id_number(arg, &v) == 0) {
		*out = (uid_t)v;
		return 0;
	}
	if (!(pw = getpwnam(arg))) {
		snprintf(err, errlen, "--%s '%s': no such user (a name or a number)", opt, arg);
		return -EINVAL;
	}
	*out = pw->pw_uid;
	return 0;
}

int peer_gid_arg(const char *opt, const char *arg, gid_t *out, char *err, size_t errlen)
{
	const struct group *gr;
	uint32_t v;

	if (id_number(arg, &v) == 0) {
		*out = (gid_t)v;
		return 0;
	}
	if (!(gr = getgrnam(arg))) {
		snprintf(err, errlen, "--%s '%s': no such group (a name or a number)", opt, arg);
		return -EINVAL;
	}
	*out = gr->gr_gid;
	return 0;
}

static bool listed(gid_t g, const gid_t *gids, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (gids[i] == g)
			return true;
	return false;
}

/* Is one of the peer's supplementary groups listed? A peer in more than
 * 256 groups is refused rather than guessed at (the kernel answers
 * ERANGE). */
static bool groups_allowed(int fd, const gid_t *gids, size_t n)
{
	gid_t groups[256];
	socklen_t len = sizeof(groups);

	if (getsockopt(fd, SOL_SOCKET, SO_PEERGROUPS, groups, &len) < 0)
		return false;
	for (size_t g = 0; g < len / sizeof(gid_t); g++)
		if (listed(groups[g], gids, n))
			return true;
	return false;
}

bool peer_allowed(int fd, const struct ucred *c, const uid_t *uids, size_t nuids, const gid_t *gids,
		  size_t ngids)
{
	if (c->uid == 0)
		return true;
	for (size_t i = 0; i < nuids; i++)
		if (uids[i] == c->uid)
			return true;
	if (listed(c->gid, gids, ngids))
		return true;
	return ngids > 0 && groups_allowed(fd, gids, ngids);
}

#ifndef SO_PEERPIDFD
#define SO_PEERPIDFD 77
#endif

bool pidfd_exited(int pidfd)
{
	struct pollfd p = { .fd = pidfd, .events = POLLIN };

	return poll(&p, 1, 0) == 1 && (p.revents & (POLLIN | POLLHUP | POLLERR));
}

int peer_pidfd(int fd, uint64_t *ino)
{
	socklen_t len = sizeof(int);
	struct stat st;
	int pidfd = -1;

	if (getsockopt(fd, SOL_SOCKET, SO_PEERPIDFD, &pidfd, &len) < 0 || pidfd < 0)
		return errno == ENOPROTOOPT ? -ENOPROTOOPT : -ESRCH;
	if (fstat(pidfd, &st) < 0 || pidfd_exited(pidfd)) {
		close(pidfd);
		return -ESRCH;
	}
	*ino = (uint64_t)st.st_ino;
	return pidfd;
}

uint64_t peer_process_held(int fd, const struct ucred *c, int *pidfd)
{
	uint64_t ino = 0;
	int p = peer_pidfd(fd, &ino);

	*pidfd = p >= 0 ? p : -1;
	if (p >= 0)
		return (1ull << 62) | ino;
	/* Gone, or a kernel that cannot say: its pid while it has one. */
	return p == -ENOPROTOOPT && c->pid > 0 ? (uint64_t)c->pid : (1ull << 63) | c->uid;
}

uint64_t peer_process_id(int fd, const struct ucred *c)
{
	int pidfd;
	uint64_t id = peer_process_held(fd, c, &pidfd);

	if (pidfd >= 0)
		close(pidfd);
	return id;
}

uint64_t peer_account(int pidfd, uint64_t process, uid_t uid)
{
	return pidfd >= 0 && pidfd_exited(pidfd) ? (1ull << 63) | uid : process;
}
