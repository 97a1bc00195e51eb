// SPDX-License-Identifier: MIT
/* srv_refuse.h - turning a connection away at once, with its reason. */
#ifndef WSRV_SRV_REFUSE_H
#define WSRV_SRV_REFUSE_H

/* Sends Error{code, why} on fd without waiting, reads and drops whatever
 * the client already sent (so that closing does not reset the connection
 * and lose the reason), and closes fd (which it owns from the call on). */
void srv_refuse_fd(int fd, int code, const char *why);

#endif
