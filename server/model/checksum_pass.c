// SPDX-License-Identifier: MIT
/* checksum_pass.c - every tensor's checksum, on several threads
 * (checksum_pass.h). */
#include "checksum_pass.h"

#include <pthread.h>
#include <sched.h>
#include <xxhash.h>


#define PASS_THREADS 8

struct pass_run {
	const struct arena *a;
	const struct model *m;
	uint64_t *sums;
	size_t first, end;          /* tensors [first, end) */
};

static void *run_main(void *arg)
{
	const struct pass_run *r = arg;

	for (size_t i = r->first; i < r->end; i++) {
		const struct model_tensor *t = &r->m->tensors[i];
		const uint8_t *p = arena_ptr(r->a, t->segment, t->offset + t->part_off);
		r->sums[i] = XXH3_64bits(p, t->part_len);
	}
	return NULL;
}

static unsigned pass_threads(size_t ntensors)
{
	cpu_set_t cs;
	unsigned n = 1;

	if (sched_getaffinity(0, sizeof(cs), &cs) == 0)
		n = (unsigned)CPU_COUNT(&cs);
	if (n > PASS_THREADS)
		n = PASS_THREADS;
	if (n > ntensors)
		n = ntensors ? (unsigned)ntensors : 1;
	return n ? n : 1;
}

/* Cuts the tensors into k runs of about equal bytes, in order. */
static void cut_runs(const struct model *m, struct pass_run *run, unsigned k)
{
	uint64_t total = 0, acc = 0;
	size_t i = 0;

	for (size_t j = 0; j < m->ntensors; j++)
		total += m->tensors[j].part_len;
	for (unsigned r = 0; r < k; r++) {
		uint64_t want = total / k * (r + 1);
		run[r].first = i;
		while (i < m->ntensors && (r == k - 1 || acc < want))
			acc += m->tensors[i++].part_len;
		run[r].end = i;
	}
}

void checksum_pass(const struct arena *a, const struct model *m, uint64_t *sums)
{
	struct pass_run run[PASS_THREADS];
	pthread_t th[PASS_THREADS];
	bool started[PASS_THREADS] = { false };
	unsigned k = pass_threads(m->ntensors);

	for (unsigned r = 0; r < k; r++)
		run[r] = (struct pass_run){ a, m, sums, 0, 0 };
	cut_runs(m, run, k);
	for (unsigned r = 1; r < k; r++)
		started[r] = pthread_create(&th[r], NULL, run_main, &run[r]) == 0;
	run_main(&run[0]);
	for (unsigned r = 1; r < k; r++) {
		if (started[r])
			pthread_join(th[r], NULL);
		else
			run_main(&run[r]);
	}
}
