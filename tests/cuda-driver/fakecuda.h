// SPDX-License-Identifier: MIT
/* fakecuda.h - the controls of the test driver (tests/cuda-driver/), which
 * exports them beside the driver API. Tests reach them with dlsym on
 * libcuda.so.1, so that the same test runs on a real driver too (where
 * they are absent, and the test skips the parts that need them).
 *
 * Knobs (fakecuda_set): ro_supported (the device's read-only registration
 * attribute), max_register (the largest single registration, bytes),
 * gbps (copies are paced to it; 0: memcpy's speed), mbps (the same in
 * MB/s, when gbps is 0), vmm_supported (the
 * device's virtual-memory and POSIX-fd export attributes), granule (the
 * allocation granularity, 2 MiB), uuid (the device's UUID: another value is
 * another GPU), and failure injection
 * fail_alloc, fail_copy, fail_register, fail_alloc_host, fail_record: N
 * makes the (N+1)-th next such call fail, -1 none.
 * Counts (fakecuda_get): violations (set it to 0 to take them: a program
 * that ends with any fails), registrations, largest_register, copies,
 * copies_2d, ro_writes (copies refused because their destination is mapped
 * read-only). fakecuda_live: registrations, pinned, allocations, streams,
 * events, primary_refs, vmm_handles, vmm_mappings, reservations alive now.
 * fail_alloc covers cuMemCreate too. */
#ifndef FAKECUDA_H
#define FAKECUDA_H

int fakecuda_set(const char *name, long long v);
long long fakecuda_get(const char *name);
long long fakecuda_live(const char *what);

#endif
