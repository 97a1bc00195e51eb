// SPDX-License-Identifier: MIT
/* folio_probe.c - fresh 2 MiB folios against 4 KiB pages, measured once
 * (folio_probe.h). */
#include "folio_probe.h"

#include <dirent.h>
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "arena_folio.h"
#include "fullio.h"
#include "hugemap.h"
#include "memfd_util.h"

#define PROBE_CHUNKS 8
#define VIRTIO_DEVICES "/sys/bus/virtio/devices"
#define VIRTIO_ID_BALLOON 5
#define VIRTIO_BALLOON_F_REPORTING 5 /* the feature bit: free page reporting */

static struct {
	pthread_once_t once;
	bool direct;
	char why[256];
} probe = { .once = PTHREAD_ONCE_INIT };

static double thread_cpu(void)
{
	struct timespec t;

	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
	return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* The CPU time of writing src (PROBE_CHUNKS chunks) into a fresh memfd,
 * each chunk first made a folio when folios: 0 on failure (*r why). */
static double one_round(const uint8_t *src, bool folios, int *r)
{
	size_t size = (size_t)PROBE_CHUNKS * HUGEMAP_ALIGN;
	int fd = memfd_new("wsrv:folio-probe", 0, size);
	const uint8_t *map = NULL;
	double t0, t = 0;

	*r = fd < 0 ? fd : 0;
	if (fd >= 0 && folios && (map = hugemap_shared(fd, size, PROT_READ)) == MAP_FAILED) {
		*r = -errno;
		map = NULL;
	}
	t0 = thread_cpu();
	for (size_t c = 0; *r == 0 && c < PROBE_CHUNKS; c++) {
		uint64_t off = (uint64_t)c * HUGEMAP_ALIGN;
		if (folios)
			*r = arena_folio_collapse(fd, map, off);
		if (*r == 0)
			*r = pwrite_full(fd, src + off, HUGEMAP_ALIGN, off);
	}
	t = thread_cpu() - t0;
	if (map)
		munmap((void *)map, size);
	if (fd >= 0)
		close(fd);
	return *r == 0 ? t : 0;
}

/* Whether this machine is a VM whose balloon reports free pages to the
 * hypervisor (virtio-balloon with VIRTIO_BALLOON_F_REPORTING): freed 2 MiB
 * blocks go back to the host, and a load takes far more fresh ones than a
 * probe sees (it gets the few not handed back yet). */
static bool free_page_reporting(void)
{
	DIR *d = opendir(VIRTIO_DEVICES);
	struct dirent *de;
	bool on = false;

	while (d && !on && (de = readdir(d))) {
		char path[512], id[32] = "", feat[160] = "";
		FILE *f;
		if (de->d_name[0] == '.')
			continue;
		snprintf(path, sizeof(path), VIRTIO_DEVICES "/%s/device", de->d_name);
		if ((f = fopen(path, "re"))) {
			if (!fgets(id, sizeof(id), f))
				id[0] = 0;
			fclose(f);
		}
		if (strtol(id, NULL, 0) != VIRTIO_ID_BALLOON)
			continue;
		snprintf(path, sizeof(path), VIRTIO_DEVICES "/%s/features", de->d_name);
		if ((f = fopen(path, "re"))) {
			if (fgets(feat, sizeof(feat), f) && strlen(feat) > VIRTIO_BALLOON_F_REPORTING)
				on = feat[VIRTIO_BALLOON_F_REPORTING] == '1';
			fclose(f);
		}
	}
	if (d)
		closedir(d);
	return on;
}

static void run_probe(void)
{
	size_t size = (size_t)PROBE_CHUNKS * HUGEMAP_ALIGN;
	uint8_t *src;
	double f = 0, s = 0;
	int r = 0;

	if (free_page_reporting()) { /* nothing to measure: the probe would be wrong */
		snprintf(probe.why, sizeof(probe.why),
			 "this VM hands free memory back to its host (virtio-balloon free page reporting): "
			 "each fresh 2 MiB block costs a fault in the host, so loads write 4 KiB pages first");
		return;
	}
	if (!(src = malloc(size)))
		r = -ENOMEM;
	else
		memset(src, 0x5a, size);
	/* Folios first: the 4 KiB round frees pages a folio round after it
	 * could take back warm. */
	for (int k = 0; r == 0 && k < 2; k++) {
		double tf = one_round(src, true, &r);
		double ts = r == 0 ? one_round(src, false, &r) : 0;
		f = k == 0 || tf < f ? tf : f;
		s = k == 0 || ts < s ? ts : s;
	}
	free(src);
	if (r < 0 || s <= 0) {
		snprintf(probe.why, sizeof(probe.why), "the probe could not make a folio (%s): 4 KiB pages first",
			 strerror(r < 0 ? -r : EIO));
		return;
	}
	probe.direct = f / s <= FOLIO_PROBE_MAX_RATIO;
	snprintf(probe.why, sizeof(probe.why),
		 "a fresh 2 MiB folio and its write took %.2fx the CPU time of the same bytes in 4 KiB pages "
		 "(%.0f vs %.0f us per MiB; at most %.1fx writes into folios)",
		 f / s, f / PROBE_CHUNKS / 2 * 1e6, s / PROBE_CHUNKS / 2 * 1e6, FOLIO_PROBE_MAX_RATIO);
}

bool folio_probe_direct(enum folio_mode mode, char *why, size_t len)
{
	if (mode != FOLIO_MODE_AUTO) {
		snprintf(why, len, "--folios %s", mode == FOLIO_MODE_WRITE ? "write" : "after");
		return mode == FOLIO_MODE_WRITE;
	}
	pthread_once(&probe.once, run_probe);
	snprintf(why, len, "%s", probe.why);
	return probe.direct;
}
