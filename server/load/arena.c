// SPDX-License-Identifier: MIT
/* arena.c - memfd segments: creation, placement, prefault, lock and seal. */
#include "arena.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <linux/memfd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "arena_folio.h"
#include "arena_struct.h"
#include "arena_sweep.h"
#include "fullio.h"
#include "hugemap.h"
#include "memfd_util.h"
#include "sorted.h"

#define HUGE_2M (2u << 20)
#define ARENA_POPULATE_CHUNK (64u << 20)
#define HUGE_SYSFS "/sys/kernel/mm/hugepages/hugepages-2048kB/"

#ifndef MADV_POPULATE_READ
#define MADV_POPULATE_READ 22
#endif
#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif

static uint64_t round_up(uint64_t v, uint64_t a)
{
	return (v + a - 1) / a * a;
}

static long huge_sysfs(const char *name)
{
	char path[128];
	FILE *f;
	long n = -1;

	snprintf(path, sizeof(path), HUGE_SYSFS "%s", name);
	if (!(f = fopen(path, "re")))
		return -1;
	if (fscanf(f, "%ld", &n) != 1)
		n = -1;
	fclose(f);
	return n;
}

long arena_huge_usable(long free_pages, long resv, long overcommit, long surplus)
{
	long n;

	if (free_pages < 0)
		return -1;
	n = free_pages - (resv > 0 ? resv : 0);
	if (overcommit > 0 && surplus >= 0 && overcommit > surplus)
		n += overcommit - surplus;
	return n > 0 ? n : 0;
}

long arena_free_huge_pages(void)
{
	return arena_huge_usable(huge_sysfs("free_hugepages"), huge_sysfs("resv_hugepages"),
				 huge_sysfs("nr_overcommit_hugepages"), huge_sysfs("surplus_hugepages"));
}

/* Decides the page size: huge pages when asked, or in auto mode when enough
 * 2 MiB pages are free for the whole arena. */
static int choose_pages(struct arena *a, const struct arena_opts *o, struct errinfo *e)
{
	long freep = arena_free_huge_pages();
	uint64_t need = 0;
	char why[96];

	for (uint32_t i = 0; i < a->nseg; i++)
		need += round_up(a->seg[i].size ? a->seg[i].size : 1, HUGE_2M) / HUGE_2M;
	a->page_size = 4096;
	if (o->hugepages == HUGEPAGES_OFF) {
		snprintf(a->hugepage_note, sizeof(a->hugepage_note), "4 KiB pages (--hugepages off)");
		return 0;
	}
	if (freep >= 0 && (uint64_t)freep >= need) {
		a->page_size = HUGE_2M;
		snprintf(a->hugepage_note, sizeof(a->hugepage_note),
			 "2 MiB huge pages (%" PRIu64 " used of %ld to be had)", need, freep);
		return 0;
	}
	if (o->hugepages == HUGEPAGES_ON)
		return err_set(e, -ENOMEM,
			       "--hugepages on: the arena needs %" PRIu64 " 2 MiB huge pages but %ld are to be had; allow "
			       "that many surplus ones (sysctl -w vm.nr_overcommit_hugepages=%" PRIu64 ", as root) or reserve "
			       "%" PRIu64 " more (vm.nr_hugepages)",
			       need, freep < 0 ? 0 : freep, need, need - (uint64_t)(freep < 0 ? 0 : freep));
	/* With folios, arena_folio_note replaces this once a chunk is made. */
	if (o->no_folios)
		snprintf(why, sizeof(why), "a disk tier reads into 4 KiB pages");
	else if ((a->folios = arena_folio_possible(why, sizeof(why)) ? FOLIOS_AT_WRITE : FOLIOS_NONE)) {
		snprintf(a->hugepage_note, sizeof(a->hugepage_note),
			 "2 MiB folios to come: each whole 2 MiB chunk is made one (MADV_COLLAPSE) once "
			 "its bytes are placed; 4 KiB pages until then (no huge-page pool: %" PRIu64
			 " 2 MiB huge pages needed, %ld to be had)", need, freep < 0 ? 0 : freep);
		return 0;
	}
	snprintf(a->hugepage_note, sizeof(a->hugepage_note),
		 "4 KiB pages (auto: %s; %" PRIu64 " 2 MiB huge pages needed, %ld to be had; for 2 MiB pages "
		 "allow them as surplus: sysctl -w vm.nr_overcommit_hugepages=%" PRIu64 " as root, then "
		 "restart; docs/operations.md, Huge pages)",
		 why, need, freep < 0 ? 0 : freep, need);
	return 0;
}

