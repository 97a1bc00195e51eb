// SPDX-License-Identifier: MIT
/* publish_cover.h - what a publish has written of each tensor: the byte
 * ranges wsrv_publish_write wrote, and the tensors wsrv_publish_tensor
 * handed out by pointer (whose writes the library cannot see: the server
 * checks their pages at the commit). A commit asks this first, and
 * refuses, naming them, the tensors never written whole. */
#ifndef WSRV_CLIENT_PUBLISH_COVER_H
#define WSRV_CLIENT_PUBLISH_COVER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct pub_cover;

/* A record for ntensors tensors, nothing written: 0 and *out (the
 * caller's, pub_cover_free), or -ENOMEM. */
int pub_cover_new(size_t ntensors, struct pub_cover **out);
void pub_cover_free(struct pub_cover *c);
/* Bytes [off, off + len) of tensor i were written. Threads may call it
 * at once. 0 or -ENOMEM (nothing recorded). */
int pub_cover_add(struct pub_cover *c, uint32_t i, uint64_t off, uint64_t len);
/* Tensor i's pointer was handed out. */
void pub_cover_pointed(struct pub_cover *c, uint32_t i);
bool pub_cover_was_pointed(const struct pub_cover *c, uint32_t i);
/* How many bytes of [from, to) of tensor i were written. */
uint64_t pub_cover_bytes(struct pub_cover *c, uint32_t i, uint64_t from, uint64_t to);

#endif
