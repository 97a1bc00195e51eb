// SPDX-License-Identifier: MIT
/* fd_check.c - counting a process's open fds, for the leak checks of the
 * runner and the fixture (fd_check.h). */
#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fd_check.h"

/* What fd is open on (its /proc/self/fd link), in target; false when it
 * is not open. */
static bool fd_target(int fd, char *target, size_t len)
{
	char path[64];
	ssize_t n;

	snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
	n = readlink(path, target, len - 1);
	target[n > 0 ? n : 0] = '\0';
	return n >= 0;
}

/* Does count_fds count an fd open on target? Not the NVIDIA driver's
 * device files, which it keeps from cuInit on. */
static bool counted_target(const char *target)
{
	return strncmp(target, "/dev/nvidia", 11) != 0;
}

/* Calls fn(fd, its target) for each open fd but the directory's own. */
static int each_fd(void (*fn)(int fd, const char *target, void *arg), void *arg)
{
	DIR *d = opendir("/proc/self/fd");
	struct dirent *de;
	char target[256];

	if (!d)
		return -1;
	while ((de = readdir(d))) {
		int fd = atoi(de->d_name);
		if (de->d_name[0] == '.' || fd == dirfd(d))
			continue;
		fd_target(fd, target, sizeof(target));
		fn(fd, target, arg);
	}
	closedir(d);
	return 0;
}

static void count_one(int fd, const char *target, void *arg)
{
	*(int *)arg += counted_target(target);
}

static void print_one(int fd, const char *target, void *arg)
{
	fprintf(stderr, "  fd %d: %s\n", fd, target);
}

static bool counted(int fd)
{
	char target[256];

	return fd_target(fd, target, sizeof(target)) && counted_target(target);
}

void fd_map_take(bool *map)
{
	for (int fd = 0; fd < FD_MAP; fd++)
		map[fd] = fcntl(fd, F_GETFD) >= 0;
}

void fd_map_new(const bool *before, bool *opened)
{
	fd_map_take(opened);
	for (int fd = 0; fd < FD_MAP; fd++)
		opened[fd] = opened[fd] && !before[fd];
}

int fd_map_kept(const bool *opened)
{
	int n = 0;

	for (int fd = 0; fd < FD_MAP; fd++)
		n += opened[fd] && counted(fd);
	return n;
}

int count_fds(void)
{
	int n = 0;

	return each_fd(count_one, &n) < 0 ? -1 : n;
}

int fd_leak_check(int before)
{
	int now = count_fds();

	if (now == before)
		return 0;
	fprintf(stderr, "fd leak: %d open, %d before\n", now, before);
	each_fd(print_one, NULL);
	return -1;
}