/* Swap configured on this machine, in KiB, from /proc/meminfo; -1 when
 * unknown (then it is assumed to exist). */
static long swap_total_kib(void)
{
	FILE *f = fopen("/proc/meminfo", "re");
	char line[128];
	long kib = -1;

	while (f && fgets(line, sizeof(line), f))
		if (sscanf(line, "SwapTotal: %ld kB", &kib) == 1)
			break;
	if (f)
		fclose(f);
	return kib;
}

static void choose_lock(struct arena *a, enum lock_mode mode)
{
	const char *why;

	if (mode == LOCK_ON) {
		a->locked = true;
		why = "locked (--lock on)";
	} else if (mode == LOCK_OFF) {
		why = "not locked (--lock off)";
	} else if (arena_hugetlb(a)) {
		why = "not locked (auto: huge pages are never swapped)";
	} else if (swap_total_kib() == 0) {
		why = "not locked (auto: no swap, so shared memory cannot be paged out)";
	} else {
		a->locked = true;
		why = "locked (auto: this machine has swap)";
	}
	snprintf(a->lock_note, sizeof(a->lock_note), "%s", why);
}

static int lock_error(uint64_t bytes, int err, struct errinfo *e)
{
	struct rlimit rl = { 0 };

	getrlimit(RLIMIT_MEMLOCK, &rl);
	return err_set(e, -err,
		       "cannot lock %" PRIu64 " bytes of weights in memory (%s): RLIMIT_MEMLOCK is %s%" PRIu64 " bytes; raise it (ulimit -l, LimitMEMLOCK= in the unit) or run with --lock off",
		       bytes, strerror(err), rl.rlim_cur == RLIM_INFINITY ? "unlimited, " : "",
		       rl.rlim_cur == RLIM_INFINITY ? 0 : (uint64_t)rl.rlim_cur);
}

/* Allocates, maps and locks [off, off+len) of a segment. fallocate puts the
 * pages in (zeroed, placed by the segment's shared NUMA policy) several times
 * faster than faulting them in one by one; MADV_POPULATE_WRITE then maps them
 * and mlock pins them. */
static int populate_range(struct arena *a, struct arena_seg *s, size_t off,
			  size_t len, struct errinfo *e)
{
	if (fallocate(s->fd, 0, (off_t)off, (off_t)len) < 0 && errno != EOPNOTSUPP)
		return err_set(e, -errno, "cannot allocate %zu bytes of shared memory%s: %s", len,
			       arena_hugetlb(a) ? " (huge pages)" : "", strerror(errno));
	if (madvise(s->rw + off, len, MADV_POPULATE_WRITE) < 0) {
		if (errno != EINVAL)
			return err_set(e, -errno, "cannot populate %zu bytes of shared memory: %s",
				       len, strerror(errno));
		for (size_t o = 0; o < len; o += a->page_size)
			((volatile uint8_t *)s->rw)[off + o] = 0;
	}
	if (a->locked && mlock(s->rw + off, len) < 0)
		return lock_error(s->size, errno, e);
	return 0;
}

