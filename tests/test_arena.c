// SPDX-License-Identifier: MIT
/* test_arena.c - memfd segments: seals refuse every write, placement is read
 * back with move_pages, the NUMA choice on synthetic multi-node machines,
 * clear errors for missing huge pages and a low RLIMIT_MEMLOCK, and 2 MiB
 * folios without a huge-page pool. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <linux/capability.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <sys/stat.h>
#include <unistd.h>

#include "arena.h"
#include "arena_struct.h"
#include "arena_folio.h"
#include "arena_sweep.h"
#include "folio_probe.h"
#include "proc_mem.h"
#include "fd_check.h"
#include "fixture.h"
#include "hugemap.h"

static struct fixture F = { .tag = "arena" };

#if defined(__SANITIZE_ADDRESS__)
#define UNDER_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define UNDER_ASAN 1
#endif
#endif
#ifndef UNDER_ASAN
#define UNDER_ASAN 0
#endif

/* Sampling where pages lie leaves none of them in this process's page
 * tables: each sample faulted in 64 KiB, and a server kept 64 MiB of a
 * large model resident in its own mapping (wsrvctl status). */
static void placement_maps_nothing(void **s)
{
	struct arena_opts o = { .lock = LOCK_OFF, .hugepages = HUGEPAGES_OFF };
	uint64_t size = 16u << 20, counts[NUMA_MAX_NODES], rss = 0;
	static uint8_t buf[1u << 20];
	struct arena *a;
	struct errinfo e;

	(void)s;
	memset(buf, 7, sizeof(buf));
	assert_int_equal(arena_create("placement-rss", 1, &size, &o, &a, &e), 0);
	for (uint64_t off = 0; off < size; off += sizeof(buf))
		assert_int_equal(arena_write(a, 0, off, buf, sizeof(buf), &e), 0);
	assert_int_equal(arena_seal(a, &e), 0);
	assert_int_equal(arena_placement(a, counts), 1024);
	mapping_mem(getpid(), "wsrv:placement-rss:", NULL, &rss);
	assert_true(rss < (64u << 10));
	arena_free(a);
}

static struct arena *make(uint64_t size, const struct arena_opts *o)
{
	struct arena *a = NULL;
	struct errinfo e;

	if (arena_create("test", 1, &size, o, &a, &e) < 0 || arena_populate(a, &e) < 0)
		fail_msg("%s", e.msg);
	return a;
}

static void seals_refuse_writes(void **s)
{
	struct arena_opts o = { .lock = geteuid() != 0 ? LOCK_OFF : LOCK_ON, .hugepages = HUGEPAGES_OFF };
	struct arena *a = make(1 << 20, &o);
	int fd, rw, seals;
	static uint8_t ab[1 << 20];
	struct errinfo e;
	char path[64];
	void *p;

	memset(ab, 0xAB, sizeof(ab));
	assert_int_equal(arena_write(a, 0, 0, ab, sizeof(ab), &e), 0);
	assert_int_equal(arena_seal(a, &e), 0);
	/* What clients get: a read-only description of a 0400 file (issue
	 * 48 item 2: a writable one let them fill holes with fallocate). */
	fd = a->seg[0].fd;
	assert_int_equal(fcntl(fd, F_GETFL) & O_ACCMODE, O_RDONLY);
	assert_int_equal(posix_fallocate(fd, 0, 2 << 20), EBADF);
	snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
	rw = open(path, O_RDWR | O_CLOEXEC);
	if (rw < 0) { /* not root: the mode refuses; nothing more to try */
		assert_int_equal(errno, EACCES);
		arena_free(a);
		return;
	}
	/* Root reopens it writable: the seals still refuse. */
	fd = rw;
	seals = fcntl(fd, F_GET_SEALS);
	assert_true(seals & F_SEAL_SHRINK);
	assert_true(seals & F_SEAL_GROW);
	assert_true(seals & (F_SEAL_WRITE | F_SEAL_FUTURE_WRITE));
	assert_true(seals & F_SEAL_SEAL);
	/* A writable shared mapping is refused. */
	p = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	assert_true(p == MAP_FAILED);
	assert_int_equal(errno, EPERM);
	/* write() is refused. */
	assert_int_equal(pwrite(fd, "x", 1, 0), -1);
	assert_int_equal(errno, EPERM);
	/* So are resizing and unsealing. */
	assert_int_equal(ftruncate(fd, 2 << 20), -1);
	assert_int_equal(ftruncate(fd, 4096), -1);
	assert_int_equal(fcntl(fd, F_ADD_SEALS, F_SEAL_WRITE), -1);
	/* A read-only mapping cannot be made writable later. */
	p = mmap(NULL, 4096, PROT_READ, MAP_SHARED, fd, 0);
	assert_true(p != MAP_FAILED);
	assert_int_equal(((uint8_t *)p)[100], 0xAB);
	assert_int_equal(mprotect(p, 4096, PROT_READ | PROT_WRITE), -1);
	munmap(p, 4096);
	/* The bytes are still what was loaded. */
	assert_int_equal(arena_ptr(a, 0, 4095)[0], 0xAB);
	close(rw);
	arena_free(a);
}

