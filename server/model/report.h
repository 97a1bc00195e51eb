// SPDX-License-Identifier: MIT
/* report.h - what a loaded model is, for people (a table) or scripts (JSON). */
#ifndef WSRV_REPORT_H
#define WSRV_REPORT_H

#include <jansson.h>
#include <stdio.h>

#include "model_load.h"

/* Summary of a loaded model: tensors, layers, bytes, arena placement, page
 * size, load time and throughput. */
void report_loaded(FILE *out, const struct loaded_model *lm);
/* The same as a new JSON object (owned by the caller). */
/* The log line of a load (info), and its phases (debug: --verbose). */
void report_log_loaded(const struct loaded_model *lm);
json_t *report_loaded_json(const struct loaded_model *lm);

#endif
