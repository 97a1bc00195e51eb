// SPDX-License-Identifier: MIT
/* dev_serve.h - what the copy service (client/copyd/) asks of the cuda
 * backend beyond device.h: registrations every device of the process
 * shares, and a worker's exported allocation mapped writable, checked to
 * be a device allocation on this device of at least the size it was said
 * to be (dev_cuda_serve.c). */
#ifndef WSRV_DEV_SERVE_H
#define WSRV_DEV_SERVE_H

#include <stddef.h>

#include "device.h"

/* From now on d's registrations are portable (every context of the
 * process may copy from them) and a range another device of the process
 * locked already is borrowed, not locked again. */
void dev_serve_portable(struct wsrv_device *d);

/* Imports fd (the caller keeps it) and maps len bytes of it writable on
 * d: 0 and *sh (dev_serve_free), or a negative errno with a sentence:
 * -EBADF not an exported device allocation, -EXDEV one on another device,
 * -EINVAL smaller than len. */
int dev_serve_import(struct wsrv_device *d, int fd, size_t len, struct dev_share *sh);
void dev_serve_free(struct wsrv_device *d, struct dev_share *sh);

#endif