static void placement_read_back(void **s)
{
	struct arena_opts o = { .lock = geteuid() != 0 ? LOCK_OFF : LOCK_ON, .numa = NUMA_NODE, .numa_node = 0,
				 .hugepages = HUGEPAGES_OFF };
	uint64_t counts[NUMA_MAX_NODES];
	struct arena *a = make(8 << 20, &o);
	int n = arena_placement(a, counts);

	assert_int_equal(n, 1024);          /* 2048 pages, 1024 sampled */
	assert_int_equal(counts[0], 1024); /* bound to node 0: every page there */
	assert_string_equal(a->numa.desc, "node 0");
	arena_free(a);
	o.numa_node = 7;
	struct errinfo e;
	uint64_t size = 4096;
	assert_int_equal(arena_create("test", 1, &size, &o, &a, &e), -EINVAL);
	assert_non_null(strstr(e.msg, "no such NUMA node"));
}

static void choose(const char *synthetic, enum numa_mode mode, int node,
		   struct numa_choice *c, int want)
{
	hwloc_topology_t t;
	struct errinfo e;

	assert_int_equal(hwloc_topology_init(&t), 0);
	assert_int_equal(hwloc_topology_set_synthetic(t, synthetic), 0);
	assert_int_equal(hwloc_topology_load(t), 0);
	assert_int_equal(numa_choose(t, mode, node, c, &e), want);
	hwloc_topology_destroy(t);
}

static void numa_choice_synthetic(void **s)
{
	struct numa_choice c;

	choose("pack:2 numa:1 core:2 pu:1", NUMA_AUTO, 0, &c, 0);
	assert_int_equal(c.mode, NUMA_INTERLEAVE);
	assert_int_equal(c.nodemask, 0x3);
	assert_string_equal(c.desc, "interleave over nodes 0,1");
	choose("pack:4 numa:1 core:1 pu:1", NUMA_NODE, 2, &c, 0);
	assert_int_equal(c.mode, NUMA_NODE);
	assert_int_equal(c.nodemask, 0x4);
	choose("pack:2 numa:1 core:1 pu:1", NUMA_NODE, 3, &c, -EINVAL);
	choose("pack:1 numa:1 core:2 pu:1", NUMA_AUTO, 0, &c, 0);
	assert_int_equal(c.mode, NUMA_NODE);
	assert_int_equal(c.nodemask, 0x1);
	choose("pack:1 numa:1 core:2 pu:1", NUMA_INTERLEAVE, 0, &c, 0);
	assert_int_equal(c.mode, NUMA_INTERLEAVE);
}

