// SPDX-License-Identifier: MIT
/* test_hugepages.c - an arena on 2 MiB huge pages: created, loaded, sealed
 * and placed like any other. Exits 77 (SKIP) when too few huge pages are
 * to be had: echo 16 > /proc/sys/vm/nr_hugepages (or nr_overcommit_hugepages,
 * for surplus pages) to run it. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "helpers.h"
#include "arena_struct.h"
#include "model_load.h"

#define NEED_PAGES 8

static int fds_before;

static void arena_on_huge_pages(void **s)
{
	struct arena_opts o = { .hugepages = HUGEPAGES_ON, .lock = geteuid() != 0 ? LOCK_OFF : LOCK_ON };
	uint64_t size = 3 << 20, counts[NUMA_MAX_NODES];
	static uint8_t fill[3 << 20];
	struct arena *a;
	struct errinfo e;
	void *p;

	if (arena_create("huge", 1, &size, &o, &a, &e) < 0 || arena_populate(a, &e) < 0)
		fail_msg("%s", e.msg);
	assert_true(arena_hugetlb(a));
	assert_int_equal(a->page_size, 2 << 20);
	assert_int_equal(a->seg[0].size, 4 << 20);
	memset(fill, 0x5A, sizeof(fill));
	assert_int_equal(arena_write(a, 0, 0, fill, sizeof(fill), &e), 0);
	assert_int_equal(arena_seal(a, &e), 0);
	p = mmap(NULL, 2 << 20, PROT_READ | PROT_WRITE, MAP_SHARED, a->seg[0].fd, 0);
	assert_true(p == MAP_FAILED);
	assert_int_equal(arena_placement(a, counts), 2);
	assert_int_equal(counts[0] + counts[1], 2);
	assert_int_equal(arena_ptr(a, 0, (3 << 20) - 1)[0], 0x5A);
	arena_free(a);
}

static void load_onto_huge_pages(void **s)
{
	char *d = test_tmpdir("huge");
	struct load_opts o = { 0 };
	struct loaded_model *lm;
	struct errinfo e;

	o.arena.hugepages = HUGEPAGES_ON;
	o.arena.lock = geteuid() != 0 ? LOCK_OFF : LOCK_ON;
	assert_int_equal(make_model(d, "tiny", 4 << 20, 4, 2, 3), 0);
	if (model_load("m", d, &o, &lm, &e) < 0)
		fail_msg("%s", e.msg);
	assert_int_equal(lm->arena->page_size, 2 << 20);
	for (size_t i = 0; i < lm->model->ntensors; i++) {
		const struct model_tensor *t = &lm->model->tensors[i];
		uint8_t *want = malloc(t->size + 1);
		int fd = open(lm->model->files[t->file]->path, O_RDONLY | O_CLOEXEC);
		assert_int_equal(pread(fd, want, t->size, (off_t)t->file_off), (ssize_t)t->size);
		close(fd);
		assert_memory_equal(arena_ptr(lm->arena, t->segment, t->offset), want, t->size);
		free(want);
	}
	loaded_model_free(lm);
	rm_rf(d);
	free(d);
}

static int hugepages_setup(void **s) { fds_before = count_fds(); return 0; }
static int hugepages_teardown(void **s) { return fd_leak_check(fds_before); }

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(arena_on_huge_pages),
		cmocka_unit_test(load_onto_huge_pages),
	};

	if (arena_free_huge_pages() < NEED_PAGES) {
		fprintf(stderr, "SKIP: %ld 2 MiB huge pages to be had, %d needed (echo 16 > "
				"/proc/sys/vm/nr_hugepages, or nr_overcommit_hugepages)\n",
			arena_free_huge_pages(), NEED_PAGES);
		return 77;
	}
	return test_group_run(tests, hugepages_setup, hugepages_teardown);
}
