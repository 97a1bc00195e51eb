// SPDX-License-Identifier: MIT
/* memfd_util.c - a sealed memfd's life (memfd_util.h). */
#include "memfd_util.h"

#include <errno.h>
#include <stdio.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

int memfd_new(const char *name, unsigned flags, uint64_t size)
{
	int fd = memfd_create(name, MFD_CLOEXEC | MFD_ALLOW_SEALING | flags);

	if (fd < 0)
		return -errno;
	if (ftruncate(fd, (off_t)size) < 0) {
		int e = errno;
		close(fd);
		return -e;
	}
	return fd;
}

int memfd_new_mapped(const char *name, uint64_t size, void **map)
{
	int fd = memfd_new(name, 0, size);
	void *p;

	if (fd < 0)
		return fd;
	p = mmap(NULL, size ? size : 1, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (p == MAP_FAILED) {
		int e = errno;
		close(fd);
		return -e;
	}
	*map = p;
	return fd;
}

int memfd_reopen_ro(int fd)
{
	char path[64];
	int ro;

	snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
	ro = open(path, O_RDONLY | O_CLOEXEC);
	return ro < 0 ? -errno : ro;
}

int memfd_readers_only(int *fd)
{
	int ro = memfd_reopen_ro(*fd);

	if (ro < 0)
		return ro;
	if (fchmod(ro, 0400) < 0) {
		int e = errno;
		close(ro);
		return -e;
	}
	close(*fd);
	*fd = ro;
	return 0;
}

int memfd_new_sealed(const char *name, size_t len, void (*fill)(void *map, void *arg), void *arg)
{
	void *p = NULL;
	int fd = memfd_new_mapped(name, len ? len : 1, &p), r;

	if (fd < 0)
		return fd;
	fill(p, arg);
	munmap(p, len ? len : 1);
	/* The writable mapping is gone, so the strongest seal applies. */
	if ((r = memfd_seal(fd, MEMFD_SEAL_ALL)) < 0 || (r = memfd_readers_only(&fd)) < 0) {
		close(fd);
		return r;
	}
	return fd;
}

int memfd_seal(int fd, int seals)
{
	return fcntl(fd, F_ADD_SEALS, seals) < 0 ? -errno : 0;
}

static int check_seals(int fd, uint64_t want, bool exact, int need, uint64_t *size, int *seals)
{
	int got;
	struct stat st;

	if (fstat(fd, &st) < 0)
		return -errno;
	if (size)
		*size = (uint64_t)st.st_size;
	got = fcntl(fd, F_GET_SEALS);
	if (seals)
		*seals = got < 0 ? 0 : got;
	if (!S_ISREG(st.st_mode) || (uint64_t)st.st_size < want || (exact && (uint64_t)st.st_size != want))
		return -EBADF;
	if (got < 0 || (got & need) != need || !(got & (F_SEAL_WRITE | F_SEAL_FUTURE_WRITE)))
		return -EPERM;
	return 0;
}

int memfd_check(int fd, uint64_t want, bool exact, int extra, uint64_t *size, int *seals)
{
	return check_seals(fd, want, exact, F_SEAL_SHRINK | F_SEAL_GROW | extra, size, seals);
}

int memfd_check_cuttable(int fd, uint64_t want, uint64_t *size, int *seals)
{
	return check_seals(fd, want, false, F_SEAL_GROW, size, seals);
}

int memfd_cut(int fd)
{
	char path[64];
	int rw, r = 0;

	if (fchmod(fd, 0600) < 0)
		return -errno;
	snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
	if ((rw = open(path, O_RDWR | O_CLOEXEC)) < 0)
		return -errno;
	if (ftruncate(rw, 0) < 0)
		r = -errno;
	close(rw);
	return r;
}