int arena_populate_range(struct arena *a, uint32_t seg, uint64_t off, uint64_t len, struct errinfo *e)
{
	struct arena_seg *s = &a->seg[seg];
	uint64_t end = off + len > s->size ? s->size : off + len;

	if (arena_fills_by_write(a)) {
		/* 2 MiB folios ahead of the loader's writes (arena_folio.h). */
		for (; s->folio_tried && off < end; off += ARENA_POPULATE_CHUNK) {
			arena_folio_prepare(a, seg, off, end - off < ARENA_POPULATE_CHUNK ? end - off : ARENA_POPULATE_CHUNK);
			if (__atomic_load_n(&a->stop_populate, __ATOMIC_RELAXED))
				return -ECANCELED;
		}
		return 0;
	}
	off -= off % a->page_size;
	for (; off < end; off += ARENA_POPULATE_CHUNK) {
		size_t n = end - off < ARENA_POPULATE_CHUNK ? end - off : ARENA_POPULATE_CHUNK;
		int r;
		if (n % a->page_size && off + n < s->size)
			n += a->page_size - n % a->page_size;
		if ((r = populate_range(a, s, off, n, e)) < 0)
			return r;
		if (__atomic_load_n(&a->stop_populate, __ATOMIC_RELAXED))
			return -ECANCELED;
	}
	return 0;
}

int arena_populate(struct arena *a, struct errinfo *e)
{
	for (uint32_t i = 0; i < a->nseg; i++) {
		int r = arena_populate_range(a, i, 0, a->seg[i].size, e);
		if (r < 0)
			return r;
	}
	return 0;
}

/* The fd [off, off + len) of s is written to, and where in it (*at): its
 * own, or its split's (-EINVAL when none holds it all). */
static int split_fd(const struct arena_seg *s, uint64_t off, size_t len, uint64_t *at)
{
	*at = off;
	for (uint32_t i = 0; i < s->nsplit; i++)
		if (off >= s->split[i].off && off + len <= s->split[i].off + s->split[i].len) {
			*at = off - s->split[i].off;
			return s->split[i].fd;
		}
	return s->nsplit ? -EINVAL : s->fd;
}

static int map_for_write(struct arena *a, struct arena_seg *s, const char *label, struct errinfo *e);

/* Where [off, off + len) of s lies in its memfd (arena_compact): 1 and
 * *at; 0 inside a hole; -EINVAL across a hole's edge. */
static bool hole_ends_by(const void *key, const void *elem)
{
	const struct arena_hole *h = elem;

	return h->off + h->len <= *(const uint64_t *)key;
}

static int file_at(const struct arena_seg *s, uint64_t off, size_t len, uint64_t *at)
{
	/* the first hole that ends past off */
	uint32_t lo = (uint32_t)sorted_first(&off, s->holes, s->nholes, sizeof(*s->holes), hole_ends_by);
	uint64_t before = lo < s->nholes ? s->holes[lo].before : s->size - arena_seg_file_size(s);
	if (lo < s->nholes && off + len > s->holes[lo].off)
		return off >= s->holes[lo].off && off + len <= s->holes[lo].off + s->holes[lo].len ? 0 : -EINVAL;
	*at = off - before;
	return 1;
}

int arena_compact(struct arena *a, uint32_t seg, const struct arena_hole *holes, uint32_t n, struct errinfo *e)
{
	struct arena_seg *s = &a->seg[seg];
	uint64_t cut = 0;
	int r;

	if (!arena_fills_by_write(a) || s->sealed || s->rw || s->holes)
		return err_set(e, -EINVAL, "segment %u cannot leave parts out", seg);
	if (!(s->holes = calloc(n + 1, sizeof(*s->holes))))
		return err_set(e, -ENOMEM, "out of memory");
	for (uint32_t i = 0; i < n; i++) {
		s->holes[i] = (struct arena_hole){ holes[i].off, holes[i].len, cut };
		cut += holes[i].len;
	}
	s->nholes = n;
	s->file_size = s->size - cut;
	if (ftruncate(s->fd, (off_t)s->file_size) < 0)
		return err_set(e, -errno, "cannot cut segment %u to %zu bytes: %s", seg, s->file_size, strerror(errno));
	munmap((void *)s->ro, s->size);
	s->ro = NULL;
	if ((r = map_for_write(a, s, "a segment with parts left out", e)) < 0)
		return r;
	return numa_apply((void *)s->ro, s->file_size, &a->numa, e);
}

