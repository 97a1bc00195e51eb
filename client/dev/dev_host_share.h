// SPDX-License-Identifier: MIT
/* dev_host_share.h - the host backend's shared allocations (device.h's
 * share_* operations), as a sealed memfd on the device's NUMA node. */
#ifndef WSRV_DEV_HOST_SHARE_H
#define WSRV_DEV_HOST_SHARE_H

#include "device.h"

/* The identity: "host:NAME" when named, else "host:numaN" (its node), else
 * "host:any"; page-sized granule. */
void host_share_info(int node, const char *name, struct dev_share_info *out);
int host_share_create(int node, size_t len, struct dev_share *sh);
int host_share_seal(struct dev_share *sh);
int host_share_import(int fd, size_t len, struct dev_share *sh);
void host_share_free(struct dev_share *sh);

#endif
