// SPDX-License-Identifier: MIT
/* bench_files.c - the disk baselines and measurements the load and serve
 * benchmarks share. */
#include "bench_files.h"

#include <errno.h>
#include <fcntl.h>
#include <liburing.h>
#include <sched.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bench_util.h"
#include "progress.h"

/* CPU time of this process, all threads, user + system. */
double cpu_now(void)
{
	struct rusage ru;

	getrusage(RUSAGE_SELF, &ru);
	return (double)ru.ru_utime.tv_sec + ru.ru_utime.tv_usec / 1e6 +
	       (double)ru.ru_stime.tv_sec + ru.ru_stime.tv_usec / 1e6;
}

int drop_cache(const struct files *f)
{
	for (size_t i = 0; i < f->n; i++) {
		int fd = open(f->path[i], O_RDONLY | O_CLOEXEC);
		if (fd < 0)
			return -errno;
		/* Dirty pages (a model just written) are not dropped: flush first. */
		fdatasync(fd);
		posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
		close(fd);
	}
	return 0;
}

/* Fraction of the files' pages in the page cache. */
double cached_fraction(const struct files *f)
{
	uint64_t in = 0, total = 0;
	long pg = sysconf(_SC_PAGESIZE);

	for (size_t i = 0; i < f->n; i++) {
		int fd = open(f->path[i], O_RDONLY | O_CLOEXEC);
		struct stat st;
		if (fd < 0 || fstat(fd, &st) < 0 || st.st_size == 0) {
			if (fd >= 0)
				close(fd);
			continue;
		}
		size_t pages = ((size_t)st.st_size + (size_t)pg - 1) / (size_t)pg;
		void *m = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_SHARED, fd, 0);
		unsigned char *v = malloc(pages);
		if (m != MAP_FAILED && v && mincore(m, (size_t)st.st_size, v) == 0)
			for (size_t p = 0; p < pages; p++)
				in += v[p] & 1;
		total += pages;
		free(v);
		if (m != MAP_FAILED)
			munmap(m, (size_t)st.st_size);
		close(fd);
	}
	return total ? (double)in / (double)total : 0;
}

/* Baseline 1: read every byte of every file with O_DIRECT through io_uring,
 * qd reads of bs bytes in flight, round-robin over up to `streams` files at
 * once as the loader does, into registered buffers that are each in at most
 * one read at a time; nothing placed, nothing hashed. Returns seconds or -1. */
double raw_odirect(const struct files *f, unsigned qd, size_t bs, unsigned streams)
{
	struct io_uring ring;
	uint8_t *bufs = aligned_alloc(4096, (size_t)qd * bs);
	uint64_t *next = calloc(f->n, sizeof(uint64_t)), *size = calloc(f->n, sizeof(uint64_t));
	unsigned *slots = calloc(qd, sizeof(unsigned)), nfree = 0;
	struct iovec *iov = calloc(qd, sizeof(*iov));
	int *fds = calloc(f->n, sizeof(int));
	size_t rr = 0, inflight = 0;
	bool ring_ok = false, fixed;
	double t0, t = -1;

	if (!bufs || !fds || !next || !size || !slots || !iov ||
	    io_uring_queue_init(qd, &ring, 0) < 0)
		goto out;
	ring_ok = true;
	memset(bufs, 0, (size_t)qd * bs); /* fault the buffers in before timing */
	for (unsigned k = 0; k < qd; k++) {
		iov[k] = (struct iovec){ bufs + (size_t)k * bs, bs };
		slots[nfree++] = k;
	}
	/* Registered, as the loader's are: no page pinning per read. */
	fixed = io_uring_register_buffers(&ring, iov, qd) == 0;
	for (size_t i = 0; i < f->n; i++) {
		struct stat st;
		fds[i] = open(f->path[i], O_RDONLY | O_DIRECT | O_CLOEXEC);
		size[i] = fds[i] >= 0 && fstat(fds[i], &st) == 0 ? (uint64_t)st.st_size : 0;
	}
	t0 = mono_now();
	for (;;) {
		while (nfree) {
			/* The next file with bytes left among the first `streams` such. */
			size_t i = f->n, seen = 0;
			for (size_t k = 0; k < f->n && seen < streams; k++) {
				size_t c = (rr + k) % f->n;
				if (next[c] >= size[c])
					continue;
				seen++;
				i = c;
				rr = c + 1;
				break;
			}
			if (i == f->n)
				break;
			unsigned s = slots[--nfree];
			struct io_uring_sqe *sqe = io_uring_get_sqe(&ring);
			if (fixed)
				io_uring_prep_read_fixed(sqe, fds[i], iov[s].iov_base, (unsigned)bs, next[i], (int)s);
			else
				io_uring_prep_read(sqe, fds[i], iov[s].iov_base, (unsigned)bs, next[i]);
			io_uring_sqe_set_data64(sqe, s);
			next[i] += bs;
			inflight++;
		}
		if (!inflight)
			break;
		struct io_uring_cqe *cqe;
		io_uring_submit_and_wait(&ring, 1);
		while (io_uring_peek_cqe(&ring, &cqe) == 0) {
			slots[nfree++] = (unsigned)io_uring_cqe_get_data64(cqe);
			io_uring_cqe_seen(&ring, cqe);
			inflight--;
		}
	}
	t = mono_now() - t0;
	for (size_t i = 0; i < f->n; i++)
		if (fds[i] >= 0)
			close(fds[i]);
out:
	if (ring_ok)
		io_uring_queue_exit(&ring);
	free(fds);
	free(next);
	free(size);
	free(slots);
	free(iov);
	free(bufs);
	return t;
}

