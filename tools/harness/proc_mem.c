// SPDX-License-Identifier: MIT
/* proc_mem.c - a process's memory as the kernel counts it (proc_mem.h). */
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "proc_mem.h"

void mapping_mem(pid_t pid, const char *what, uint64_t *pss, uint64_t *rss)
{
	char path[64], line[512], first[128];
	unsigned long kb;
	bool in = false;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%d/smaps", (int)pid);
	if (!(f = fopen(path, "re")))
		return;
	while (fgets(line, sizeof(line), f)) {
		/* A mapping's header starts "lo-hi perms ..."; its fields "Name:". */
		if (sscanf(line, "%127s", first) == 1 && first[strlen(first) - 1] != ':')
			in = strstr(line, what) != NULL;
		else if (in && pss && sscanf(line, "Pss: %lu kB", &kb) == 1)
			*pss += (uint64_t)kb << 10;
		else if (in && rss && sscanf(line, "Rss: %lu kB", &kb) == 1)
			*rss += (uint64_t)kb << 10;
	}
	fclose(f);
}

uint64_t pss_bytes(pid_t pid)
{
	char path[64], line[256];
	unsigned long long kb = 0;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%d/smaps_rollup", (int)pid);
	f = fopen(path, "re");
	if (!f)
		return 0;
	while (fgets(line, sizeof(line), f))
		if (sscanf(line, "Pss: %llu kB", &kb) == 1)
			break;
	fclose(f);
	return (uint64_t)kb * 1024;
}
