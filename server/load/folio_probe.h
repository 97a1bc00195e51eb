// SPDX-License-Identifier: MIT
/* folio_probe.h - whether this host writes a load straight into 2 MiB
 * folios, or into 4 KiB pages with the folios made behind the load
 * (arena_sweep.h): decided by measuring, once per process.
 *
 * A fresh 2 MiB folio costs a zeroing of 2 MiB on most hosts, a little
 * more than the 4 KiB pages' allocations it replaces. Where the host takes
 * free 2 MiB blocks back (a VM with free page reporting), each fresh one
 * is faulted in from the hypervisor as well, at several times the cost of
 * the write itself, while 4 KiB pages come from fragments it never took.
 * A VM whose balloon reports free pages (the feature bit in sysfs) loads
 * into 4 KiB pages with no probe: a probe gets the few blocks the host
 * has not taken back yet, and finds folios cheap there while a whole load
 * into them is slower (docs/benchmarks.md). Elsewhere the probe times both
 * on a small memfd each: 8 chunks made folios and written, against the
 * same bytes in 4 KiB pages, each the better of two rounds, in the
 * thread's CPU time (it runs before the first load serves: 64 MiB
 * written in all). */
#ifndef WSRV_FOLIO_PROBE_H
#define WSRV_FOLIO_PROBE_H

#include <stdbool.h>
#include <stddef.h>

/* How the loads of an arena of 4 KiB memfds get their 2 MiB folios:
 * as this host's probe says (AUTO), written straight into them (WRITE),
 * or made behind the load (AFTER). The load option --folios. */
enum folio_mode { FOLIO_MODE_AUTO = 0, FOLIO_MODE_WRITE, FOLIO_MODE_AFTER };

/* Above this ratio of a folio's cost to 4 KiB pages', folios come after. */
#define FOLIO_PROBE_MAX_RATIO 1.5

/* Whether loads write straight into folios under mode, and why, as a
 * sentence with the probe's figures (into why). The probe runs at the
 * first call with FOLIO_MODE_AUTO, and its answer is kept. */
bool folio_probe_direct(enum folio_mode mode, char *why, size_t len);

#endif
