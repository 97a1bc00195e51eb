// SPDX-License-Identifier: MIT
/* tier_fetch.h - the disk tier's reader threads (tier_fetch.c). */
#ifndef WSRV_TIER_FETCH_H
#define WSRV_TIER_FETCH_H

/* Sets the tests' read-error seam when $WSRV_TEST_TIER_EIO asks for it. */
void tier_test_seam(void);

/* A reader thread's body: takes queued segments and reads them. */
void *tier_reader_main(void *arg);

#endif
