// SPDX-License-Identifier: MIT
/* test_memfd.c - the sealed memfd's life (proto/util/memfd_util.h): a
 * snapshot is sealed against every change and holds what was filled; a
 * mapped one keeps its writer's mapping under F_SEAL_FUTURE_WRITE but not
 * under F_SEAL_WRITE; and the check of a received fd refuses what a reader
 * must not map: unsealed, resizable, too small, the wrong size, or not a
 * file. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "fixture.h"
#include "memfd_util.h"

static struct fixture F = { .tag = "memfd" };

static void fill_text(void *map, void *arg)
{
	memcpy(map, arg, strlen(arg));
}

static void sealed_snapshot(void **st)
{
	const char *text = "the bytes every reader sees";
	int fd = memfd_new_sealed("test-snapshot", strlen(text), fill_text, (void *)text);
	uint64_t size = 0;
	int seals = 0;
	char back[64] = "";

	assert_true(fd >= 0);
	assert_int_equal(memfd_check(fd, strlen(text), true, F_SEAL_SEAL, &size, &seals), 0);
	assert_int_equal(size, strlen(text));
	assert_int_equal(seals & MEMFD_SEAL_ALL, MEMFD_SEAL_ALL);
	assert_int_equal(pread(fd, back, sizeof(back), 0), (ssize_t)strlen(text));
	assert_string_equal(back, text);
	/* No write, no growth, no writable mapping, no seal taken back. */
	assert_int_equal(pwrite(fd, "x", 1, 0), -1);
	assert_int_equal(errno, EBADF); /* a read-only description (issue 48 item 2) */
	assert_int_equal(ftruncate(fd, 4096), -1);
	assert_true(mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0) == MAP_FAILED);
	assert_int_equal(posix_fallocate(fd, 0, 8192), EBADF);
	close(fd);
}

static void mapped_then_sealed(void **st)
{
	void *p = NULL;
	int fd = memfd_new_mapped("test-mapped", 8192, &p);

	assert_true(fd >= 0);
	memset(p, 7, 8192);
	/* A writable mapping stands in F_SEAL_WRITE's way... */
	assert_int_equal(memfd_seal(fd, F_SEAL_WRITE), -EBUSY);
	assert_int_equal(memfd_check(fd, 8192, true, 0, NULL, NULL), -EPERM);
	/* ...not in F_SEAL_FUTURE_WRITE's: the writer keeps writing. */
	assert_int_equal(memfd_seal(fd, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_FUTURE_WRITE), 0);
	((char *)p)[0] = 9;
	assert_int_equal(memfd_check(fd, 8192, true, 0, NULL, NULL), 0);
	assert_int_equal(memfd_check(fd, 8192, true, F_SEAL_SEAL, NULL, NULL), -EPERM);
	munmap(p, 8192);
	close(fd);
}

static void check_refuses(void **st)
{
	int fd = memfd_new("test-check", 0, 4096), pipefd[2];
	uint64_t size = 0;

	assert_true(fd >= 0);
	assert_int_equal(memfd_check(fd, 4096, true, 0, &size, NULL), -EPERM); /* no seals */
	assert_int_equal(size, 4096);
	assert_int_equal(memfd_seal(fd, F_SEAL_SHRINK | F_SEAL_WRITE), 0);
	assert_int_equal(memfd_check(fd, 4096, true, 0, NULL, NULL), -EPERM); /* can grow */
	assert_int_equal(memfd_seal(fd, F_SEAL_GROW), 0);
	assert_int_equal(memfd_check(fd, 4096, true, 0, NULL, NULL), 0);
	assert_int_equal(memfd_check(fd, 1000, false, 0, NULL, NULL), 0);
	assert_int_equal(memfd_check(fd, 1000, true, 0, NULL, NULL), -EBADF);
	assert_int_equal(memfd_check(fd, 8192, false, 0, NULL, NULL), -EBADF);
	close(fd);
	assert_int_equal(pipe(pipefd), 0);
	assert_int_equal(memfd_check(pipefd[0], 0, false, 0, NULL, NULL), -EBADF);
	close(pipefd[0]);
	close(pipefd[1]);
	assert_int_equal(memfd_check(-1, 0, false, 0, NULL, NULL), -EBADF);
}

FIXTURE_MAIN(F,
	cmocka_unit_test(sealed_snapshot),
	cmocka_unit_test(mapped_then_sealed),
	cmocka_unit_test(check_refuses),
)