static void hugepages_too_few(void **s)
{
	struct arena_opts o = { .lock = LOCK_OFF, .hugepages = HUGEPAGES_ON };
	long freep = arena_free_huge_pages();
	uint64_t size = (uint64_t)((freep < 0 ? 0 : freep) + 1) * (2 << 20);
	struct arena *a = NULL;
	struct errinfo e;

	assert_int_equal(arena_create("test", 1, &size, &o, &a, &e), -ENOMEM);
	assert_non_null(strstr(e.msg, "--hugepages on"));
	assert_non_null(strstr(e.msg, "nr_hugepages"));
	/* Issue 79 item 4: the advice was "echo N > ...": a command with a
	 * placeholder. It names the number. */
	char want[96];
	snprintf(want, sizeof(want), "sysctl -w vm.nr_overcommit_hugepages=%ld,", (freep < 0 ? 0 : freep) + 1);
	if (!strstr(e.msg, want))
		fail_msg("the advice: %s", e.msg);
	assert_null(a);
	o.hugepages = HUGEPAGES_AUTO;
	assert_int_equal(arena_create("test", 1, &size, &o, &a, &e), 0);
	assert_int_equal(a->page_size, 4096);
	/* No pool: 4 KiB pages, and 2 MiB folios where the kernel allows
	 * them once written (folios_by_collapse). */
	char why[96];
	assert_int_equal(a->folios != FOLIOS_NONE, arena_folio_possible(why, sizeof(why)));
	/* Issue 41: with folios to come, the note says so (it advised a
	 * restart with more huge pages while folios were being made). */
	assert_non_null(strstr(a->hugepage_note, a->folios != FOLIOS_NONE ? "2 MiB folios to come" : "4 KiB pages (auto"));
	arena_free(a);
}

/* Issue 22: --hugepages counted only the pool's free pages and refused an
 * empty pool where nr_overcommit_hugepages allowed surplus ones; pages
 * that other mappings reserved were counted as free. */
static void hugepages_surplus_counted(void **s)
{
	assert_int_equal(arena_huge_usable(0, 0, 0, 0), 0);
	assert_int_equal(arena_huge_usable(16, 0, 0, 0), 16);
	assert_int_equal(arena_huge_usable(16, 6, 0, 0), 10);
	assert_int_equal(arena_huge_usable(0, 0, 600, 0), 600);
	assert_int_equal(arena_huge_usable(0, 0, 600, 100), 500);
	assert_int_equal(arena_huge_usable(4, 2, 600, 600), 2);
	assert_int_equal(arena_huge_usable(-1, 0, 600, 0), -1);
}

/* In a child without CAP_IPC_LOCK and with a 64 KiB RLIMIT_MEMLOCK, locking
 * a 16 MiB arena fails with a sentence that names the limit, before anything
 * is written into it (at creation: the lock is taken on fault). */
static void memlock_limit_error(void **s)
{
	pid_t pid;
	int status;

#if UNDER_ASAN
	/* AddressSanitizer replaces mlock with a no-op; the normal build runs this. */
	skip();
#endif
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		struct __user_cap_header_struct h = { _LINUX_CAPABILITY_VERSION_3, 0 };
		struct __user_cap_data_struct d[2];
		struct rlimit rl = { 64 << 10, 64 << 10 };
		struct arena_opts o = { .hugepages = HUGEPAGES_OFF, .lock = LOCK_ON };
		uint64_t size = 16 << 20;
		struct arena *a = NULL;
		struct errinfo e;

		if (syscall(SYS_capget, &h, d) == 0) {
			d[0].effective &= ~(1u << CAP_IPC_LOCK);
			syscall(SYS_capset, &h, d);
		}
		setrlimit(RLIMIT_MEMLOCK, &rl);
		int r = arena_create("test", 1, &size, &o, &a, &e);
		arena_free(a);
		_exit(r < 0 && strstr(e.msg, "RLIMIT_MEMLOCK") && strstr(e.msg, "--lock off") ? 0 : 1);
	}
	assert_int_equal(waitpid(pid, &status, 0), pid);
	assert_true(WIFEXITED(status));
	assert_int_equal(WEXITSTATUS(status), 0);
}

