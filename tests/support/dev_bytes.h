// SPDX-License-Identifier: MIT
/* dev_bytes.h - the bytes at a stream's device address, in tests, on any
 * backend: the host backend's addresses are host memory; the cuda
 * backend's (a GPU, or the test driver's host memory standing in for one)
 * are copied back with cuMemcpyDtoH in device 0's primary context, so a
 * test never dereferences a device pointer. */
#ifndef WSRV_TEST_DEV_BYTES_H
#define WSRV_TEST_DEV_BYTES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* True when the run asks for the cuda backend (WSRV_TEST_DEVICE=cuda). */
bool dev_on_cuda(void);

struct wsrv_model;
struct wsrv_device;

/* The device a test program's cases use: the backend the run asks for
 * (WSRV_TEST_DEVICE), over model m. A real CUDA driver opens fds at cuInit
 * (an eventfd, pipes, a socket, /dev/nvidia*) and keeps them for the life
 * of the process (seen on an H100), so the cuda device is opened with a
 * first stream and the fds that opened meanwhile are remembered:
 * dev_test_close returns those still open once the device is gone, the
 * driver's, to add to the fixture's fd baseline. 0 or -1. */
int dev_test_open(struct wsrv_model *m, struct wsrv_device **dev);
int dev_test_close(struct wsrv_device *dev);

/* Copies n bytes at device address src into dst: 0, or -EIO with a line
 * on stderr. */
int dev_read(void *dst, const void *src, size_t n);

/* The xxh3 of n bytes at device address dev, or 0 when they cannot be
 * read. */
uint64_t dev_xxh3(const void *dev, size_t n);

/* 0 when the n bytes at device address dev equal host's, 1 when they
 * differ, or a negative errno when they could not be read. */
int dev_cmp_host(const void *dev, const void *host, size_t n);

/* The same for two device addresses. */
int dev_cmp_dev(const void *a, const void *b, size_t n);

/* The device's free and total bytes (cuMemGetInfo); -ENOTSUP on the host
 * backend. A GPU counts every process's memory, the test driver this
 * process's: compare what one process added. */
int dev_mem_info(uint64_t *free_b, uint64_t *total);

#endif
