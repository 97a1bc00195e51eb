// SPDX-License-Identifier: MIT
/* listen_socket.c - claiming a daemon's socket path safely
 * (listen_socket.h). */
#include "listen_socket.h"

#include "sockpath.h"

#include <errno.h>
#include <stdbool.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

static int fill_addr(const char *path, struct sockaddr_un *a, struct errinfo *e)
{
	char why[256];
	int r = sockpath_check(path, why, sizeof(why));

	if (r < 0)
		return err_set(e, r, "--socket: %s", why);
	memset(a, 0, sizeof(*a));
	a->sun_family = AF_UNIX;
	strcpy(a->sun_path, path);
	return 0;
}

/* 1 when a server answers on path, 0 when the file is stale, <0 on error. */
static int probe(const char *path, const struct sockaddr_un *a, struct errinfo *e)
{
	struct stat st;
	int fd, r;

	if (lstat(path, &st) < 0)
		return errno == ENOENT ? 0 : err_set(e, -errno, "%s: %s", path, strerror(errno));
	if (!S_ISSOCK(st.st_mode))
		return err_set(e, -EEXIST, "%s exists and is not a socket; not replacing it", path);
	fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return err_set(e, -errno, "socket: %s", strerror(errno));
	r = connect(fd, (const struct sockaddr *)a, sizeof(*a)) < 0 ? errno : 0;
	close(fd);
	if (r == 0)
		return 1;
	/* Only a refused connection says that nobody listens there. A stream
	 * or datagram socket of another service answers EPROTOTYPE: that one
	 * is alive, and not ours to delete. */
	if (r == ECONNREFUSED || r == ENOENT)
		return 0;
	return err_set(e, -EEXIST, "%s is a socket in use (%s), perhaps another service's; not replacing it",
		       path, strerror(r));
}

static int take_lock(const char *path, const char *who, int *lock, struct errinfo *e)
{
	char lp[sizeof(((struct sockaddr_un *)0)->sun_path) + 8];
	struct stat st;
	int fd;

	snprintf(lp, sizeof(lp), "%s.lock", path);
	/* O_NOFOLLOW: a symbolic link planted here must not make us create or
	 * lock a file elsewhere. */
	fd = open(lp, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW | O_NOCTTY | O_NONBLOCK, 0600);
	if (fd < 0 && errno == ENOENT) { /* the folder, not the lock file, is what is missing */
		char *slash = strrchr(lp, '/');
		if (slash && slash != lp)
			*slash = 0;
		return err_set(e, -ENOENT, "the socket's folder %s does not exist: make it, or choose another --socket",
			       slash && slash != lp ? lp : ".");
	}
	if (fd < 0)
		return err_set(e, -errno, "%s: %s%s", lp, strerror(errno),
			       errno == ELOOP ? " (a symbolic link; refusing to follow it)" : "");
	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
		close(fd);
		return err_set(e, -EEXIST, "%s is not a regular file; not using it as a lock", lp);
	}
	if (flock(fd, LOCK_EX | LOCK_NB) < 0) {
		close(fd);
		return err_set(e, -EADDRINUSE, "another %s holds %s; not starting a second one", who, lp);
	}
	*lock = fd;
	return 0;
}

/* The folder directly under /run that path is in (/run/wsrv) into dir:
 * true, or false when path is elsewhere. */
static bool run_folder_of(const char *path, char *dir, size_t cap)
{
	const char *slash = strrchr(path, '/');

	if (strncmp(path, "/run/", 5) != 0 || !slash || slash == path + 4 || memchr(path + 5, '/', (size_t)(slash - path - 5)))
		return false;
	snprintf(dir, cap, "%.*s", (int)(slash - path), path);
	return true;
}

/* That folder, made when missing. */
static void run_folder(const char *path)
{
	char dir[sizeof(((struct sockaddr_un *)0)->sun_path)];

	if (run_folder_of(path, dir, sizeof(dir)))
		mkdir(dir, 0755);
}

int listen_claim(const char *path, const char *who, mode_t mode, gid_t gid, int *sock, int *lock,
		 struct errinfo *e)
{
	struct sockaddr_un a;
	int fd, lk = -1, r;
	mode_t old;

	r = fill_addr(path, &a, e);
	if (r == 0)
		run_folder(path);
	if (r < 0 || (r = take_lock(path, who, &lk, e)) < 0)
		return r;
	/* With the lock ours, no daemon of ours serves there: a socket that still
	 * takes connections is a killed one's, which the kernel lets go a few
	 * milliseconds after the process is gone (the last reference is its
	 * io_uring's pending accept). A restart right after a crash waits
	 * for that, up to a second. */
	for (int i = 0; (r = probe(path, &a, e)) == 1 && i < 100; i++)
		usleep(10 * 1000);
	if (r == 1)
		r = err_set(e, -EADDRINUSE, "a %s is already serving on %s; not starting a second one", who, path);
	if (r < 0) {
		close(lk);
		return r;
	}
	unlink(path); /* stale: its server is gone */
	fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	/* The socket file takes its mode from the socket's inode and the
	 * umask at bind: no chmod by path afterwards, which would follow a
	 * symbolic link put there in between. */
	mode = mode ? mode : 0660;
	old = umask(~mode & 0777);
	r = fd < 0 || fchmod(fd, mode) < 0 || bind(fd, (const struct sockaddr *)&a, sizeof(a)) < 0 ||
	    listen(fd, 512) < 0;
	umask(old);
	/* The group by path, not following a link (the fd's is the socket's
	 * own inode, not the file's). */
	if (!r && gid != (gid_t)-1 && lchown(path, (uid_t)-1, gid) < 0)
		r = 1;
	if (r) {
		r = err_set(e, -errno, "%s: cannot listen: %s", path, strerror(errno));
		if (fd >= 0)
			close(fd);
		close(lk);
		return r;
	}
	*sock = fd;
	*lock = lk;
	return 0;
}

void listen_release(const char *path, int sock, int lock)
{
	char lp[sizeof(((struct sockaddr_un *)0)->sun_path) + 8];

	if (sock >= 0) {
		unlink(path);
		close(sock);
	}
	/* The lock file goes while we still hold it, after the socket: a
	 * daemon starting now either finds it locked, or creates a new one
	 * and finds no socket of ours. */
	if (lock >= 0) {
		snprintf(lp, sizeof(lp), "%s.lock", path);
		unlink(lp);
		close(lock);
	}
	/* The folder under /run that listen_claim may have made goes too,
	 * when nothing else is in it (a unit's RuntimeDirectory= is systemd's
	 * to remove; an rmdir of it, empty, changes nothing it relies on). */
	if (sock >= 0 && run_folder_of(path, lp, sizeof(lp)))
		(void)rmdir(lp);
}
