// SPDX-License-Identifier: MIT
/* peer_accept.h - in the peer process, every TCP connection UCX accepts
 * is checked against --peer-allow before UCX reads a byte of it.
 *
 * UCX accepts with accept(2) in libucs, on the listener of the named port
 * and on the one its TCP data lanes listen on (a port UCX picks). wsrvd's
 * executable defines accept() (exported, so the dynamic linker binds
 * libucs's calls to it): with a filter set, a connection from an address
 * outside the allow list is closed at once, logged and counted, and the
 * next one is taken; without one (wsrvd itself) it is accept(2). */
#ifndef WSRV_PEER_ACCEPT_H
#define WSRV_PEER_ACCEPT_H

#include <stdint.h>

#include "peer_trust.h"

/* From now on, connections accepted in this process must come from an
 * address t allows (t is kept: it must outlive the process's accepts);
 * refused ones are added to *refused (may be NULL). */
void peer_accept_filter(const struct peer_trust *t, uint64_t *refused);

#endif