int arena_write(struct arena *a, uint32_t seg, uint64_t off, const void *src,
		size_t len, struct errinfo *e)
{
	struct arena_seg *s = &a->seg[seg];
	int r;

	if (!arena_fills_by_write(a)) {
		memcpy(s->rw + off, src, len);
		return 0;
	}
	uint64_t at = off;
	int fd = s->fd;
	if (s->nholes && (r = file_at(s, off, len, &at)) <= 0)
		return r == 0 ? 0 : err_set(e, r, "a write across a left-out part of segment %u", seg);
	if (s->folio_tried && arena_folios_now(a) != FOLIOS_AFTER)
		arena_folio_prepare(a, seg, off, len);
	if (s->nsplit)
		fd = split_fd(s, off, len, &at);
	if ((r = pwrite_full(fd, src, len, at)) < 0)
		return err_set(e, r, "cannot write %zu bytes into shared memory: %s", len,
			       r == -ENOSPC ? "no progress" : strerror(-r));
	return 0;
}

int arena_read(struct arena *a, uint32_t seg, uint64_t off, void *dst, size_t len,
	       struct errinfo *e)
{
	struct arena_seg *s = &a->seg[seg];
	int r;

	if (!arena_fills_by_write(a)) {
		memcpy(dst, s->rw + off, len);
		return 0;
	}
	uint64_t at = off;
	if (s->nholes && (r = file_at(s, off, len, &at)) <= 0)
		return err_set(e, -EIO, "a read of a left-out part of segment %u", seg);
	if ((r = pread_full(s->fd, dst, len, at)) < 0)
		return err_set(e, r == -ENODATA ? -EIO : r, "cannot read %zu bytes of shared memory: %s",
			       len, r == -ENODATA ? "end of the segment" : strerror(-r));
	return 0;
}

/* Filling by write: the only mapping is read-only from the start; locking
 * is on fault, so that nothing is allocated now but the limit is checked. */
static int map_for_write(struct arena *a, struct arena_seg *s, const char *label,
			 struct errinfo *e)
{
	size_t len = arena_seg_file_size(s);
	void *p = hugemap_shared(s->fd, len, PROT_READ);

	if (p == MAP_FAILED)
		return err_set(e, -errno, "%s: cannot map %zu bytes: %s", label, len, strerror(errno));
	s->ro = p;
	if (a->locked && mlock2(p, len, MLOCK_ONFAULT) < 0)
		return lock_error(len, errno, e);
	return 0;
}

static int map_for_copy(struct arena_seg *s, const char *label, struct errinfo *e)
{
	void *p = hugemap_shared(s->fd, s->size, PROT_READ | PROT_WRITE);

	if (p == MAP_FAILED)
		return err_set(e, -errno, "%s: cannot map %zu bytes: %s", label, s->size,
			       strerror(errno));
	s->rw = p;
	return 0;
}

static int create_seg(struct arena *a, const char *name, uint32_t i,
		      const struct arena_opts *o, struct errinfo *e)
{
	struct arena_seg *s = &a->seg[i];
	char label[240];
	int r;

	snprintf(label, sizeof(label), "wsrv:%s:%u", name, i);
	r = memfd_new(label, arena_hugetlb(a) ? MFD_HUGETLB | MFD_HUGE_2MB : 0, s->size);
	if (r < 0)
		return err_set(e, r, "%s: cannot make it %zu bytes: %s", label, s->size, strerror(-r));
	s->fd = r;
	r = arena_fills_by_write(a) ? map_for_write(a, s, label, e) : map_for_copy(s, label, e);
	if (r < 0)
		return r;
	r = numa_apply(s->rw ? s->rw : (void *)s->ro, s->size, &a->numa, e);
	if (r < 0)
		err_prefix(e, label);
	return r;
}

