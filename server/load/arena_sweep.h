// SPDX-License-Identifier: MIT
/* arena_sweep.h - 2 MiB folios made once a model is loaded, not before
 * each write of its load: the path of a host where fresh 2 MiB folios are
 * dear (folio_probe.h decides).
 *
 * Serving while loading, a worker waits for the load, so what the load
 * spends is everyone's wait. Making a fresh 2 MiB folio costs far more than
 * taking 4 KiB pages where the host has taken free memory back (free page
 * reporting hands back whole 2 MiB blocks; 4 KiB pages come from the
 * fragments it keeps): on this project's VM a 2 GiB load took 3.5-4.2 s
 * into folios and 1.1-1.2 s into 4 KiB pages (docs/benchmarks.md). So
 * such a load writes 4 KiB pages, and once the model is ready a thread at
 * normal priority collapses each 2 MiB chunk into a folio (MADV_COLLAPSE
 * copies the chunk, unmaps the small pages from every process that mapped
 * them, and readers fault the folio in whole). Normal priority bounds how
 * long a model stays on 4 KiB pages by what the collapse of its bytes
 * takes; at SCHED_IDLE, on a busy host, it could be never. The bytes never
 * change; a chunk the kernel cannot collapse keeps its 4 KiB pages. Sealed
 * segments can be collapsed: no seal forbids it.
 *
 * Life: arena->folios FOLIOS_AFTER before the load -> arena_sweep_start once
 * ready -> arena_sweep_stop (arena_free calls it). */
#ifndef WSRV_ARENA_SWEEP_H
#define WSRV_ARENA_SWEEP_H

struct arena;

/* Starts the sweep of every segment on a thread of its own; label (the
 * model's name, copied) names it in the log line it writes at its end.
 * 0, or -errno (no thread: the arena keeps its 4 KiB pages). Only for an
 * arena whose folios come after the load (FOLIOS_AFTER), after it; at
 * most once (-EALREADY). */
int arena_sweep_start(struct arena *a, const char *label);

/* The same for an adopted arena of 4 KiB pages (a predecessor's, whose
 * chunks are mostly folios already: the collapse of one costs next to
 * nothing; or a publish's, written in 4 KiB pages), where the kernel
 * makes folios: the page size and the note readers see then say what
 * they map, not 4 KiB. when (static) says when in its note: " on
 * adoption". 0 (nothing to do, or started) or -errno. */
int arena_sweep_adopted(struct arena *a, const char *label, const char *when);

/* Stops a running sweep at its next chunk and waits for it; no-op if
 * none runs. */
void arena_sweep_stop(struct arena *a);

/* Waits for a running sweep to finish every chunk; no-op if none runs. */
void arena_sweep_wait(struct arena *a);

#endif
