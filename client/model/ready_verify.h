// SPDX-License-Identifier: MIT
/* ready_verify.h - a resumed attachment's pieces checked against the
 * bytes it attached to (ready_verify.c). */
#ifndef WSRV_CLIENT_READY_VERIFY_H
#define WSRV_CLIENT_READY_VERIFY_H

#include <stdint.h>

#include "attached.h"

/* Piece p of a resumed attachment: 0 when each of its tensors has the
 * checksum it was attached with (or one page does not know it), else
 * -ESTALE naming the tensor. 0 at once when not resumed. Under map_lock. */
int cl_resume_check(struct wsrv_model *m, uint32_t p);

#endif
