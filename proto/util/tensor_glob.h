// SPDX-License-Identifier: MIT
/* tensor_glob.h - patterns over tensor names, as plans write them: a
 * pattern matches a tensor's module path (its name without a final
 * ".weight", ".bias" or ".weight_scale_inv"), with or without a leading
 * "model."; "*" matches one non-empty dot-free component, as in Hugging
 * Face tp_plans. Shared by libwsrv's plans and wsrvd's partial loads. */
#ifndef WSRV_TENSOR_GLOB_H
#define WSRV_TENSOR_GLOB_H

#include <stdbool.h>
#include <stddef.h>

/* Does glob g match s exactly? */
bool tensor_glob(const char *g, const char *s);
/* The module path of a tensor name, into buf. */
void tensor_module_path(const char *name, char *buf, size_t cap);
/* Does pattern match tensor `name` (its module path, with or without
 * "model.")? */
bool tensor_pattern_match(const char *pattern, const char *name);

#endif