static void several_segments(void **s)
{
	struct arena_opts o = { .lock = geteuid() != 0 ? LOCK_OFF : LOCK_ON, .hugepages = HUGEPAGES_OFF };
	uint64_t sizes[3] = { 5000, 0, 3 << 20 };
	char name[64] = "";
	struct arena *a;
	struct errinfo e;
	char link[64];

	assert_int_equal(arena_create("m", 3, sizes, &o, &a, &e), 0);
	assert_int_equal(arena_populate(a, &e), 0);
	assert_int_equal(a->seg[0].size, 8192);
	assert_int_equal(a->seg[1].size, 4096);
	assert_int_equal(arena_bytes(a), 8192 + 4096 + (3 << 20));
	/* Segments carry descriptive names. */
	snprintf(link, sizeof(link), "/proc/self/fd/%d", a->seg[2].fd);
	assert_true(readlink(link, name, sizeof(name) - 1) > 0);
	assert_non_null(strstr(name, "wsrv:m:2"));
	assert_int_equal(arena_seal(a, &e), 0);
	arena_free(a);
}

/* A segment that leaves parts out (a disk tier's routed experts): its
 * memfd is the rest, each run moved down by the holes before it; writes
 * into a hole are dropped, a write across a hole's edge refused, reads
 * and the seal see only the rest. */
static void holes_left_out(void **s)
{
	struct arena_opts o = { .lock = LOCK_OFF, .hugepages = HUGEPAGES_OFF };
	uint64_t size = 6 * 4096;
	struct arena_hole h[2] = { { 4096, 4096, 0 }, { 3 * 4096, 2 * 4096, 0 } };
	uint8_t page[4096], back[4096];
	struct arena *a;
	struct errinfo e;
	struct stat sb;

	(void)s;
	assert_int_equal(arena_create("holes", 1, &size, &o, &a, &e), 0);
	assert_int_equal(arena_compact(a, 0, h, 2, &e), 0);
	assert_int_equal(arena_seg_file_size(&a->seg[0]), 3 * 4096);
	assert_int_equal(a->seg[0].size, 6 * 4096);
	for (int k = 0; k < 6; k++) {
		memset(page, 'a' + k, sizeof(page));
		assert_int_equal(arena_write(a, 0, (uint64_t)k * 4096, page, sizeof(page), &e), 0);
	}
	assert_int_equal(arena_write(a, 0, 4096 - 8, page, 16, &e), -EINVAL);
	/* Pages 0, 2 and 5 are in the file, at 0, 1 and 2. */
	assert_int_equal(fstat(a->seg[0].fd, &sb), 0);
	assert_int_equal(sb.st_size, 3 * 4096);
	assert_int_equal(pread(a->seg[0].fd, back, 4096, 2 * 4096), 4096);
	assert_int_equal(back[0], 'f');
	assert_int_equal(arena_read(a, 0, 2 * 4096, back, 4096, &e), 0);
	assert_int_equal(back[4095], 'c');
	assert_int_equal(arena_read(a, 0, 4096, back, 4096, &e), -EIO);
	assert_int_equal(arena_seal(a, &e), 0);
	assert_int_equal(a->seg[0].ro[4096], 'c');
	arena_free(a);
}

/* Bytes of [p, p + len) mapped by PMDs, from /proc/self/smaps. */
static long pmd_mapped(const void *p, size_t len)
{
	FILE *f = fopen("/proc/self/smaps", "re");
	char line[256];
	unsigned long lo, hi;
	bool in = false;
	long kb = -1;

	assert_non_null(f);
	while (fgets(line, sizeof(line), f)) {
		if (sscanf(line, "%lx-%lx ", &lo, &hi) == 2)
			in = lo <= (unsigned long)p && (unsigned long)p + len <= hi;
		else if (in && sscanf(line, "ShmemPmdMapped: %ld kB", &kb) == 1)
			break;
	}
	fclose(f);
	return kb * 1024;
}