int arena_create(const char *name, uint32_t nseg, const uint64_t *sizes,
		 const struct arena_opts *o, struct arena **out,
		 struct errinfo *e)
{
	struct arena *a = calloc(1, sizeof(*a));
	int r;

	if (!a || !(a->seg = calloc(nseg ? nseg : 1, sizeof(*a->seg)))) {
		free(a);
		return err_set(e, -ENOMEM, "out of memory");
	}
	a->nseg = nseg;
	for (uint32_t i = 0; i < nseg; i++) {
		a->seg[i].fd = -1;
		a->seg[i].size = sizes[i];
	}
	r = numa_choose_here(o->numa, o->numa_node, &a->numa, e);
	if (r == 0)
		r = choose_pages(a, o, e);
	choose_lock(a, o->lock);
	for (uint32_t i = 0; r == 0 && i < nseg; i++) {
		/* A zero-byte segment still gets one page, so it can be mapped.
		 * With folios, a whole number of 2 MiB chunks: the tail is a
		 * folio too, not 4 KiB pages that readers fault one by one. */
		a->seg[i].size = round_up(sizes[i] ? sizes[i] : 1, a->folios != FOLIOS_NONE ? HUGE_2M : a->page_size);
		r = create_seg(a, name, i, o, e);
	}
	if (r == 0 && a->folios != FOLIOS_NONE && arena_folio_init(a) < 0)
		r = err_set(e, -ENOMEM, "out of memory");
	if (r < 0) {
		arena_free(a);
		return r;
	}
	*out = a;
	return 0;
}

/* Maps a segment's pages (already in the memfd) into its read-only
 * mapping, which locks them when it is locked on fault. */
static int map_in(struct arena_seg *s, struct errinfo *e)
{
	if (madvise((void *)s->ro, arena_seg_file_size(s), MADV_POPULATE_READ) < 0)
		return err_set(e, -errno, "cannot map and lock %zu bytes of weights: %s", arena_seg_file_size(s),
			       strerror(errno));
	return 0;
}

/* The segment's own mapping is kept (it holds the lock) and is read-only;
 * F_SEAL_FUTURE_WRITE then refuses every new writable mapping and every
 * write(), which is what readers rely on, and F_SEAL_SEAL fixes the set. */
static int seal_seg(struct arena *a, struct arena_seg *s, struct errinfo *e)
{
	int seals = (s->cuttable ? 0 : F_SEAL_SHRINK) | F_SEAL_GROW | F_SEAL_FUTURE_WRITE | F_SEAL_SEAL, r;

	if (s->sealed)
		return 0;
	if (s->fill && s->fill != s->rw)
		munmap(s->fill, s->size);
	s->fill = NULL;
	if (s->rw) {
		if (mprotect(s->rw, s->size, PROT_READ) < 0)
			return err_set(e, -errno, "cannot make a segment read-only: %s",
				       strerror(errno));
		s->ro = s->rw;
		s->rw = NULL;
	}
	/* Written pages are in the memfd but not in this mapping: map them, and
	 * so lock them (MLOCK_ONFAULT). Without the lock nothing needs them. */
	if (arena_fills_by_write(a) && a->locked && (r = map_in(s, e)) < 0)
		return r;
	if (arena_folios_now(a) != FOLIOS_AFTER)
		arena_folio_warm(s);
	if ((r = memfd_seal(s->fd, seals)) < 0)
		return err_set(e, r, "cannot seal a segment: %s", strerror(-r));
	/* Clients get the fd: a read-only description, so none can fill
	 * the memfd's holes (a tier's units) with fallocate. */
	if ((r = memfd_readers_only(&s->fd)) < 0)
		return err_set(e, r, "cannot reopen a segment read-only: %s", strerror(-r));
	s->sealed = true;
	return 0;
}

