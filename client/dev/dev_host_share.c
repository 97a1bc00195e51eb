// SPDX-License-Identifier: MIT
/* dev_host_share.c - the host backend's device regions: a memfd placed on
 * the device's NUMA node, written through the writer's mapping, then
 * remapped read-only and sealed against writes (F_SEAL_WRITE) before it
 * is handed on;
 * readers map it PROT_READ, and the seals stop them (or anyone) from ever
 * mapping it writable. */
#include <errno.h>
#include <fcntl.h>
#include <numa.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "wire.h"
#include "dev_host_share.h"
#include "memfd_util.h"
#include "wsrv.pb-c.h"

#ifndef MADV_POPULATE_READ
#define MADV_POPULATE_READ 22
#define MADV_POPULATE_WRITE 23
#endif

#define SEALS (F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE | F_SEAL_SEAL)

void host_share_info(int node, const char *name, struct dev_share_info *out)
{
	memset(out, 0, sizeof(*out));
	if (name && *name)
		snprintf(out->id, sizeof(out->id), "host:%s", name);
	else if (node >= 0)
		snprintf(out->id, sizeof(out->id), "host:numa%d", node);
	else
		snprintf(out->id, sizeof(out->id), "host:any");
	out->kind = WSRV__REGION_KIND__REGION_HOST;
	out->granule = (size_t)sysconf(_SC_PAGESIZE);
}

int host_share_create(int node, size_t len, struct dev_share *sh)
{
	void *p;
	int fd = memfd_new_mapped("wsrv-region", len, &p);

	if (fd < 0)
		return cl_err(fd, "device region: cannot make and map %zu bytes: %s", len, strerror(-fd));
	if (node >= 0 && numa_available() >= 0)
		numa_tonode_memory(p, len, node);
	/* Its pages now, on its node, as a real device's memory is there
	 * when allocated (and as the private path does). */
	if (madvise(p, len, MADV_POPULATE_WRITE) < 0)
		memset(p, 0, len);
	*sh = (struct dev_share){ .ptr = p, .len = len, .fd = fd, .writable = true };
	return 0;
}

int host_share_seal(struct dev_share *sh)
{
	void *p;
	int r, ro;

	/* The writer's writable mapping is first replaced in place by one
	 * made from a read-only fd (a shared mapping of the read-write fd
	 * keeps VM_MAYWRITE even when PROT_READ, and F_SEAL_WRITE refuses
	 * it); then F_SEAL_WRITE, which the server requires: with no writable
	 * mapping left anywhere, nobody (the writer included) can change the
	 * bytes readers see. (F_SEAL_FUTURE_WRITE leaves a writable mapping
	 * made before it working.) */
	if ((ro = memfd_reopen_ro(sh->fd)) < 0)
		return cl_err(ro, "device region: cannot open it read-only: %s", strerror(-ro));
	p = mmap(sh->ptr, sh->len, PROT_READ, MAP_SHARED | MAP_FIXED, ro, 0);
	close(ro);
	if (p == MAP_FAILED)
		return cl_err(-errno, "device region: cannot remap it read-only: %s", strerror(errno));
	sh->writable = false;
	r = memfd_seal(sh->fd, SEALS);
	if (r < 0)
		return cl_err(r, "device region: cannot seal it: %s", strerror(-r));
	return 0;
}

int host_share_import(int fd, size_t len, struct dev_share *sh)
{
	uint64_t size;
	void *p;
	int r;

	if ((r = cl_check_fd(fd, "device region", len, &size)) < 0)
		return r;
	p = mmap(NULL, len, PROT_READ, MAP_SHARED, fd, 0);
	if (p == MAP_FAILED)
		return cl_err(-errno, "device region: cannot map it: %s", strerror(errno));
	/* Mapped now, so the first pass does not fault it in. */
	madvise(p, len, MADV_POPULATE_READ);
	*sh = (struct dev_share){ .ptr = p, .len = len, .fd = -1 };
	return 0;
}

void host_share_free(struct dev_share *sh)
{
	if (sh->ptr)
		munmap(sh->ptr, sh->len);
	if (sh->fd >= 0)
		close(sh->fd);
	*sh = (struct dev_share){ .fd = -1 };
}