/* Issue 22: without a huge-page pool and with shmem_enabled `never`, each
 * whole 2 MiB chunk becomes one folio before it is written (by write, at
 * odd offsets and lengths, and by a fill mapping): the bytes are exact,
 * and a reader's 2 MiB-aligned mapping maps them by PMD (one fault, no
 * page table). A segment is a whole number of chunks, so its tail is a
 * folio too (it had 4 KiB pages that readers faulted one by one). */
static void folios_by_collapse(void **s)
{
	struct arena_opts o = { .lock = LOCK_OFF, .hugepages = HUGEPAGES_AUTO };
	uint64_t sizes[2] = { (8 << 20) + 12345, 4 << 20 };
	struct arena *a;
	struct errinfo e;
	char why[96];
	uint8_t *buf, *fill;

	if (arena_free_huge_pages() > 8 || !arena_folio_possible(why, sizeof(why))) {
		fprintf(stderr, "no 2 MiB folios to test here: %s\n", why);
		skip();
	}
	assert_non_null(buf = malloc(sizes[0]));
	for (uint64_t i = 0; i < sizes[0]; i++)
		buf[i] = (uint8_t)(i * 131 + (i >> 13));
	assert_int_equal(arena_create("fol", 2, sizes, &o, &a, &e), 0);
	assert_true(a->folios != FOLIOS_NONE);
	for (uint64_t off = 0, n; off < sizes[0]; off += n) {
		n = 777777 < sizes[0] - off ? 777777 : sizes[0] - off;
		assert_int_equal(arena_write(a, 0, off, buf + off, n, &e), 0);
	}
	assert_int_equal(arena_fill_map(a, 1, &fill, &e), 0);
	memset(fill, 0x5a, sizes[1]);
	assert_int_equal(arena_seal(a, &e), 0);
	assert_int_equal(a->seg[0].size, 10 << 20);
	assert_int_equal(a->folios_made, 7);
	assert_int_equal(a->folios_failed, 0);
	assert_non_null(strstr(a->hugepage_note, "7 of 7 chunks"));
	/* A reader's mapping, as libwsrv makes it. */
	const uint8_t *r = hugemap_shared(a->seg[0].fd, a->seg[0].size, PROT_READ);
	assert_true(r != MAP_FAILED);
	assert_int_equal((uintptr_t)r % HUGEMAP_ALIGN, 0);
	assert_memory_equal(r, buf, sizes[0]);
	for (uint64_t i = sizes[0]; i < a->seg[0].size; i++)
		assert_int_equal(r[i], 0);
	assert_int_equal(pmd_mapped(r, a->seg[0].size), 10 << 20);
	munmap((void *)r, a->seg[0].size);
	r = hugemap_shared(a->seg[1].fd, a->seg[1].size, PROT_READ);
	assert_true(r != MAP_FAILED);
	for (uint64_t i = 0; i < sizes[1]; i++)
		assert_int_equal(r[i], 0x5a);
	assert_int_equal(pmd_mapped(r, a->seg[1].size), 4 << 20);
	munmap((void *)r, a->seg[1].size);
	arena_free(a);
	free(buf);
}

/* How loads get their folios: as told, or as the probe found, the same
 * answer and sentence every time it is asked. */
static void folio_choice(void **s)
{
	char why[256], again[256];
	bool direct;

	(void)s;
	assert_true(folio_probe_direct(FOLIO_MODE_WRITE, why, sizeof(why)));
	assert_string_equal(why, "--folios write");
	assert_false(folio_probe_direct(FOLIO_MODE_AFTER, why, sizeof(why)));
	assert_string_equal(why, "--folios after");
	if (!arena_folio_possible(why, sizeof(why))) {
		fprintf(stderr, "no 2 MiB folios to probe here: %s\n", why);
		skip();
	}
	int fds = count_fds();
	direct = folio_probe_direct(FOLIO_MODE_AUTO, why, sizeof(why));
	assert_non_null(strstr(why, "4 KiB pages"));
	assert_int_equal(folio_probe_direct(FOLIO_MODE_AUTO, again, sizeof(again)), direct);
	assert_string_equal(again, why);
	assert_int_equal(count_fds(), fds); /* its memfds closed */
}