/* Baseline 2: a plain read() loop over each file, bs bytes at a time. */
double buffered_read(const struct files *f, size_t bs)
{
	uint8_t *buf = malloc(bs);
	double t0 = mono_now();

	for (size_t i = 0; buf && i < f->n; i++) {
		int fd = open(f->path[i], O_RDONLY | O_CLOEXEC);
		while (fd >= 0 && read(fd, buf, bs) > 0)
			;
		if (fd >= 0)
			close(fd);
	}
	free(buf);
	return mono_now() - t0;
}

int model_files(const char *path, const struct load_opts *lo, struct files *f)
{
	struct model *m;
	struct errinfo e;

	if (model_open("bench", path, lo ? &lo->model : NULL, &m, &e) < 0) {
		fprintf(stderr, "wsrv-bench load: %s\n", e.msg);
		return -EINVAL;
	}
	f->n = m->nfiles;
	f->tensor_bytes = m->data_bytes;
	if (m->held)
		f->held = *m->held;
	f->path = calloc(m->nfiles, sizeof(char *));
	for (size_t i = 0; f->path && i < m->nfiles; i++) {
		f->path[i] = strdup(m->files[i]->path);
		f->bytes += m->files[i]->file_size;
	}
	model_free(m);
	return f->path ? 0 : -ENOMEM;
}

void files_free(struct files *f)
{
	for (size_t i = 0; f->path && i < f->n; i++)
		free(f->path[i]);
	free(f->path);
	f->path = NULL;
}

double median(double *v, int n)
{
	qsort(v, (size_t)n, sizeof(*v), cmp_double);
	return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

pid_t burner_start(void)
{
	long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
	pid_t pid = fork();

	if (pid < 0)
		return -errno;
	if (pid == 0) {
		cpu_set_t set;
		volatile unsigned long n = 0;

		prctl(PR_SET_PDEATHSIG, SIGKILL);
		CPU_ZERO(&set);
		CPU_SET(ncpu > 1 ? (int)ncpu - 1 : 0, &set);
		sched_setaffinity(0, sizeof(set), &set);
		for (;;)
			n++;
	}
	return pid;
}

void burner_stop(pid_t pid)
{
	if (pid <= 0)
		return;
	kill(pid, SIGKILL);
	waitpid(pid, NULL, 0);
}

/* Waits until memory freed by the step before has gone back to the host.
 * On a VM with free page reporting (as here: page_reporting's min_free_ms
 * is 0), freed memory returns to the hypervisor at once, and the next first
 * touch of it costs the guest up to 1 CPU-second per GB; memory freed a
 * moment ago may not have gone yet and is cheap. Both the load and the
 * fresh-memory fill are measured after this pause, so they start from the same state:
 * the state of a server started on a machine that was idle. */
int files_touch_all(const struct files *f, unsigned *sum)
{
	for (size_t i = 0; i < f->n; i++) {
		int fd = open(f->path[i], O_RDONLY | O_CLOEXEC);
		struct stat st;
		void *p = MAP_FAILED;
		if (fd >= 0 && fstat(fd, &st) == 0 && st.st_size > 0)
			p = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_SHARED, fd, 0);
		if (fd >= 0)
			close(fd);
		if (p == MAP_FAILED)
			return -1;
		*sum += touch_pages(p, (uint64_t)st.st_size);
		munmap(p, (size_t)st.st_size);
	}
	return 0;
}

void load_settle(void)
{
	usleep(1500 * 1000);
}
