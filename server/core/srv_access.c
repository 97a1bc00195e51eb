// SPDX-License-Identifier: MIT
/* srv_access.c - who may reach the socket (srv_access.h): users and
 * groups by name or number, the socket's mode, and a warning for an
 * allowed user or group the socket's mode keeps out. */
#include "srv_access.h"

#include <errno.h>
#include <grp.h>
#include <limits.h>
#include <pwd.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "log.h"

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

int srv_uid_arg(const char *opt, const char *arg, uid_t *out)
{
	const struct passwd *pw;
	uint32_t v;

	if (id_number(arg, &v) == 0) {
		*out = (uid_t)v;
		return 0;
	}
	if (!(pw = getpwnam(arg))) {
		log_err("--%s '%s': no such user (a name or a number)", opt, arg);
		return -EINVAL;
	}
	*out = pw->pw_uid;
	return 0;
}

int srv_gid_arg(const char *opt, const char *arg, gid_t *out)
{
	const struct group *gr;
	uint32_t v;

	if (id_number(arg, &v) == 0) {
		*out = (gid_t)v;
		return 0;
	}
	if (!(gr = getgrnam(arg))) {
		log_err("--%s '%s': no such group (a name or a number)", opt, arg);
		return -EINVAL;
	}
	*out = gr->gr_gid;
	return 0;
}

int srv_mode_arg(const char *arg, mode_t *out)
{
	char *end;
	unsigned long v;

	errno = 0;
	v = strtoul(arg, &end, 8);
	/* Read and write go together (a client does both); the owner always
	 * has them; nothing else (no execute, no set-id bits). */
	if (errno || *end || !*arg || (v & ~0666ul) || (v & 0600) != 0600 || ((v & 060) && (v & 060) != 060) ||
	    ((v & 06) && (v & 06) != 06)) {
		log_err("--socket-mode '%s': an octal mode of 0600, 0660 or 0666 (read and write go together)", arg);
		return -EINVAL;
	}
	*out = (mode_t)v;
	return 0;
}

/* Whether uid is a member of gid (its primary group, or a supplementary
 * one): 1, 0, or -1 when the user is unknown here. */
static int member(uid_t uid, gid_t gid)
{
	const struct passwd *pw = getpwuid(uid);
	gid_t groups[256];
	int n = 256;

	if (!pw)
		return -1;
	if (pw->pw_gid == gid)
		return 1;
	if (getgrouplist(pw->pw_name, pw->pw_gid, groups, &n) < 0)
		n = 256; /* more than that: the first 256 */
	for (int i = 0; i < n; i++)
		if (groups[i] == gid)
			return 1;
	return 0;
}

/* Whether the socket's mode and owner let uid in (root always). */
static bool uid_reaches(uid_t uid, const struct stat *st)
{
	return uid == 0 || uid == st->st_uid || (st->st_mode & 06) == 06 ||
	       ((st->st_mode & 060) == 060 && member(uid, st->st_gid) == 1);
}

void srv_reach_check(const char *path, const struct srv_config *cfg)
{
	struct stat st;

	if (stat(path, &st) < 0)
		return;
	/* The last allowed uid is the server's own (room kept for it). */
	for (size_t i = 0; i < cfg->n_allow_uid; i++)
		if (!uid_reaches(cfg->allow_uid[i], &st))
			log_warn("--allow-uid %u: that user cannot reach %s (mode %04o, owner %u, group %u): give the socket one of its groups (--socket-group, or the unit's Group=) or --socket-mode 0666",
				 (unsigned)cfg->allow_uid[i], path, (unsigned)(st.st_mode & 07777), (unsigned)st.st_uid,
				 (unsigned)st.st_gid);
	for (size_t i = 0; i < cfg->n_allow_gid; i++)
		if ((st.st_mode & 06) != 06 && ((st.st_mode & 060) != 060 || st.st_gid != cfg->allow_gid[i]))
			log_warn("--allow-gid %u: members of that group reach %s only through another of their groups (mode %04o, group %u): --socket-group %u, or the unit's Group=, lets them all in",
				 (unsigned)cfg->allow_gid[i], path, (unsigned)(st.st_mode & 07777), (unsigned)st.st_gid,
				 (unsigned)cfg->allow_gid[i]);
}

/* Is one of the peer's supplementary groups listed? */
static bool groups_allowed(const struct server *srv, int fd)
{
	gid_t groups[256];
	socklen_t len = sizeof(groups);

	/* A peer in more than 256 groups is checked on its first 256 only:
	 * the kernel then answers ERANGE, and we refuse rather than guess. */
	if (getsockopt(fd, SOL_SOCKET, SO_PEERGROUPS, groups, &len) < 0)
		return false;
	for (size_t g = 0; g < len / sizeof(gid_t); g++)
		for (size_t i = 0; i < srv->cfg.n_allow_gid; i++)
			if (srv->cfg.allow_gid[i] == groups[g])
				return true;
	return false;
}

bool srv_own_uid_refused(const struct server *srv, const struct ucred *c)
{
	return srv->cfg.refuse_own_uid && c->uid != 0 && c->uid == geteuid();
}

bool srv_peer_allowed(const struct server *srv, int fd, const struct ucred *c)
{
	if (c->uid == 0)
		return true;
	if (srv_own_uid_refused(srv, c))
		return false;
	for (size_t i = 0; i < srv->cfg.n_allow_uid; i++)
		if (srv->cfg.allow_uid[i] == c->uid)
			return true;
	for (size_t i = 0; i < srv->cfg.n_allow_gid; i++)
		if (srv->cfg.allow_gid[i] == c->gid)
			return true;
	return srv->cfg.n_allow_gid > 0 && groups_allowed(srv, fd);
}
