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
#include "peer_allow.h"

/* The argument's sentence goes to the log. */
int srv_uid_arg(const char *opt, const char *arg, uid_t *out)
{
	char err[256];
	int r = peer_uid_arg(opt, arg, out, err, sizeof(err));

	if (r < 0)
		log_err("%s", err);
	return r;
}

int srv_gid_arg(const char *opt, const char *arg, gid_t *out)
{
	char err[256];
	int r = peer_gid_arg(opt, arg, out, err, sizeof(err));

	if (r < 0)
		log_err("%s", err);
	return r;
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

bool srv_own_uid_refused(const struct server *srv, const struct ucred *c)
{
	return srv->cfg.refuse_own_uid && c->uid != 0 && c->uid == geteuid();
}

bool srv_peer_allowed(const struct server *srv, int fd, const struct ucred *c)
{
	if (c->uid != 0 && srv_own_uid_refused(srv, c))
		return false;
	return peer_allowed(fd, c, srv->cfg.allow_uid, srv->cfg.n_allow_uid, srv->cfg.allow_gid,
			    srv->cfg.n_allow_gid);
}