int arena_seal_segment(struct arena *a, uint32_t seg, struct errinfo *e)
{
	if (seg >= a->nseg)
		return err_set(e, -EINVAL, "no segment %u", seg);
	return seal_seg(a, &a->seg[seg], e);
}

int arena_fill_map(struct arena *a, uint32_t seg, uint8_t **out, struct errinfo *e)
{
	struct arena_seg *s = &a->seg[seg];
	void *p;

	if (a->sealed || seg >= a->nseg)
		return err_set(e, -EINVAL, "segment %u cannot be filled in place", seg);
	if (!s->fill && s->rw) {
		s->fill = s->rw;
	} else if (!s->fill) {
		p = hugemap_shared(s->fd, s->size, PROT_READ | PROT_WRITE);
		if (p == MAP_FAILED)
			return err_set(e, -errno, "cannot map segment %u for filling: %s", seg,
				       strerror(errno));
		s->fill = p;
		/* Filled in place, at any offset: every chunk first (unless the
		 * folios come after the fill, arena_sweep.h). */
		if (s->folio_tried && arena_folios_now(a) != FOLIOS_AFTER)
			arena_folio_prepare(a, seg, 0, s->size);
	}
	*out = s->fill;
	return 0;
}

int arena_seal(struct arena *a, struct errinfo *e)
{
	for (uint32_t i = 0; i < a->nseg; i++) {
		int r = seal_seg(a, &a->seg[i], e);
		if (r < 0)
			return r;
	}
	a->sealed = true;
	if (arena_folios_now(a) == FOLIOS_AFTER) { /* the sweep's note replaces it at its end (arena_sweep.h) */
		snprintf(a->hugepage_note, sizeof(a->hugepage_note),
			 "4 KiB pages while loading, 2 MiB folios (MADV_COLLAPSE) to be made now, at normal priority");
		return 0;
	}
	arena_folio_note(a);
	arena_folio_free(a);
	return 0;
}

static int check_adopted(int fd, uint64_t want, uint64_t *size, struct errinfo *e)
{
	int r = memfd_check(fd, want, false, 0, size, NULL);

	if (r == -EPERM)
		return err_set(e, -EBADF, "an adopted segment is not sealed against writes and resizing");
	if (r < 0)
		return err_set(e, -EBADF, "an adopted segment is not a memfd of at least %llu bytes",
			       (unsigned long long)want);
	return 0;
}

/* Maps in and so locks (MLOCK_ONFAULT) an adopted arena's pages, when it
 * is to be locked. */
static int lock_adopted(struct arena *a, struct errinfo *e)
{
	for (uint32_t i = 0; a->locked && i < a->nseg; i++) {
		struct arena_seg *s = &a->seg[i];
		int r;
		if (mlock2(s->ro, s->size, MLOCK_ONFAULT) < 0)
			return lock_error(s->size, errno, e);
		if ((r = map_in(s, e)) < 0)
			return r;
	}
	return 0;
}

/* An adopted arena's NUMA word: no policy of this server's placed it, so
 * the nodes its pages are on, sampled (arena_placement); on a host of one
 * node, that node, unsampled. */
static void adopted_placement(struct arena *a)
{
	uint64_t counts[NUMA_MAX_NODES];
	struct numa_choice only;
	char list[64] = "";
	size_t n = 0;
	int nodes = 0;

	if (numa_choose_here(NUMA_AUTO, -1, &only, NULL) == 0 && only.mode == NUMA_NODE) {
		snprintf(a->numa.desc, sizeof(a->numa.desc), "%s", only.desc);
		return;
	}
	if (arena_placement(a, counts) > 0)
		for (int i = 0; i < NUMA_MAX_NODES && n < sizeof(list); i++)
			if (counts[i]) {
				n += (size_t)snprintf(list + n, sizeof(list) - n, "%s%d", n ? "," : "", i);
				nodes++;
			}
	if (nodes)
		snprintf(a->numa.desc, sizeof(a->numa.desc), "node%s %s (where its pages were)", nodes > 1 ? "s" : "",
			 list);
	else
		snprintf(a->numa.desc, sizeof(a->numa.desc), "where its pages were");
}