/* Issue 38 item 5: serving while loading, the load writes 4 KiB pages
 * (fresh 2 MiB folios cost ~3x the load on a host that takes free memory
 * back) and the sweep makes folios once the model is ready. A reader that
 * mapped the small pages reads the same bytes after, and a reader's new
 * mapping maps the folios by PMD; freeing the arena mid-sweep stops it. */
static void folios_after_the_load(void **s)
{
	struct arena_opts o = { .lock = LOCK_OFF, .hugepages = HUGEPAGES_AUTO };
	uint64_t sizes[1] = { (6 << 20) + 999 };
	struct arena *a;
	struct errinfo e;
	char why[96];
	uint8_t *buf;

	(void)s;
	if (arena_free_huge_pages() > 8 || !arena_folio_possible(why, sizeof(why))) {
		fprintf(stderr, "no 2 MiB folios to test here: %s\n", why);
		skip();
	}
	assert_non_null(buf = malloc(sizes[0]));
	for (uint64_t i = 0; i < sizes[0]; i++)
		buf[i] = (uint8_t)(i * 7 + (i >> 11));
	assert_int_equal(arena_create("late", 1, sizes, &o, &a, &e), 0);
	a->folios = FOLIOS_AFTER;
	assert_int_equal(arena_write(a, 0, 0, buf, sizes[0], &e), 0);
	assert_int_equal(arena_seal(a, &e), 0);
	assert_int_equal(a->folios_made, 0);
	assert_false(arena_folios_complete(a));
	assert_non_null(strstr(arena_pages_note(a), "to be made now"));
	const uint8_t *early = hugemap_shared(a->seg[0].fd, a->seg[0].size, PROT_READ);
	assert_true(early != MAP_FAILED);
	assert_memory_equal(early, buf, sizes[0]);
	assert_int_equal(pmd_mapped(early, a->seg[0].size), 0);
	assert_int_equal(arena_sweep_start(a, "late"), 0);
	assert_int_equal(arena_sweep_start(a, "late"), -EALREADY);
	arena_sweep_wait(a);
	assert_int_equal(a->folios_made, 4);
	assert_true(arena_folios_complete(a));
	assert_non_null(strstr(arena_pages_note(a), "after the load: 4 of 4 chunks"));
	assert_memory_equal(early, buf, sizes[0]);
	const uint8_t *late = hugemap_shared(a->seg[0].fd, a->seg[0].size, PROT_READ);
	assert_true(late != MAP_FAILED);
	assert_memory_equal(late, buf, sizes[0]);
	assert_int_equal(pmd_mapped(late, a->seg[0].size), 8 << 20);
	munmap((void *)late, a->seg[0].size);
	munmap((void *)early, a->seg[0].size);
	arena_free(a);
	/* Freed while it sweeps: stopped, joined, nothing left behind. */
	assert_int_equal(arena_create("late2", 1, sizes, &o, &a, &e), 0);
	a->folios = FOLIOS_AFTER;
	assert_int_equal(arena_write(a, 0, 0, buf, sizes[0], &e), 0);
	assert_int_equal(arena_seal(a, &e), 0);
	assert_int_equal(arena_sweep_start(a, "late2"), 0);
	arena_free(a);
	free(buf);
}

FIXTURE_MAIN(F,
	cmocka_unit_test(seals_refuse_writes),
	cmocka_unit_test(placement_read_back),
	cmocka_unit_test(placement_maps_nothing),
	cmocka_unit_test(numa_choice_synthetic),
	cmocka_unit_test(hugepages_too_few),
	cmocka_unit_test(hugepages_surplus_counted),
	cmocka_unit_test(memlock_limit_error),
	cmocka_unit_test(several_segments),
	cmocka_unit_test(holes_left_out),
	cmocka_unit_test(folios_by_collapse),
	cmocka_unit_test(folios_after_the_load),
	cmocka_unit_test(folio_choice),
)
