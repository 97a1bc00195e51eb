// SPDX-License-Identifier: MIT
/* srv_region_table.h - the device regions' table, as the server's table
 * (srv.h) holds it; what is done with it is holds/srv_region.h's. */
#ifndef WSRV_SRV_REGION_TABLE_H
#define WSRV_SRV_REGION_TABLE_H

#include <stdbool.h>
#include <stdint.h>

#define SRV_REGION_DEVICE 64        /* identity bytes, with the NUL */

struct srv_region {
	uint32_t id;                /* > 0, never reused while the server runs */
	uint32_t model;             /* index into srv->models */
	char model_name[64];        /* for stats, after the generation is gone */
	uint64_t generation;
	char device[SRV_REGION_DEVICE];
	int kind;                   /* WSRV__REGION_KIND__REGION_HOST or _CUDA */
	uint64_t fingerprint, bytes;
	bool committed;
	uint64_t writer;            /* the writer's session id (0: gone, after commit) */
	uint32_t writer_pid;
	uint32_t writer_uid;        /* whose part of the slots it counts in */
	int fd;                     /* the handle, owned; -1 until committed */
	uint32_t holders;
	uint64_t waits;             /* RegionOpens answered REGION_WAIT */
	double created;
};

struct srv_regions {
	struct srv_region *v;       /* owned */
	uint32_t n, cap;
	uint32_t next_id;
	uint64_t bytes;             /* of all regions, filling or committed */
};

#endif
