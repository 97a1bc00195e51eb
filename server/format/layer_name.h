// SPDX-License-Identifier: MIT
/* layer_name.h - which layer a tensor belongs to, from its name. */
#ifndef WSRV_LAYER_NAME_H
#define WSRV_LAYER_NAME_H

#include <stddef.h>
#include <stdint.h>

/* Tensors whose names carry no layer index form the global group. */
#define LAYER_GLOBAL (-1)
#define LAYER_MAX 999999

/* A pattern is a name prefix with one "{N}" where the decimal layer index
 * stands, e.g. "model.decoder.layers.{N}.". Returns 0 or -EINVAL. */
int layer_pattern_check(const char *pattern);

/* The layer index of name: extra patterns (may be NULL / 0) are tried first,
 * then the built-in ones (model.layers.N., layers.N., transformer.h.N.,
 * blk.N., model.language_model.layers.N.). Returns LAYER_GLOBAL when none
 * matches. */
int32_t layer_from_name(const char *name, const char *const *extra, size_t nextra);

/* The routed expert a tensor belongs to: N of "....experts.N." (DeepSeek,
 * Qwen-MoE, Mixtral's block_sparse_moe), or -1 (shared experts, whose
 * name has no ".experts.N.", and every other tensor). */
int32_t expert_from_name(const char *name);

#endif