int arena_adopt(uint32_t nseg, const int *fds, const uint64_t *sizes, uint64_t page_size,
		enum lock_mode lock, struct arena **out, struct errinfo *e)
{
	struct arena *a = calloc(1, sizeof(*a));
	int r = 0;

	if (!a || !(a->seg = calloc(nseg ? nseg : 1, sizeof(*a->seg)))) {
		free(a);
		return err_set(e, -ENOMEM, "out of memory");
	}
	a->nseg = nseg;
	a->page_size = page_size;
	a->sealed = true;
	choose_lock(a, lock);
	for (uint32_t i = 0; i < nseg; i++)
		a->seg[i].fd = -1;
	for (uint32_t i = 0; r == 0 && i < nseg; i++) {
		uint64_t size = 0;
		void *p;
		if ((r = check_adopted(fds[i], sizes[i], &size, e)) < 0)
			break;
		p = hugemap_shared(fds[i], size, PROT_READ);
		if (p == MAP_FAILED) {
			r = err_set(e, -errno, "cannot map an adopted segment: %s", strerror(errno));
			break;
		}
		a->seg[i].ro = p;
		a->seg[i].size = size;
	}
	if (r == 0)
		r = lock_adopted(a, e);
	if (r < 0) {
		arena_free(a); /* its fds are still -1: the caller's */
		return r;
	}
	/* An earlier wsrvd (or a publisher) may have handed writable
	 * descriptions: clients get read-only ones (seal_seg). */
	for (uint32_t i = 0; i < nseg; i++) {
		a->seg[i].fd = fds[i];
		(void)memfd_readers_only(&a->seg[i].fd);
	}
	adopted_placement(a);
	*out = a;
	return 0;
}

int arena_placement(const struct arena *a, uint64_t *counts)
{
	int total = 0;

	memset(counts, 0, NUMA_MAX_NODES * sizeof(*counts));
	for (uint32_t i = 0; i < a->nseg; i++) {
		/* Sampled through a mapping of its own, removed after: each
		 * sample faults in a whole fault-around block (64 KiB), which
		 * the server's mapping would keep (64 MiB resident and its page
		 * tables for 1024 samples of a large model). */
		void *p = mmap(NULL, a->seg[i].size, PROT_READ, MAP_SHARED, a->seg[i].fd, 0);
		int r;
		if (p == MAP_FAILED)
			return -errno;
		r = numa_sample(p, a->seg[i].size, a->page_size, 1024, counts);
		munmap(p, a->seg[i].size);
		if (r < 0)
			return r;
		total += r;
	}
	return total;
}

uint64_t arena_bytes(const struct arena *a)
{
	uint64_t n = 0;

	for (uint32_t i = 0; i < a->nseg; i++)
		n += a->seg[i].size;
	return n;
}

void arena_free(struct arena *a)
{
	if (!a)
		return;
	arena_sweep_stop(a);
	for (uint32_t i = 0; i < a->nseg; i++) {
		struct arena_seg *s = &a->seg[i];
		if (s->fill && s->fill != s->rw)
			munmap(s->fill, s->size);
		if (s->rw)
			munmap(s->rw, s->size);
		if (s->ro)
			munmap((void *)s->ro, arena_seg_file_size(s));
		if (s->fd >= 0)
			close(s->fd);
		free(s->holes);
	}
	arena_folio_free(a);
	free(a->seg);
	free(a);
}
