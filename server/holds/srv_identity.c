// SPDX-License-Identifier: MIT
/* srv_identity.c - a client's process and user, for its shares
 * (srv_identity.h). */
#include "srv_identity.h"

#include <errno.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "log.h"
#include "peer_allow.h"
#include "core_door.h"
#include "srv_attachments.h"
#include "tier_door.h"

#define ACCOUNT_PROCESS (1ull << 62)   /* | its pidfs inode */
#define ACCOUNT_USER (1ull << 63)      /* | its uid: its orphaned connections */

static int pidfd_of(pid_t pid)
{
	return (int)syscall(SYS_pidfd_open, pid, 0);
}

void srv_identity_init(struct session *s)
{
	int fd = peer_pidfd(s->fd, &s->proc_ino);

	s->pidfd = -1;
	if (fd < 0) {
		/* Gone before it was accepted, or a kernel without SO_PEERPIDFD
		 * (its pid is all there is, while it has one). */
		s->proc_ino = 0;
		s->proc_gone = fd != -ENOPROTOOPT || s->cred.pid <= 0;
		return;
	}
	if (s->cred.pid <= 0)
		s->pidfd = fd; /* invisible: only its pidfd can tell when it goes */
	else
		close(fd);
}

void srv_identity_free(struct session *s)
{
	if (s->pidfd >= 0)
		close(s->pidfd);
	s->pidfd = -1;
}

/* Whether the process that made s's connection still lives: its kept
 * pidfd, or its pid looked up again and found with the same inode. */
static bool creator_lives(const struct session *s)
{
	struct stat st;
	bool same;
	int fd;

	if (!s->proc_ino)
		return true; /* known by its pid alone (a kernel before 6.5) */
	if (s->pidfd >= 0)
		return !pidfd_exited(s->pidfd);
	if ((fd = pidfd_of(s->cred.pid)) < 0)
		return false;
	same = fstat(fd, &st) == 0 && (uint64_t)st.st_ino == s->proc_ino && !pidfd_exited(fd);
	close(fd);
	return same;
}

static uint64_t user_account(const struct session *s)
{
	return ACCOUNT_USER | (uint64_t)s->cred.uid;
}

static uint64_t process_account(const struct session *s)
{
	return s->proc_ino ? ACCOUNT_PROCESS | s->proc_ino : (uint64_t)s->cred.pid;
}

uint64_t srv_account(struct server *srv, struct session *s)
{
	if (!s->proc_gone && !creator_lives(s)) {
		uint64_t was = process_account(s);
		s->proc_gone = true;
		srv_identity_free(s);
		for (size_t i = 0; i < srv->nmodels; i++)
			if (srv->models[i].lm && srv->models[i].lm->tier)
				tier_reaccount(srv->models[i].lm->tier, was, user_account(s));
		log_debug("client %llu: the process that connected it (pid %d) is gone; its holds count against uid %d's",
			  (unsigned long long)s->id, (int)s->cred.pid, (int)s->cred.uid);
	}
	return s->proc_gone ? user_account(s) : process_account(s);
}

/* Whether uid is among v[0..n). */
static bool has(const uint32_t *v, uint32_t n, uint32_t uid)
{
	for (uint32_t i = 0; i < n; i++)
		if (v[i] == uid)
			return true;
	return false;
}

/* The distinct uids of the sessions (attached to model mi; mi past the
 * models: any), counted up to 64: past that, the part is small anyway. */
static uint32_t count_users(const struct server *srv, uint32_t mi)
{
	uint32_t v[64], n = 0;

	for (const struct session *s = srv->sessions; s && n < 64; s = s->next)
		if ((mi >= srv->nmodels || attach_has(s, mi)) && !has(v, n, s->cred.uid))
			v[n++] = s->cred.uid;
	return n ? n : 1;
}

uint32_t srv_users_of(const struct server *srv, uint32_t mi)
{
	return count_users(srv, mi);
}

uint32_t srv_users(const struct server *srv)
{
	return count_users(srv, UINT32_MAX);
}
