// SPDX-License-Identifier: MIT
/* bench_cold_hf.h - the from_pretrained side of `wsrv-bench cold`: a
 * Python process that loads the model with Hugging Face transformers'
 * from_pretrained(device_map="cuda"), as an inference worker without wsrv
 * does (issue 38 item 1). Only where torch has CUDA and transformers is
 * installed (the GPU machine); elsewhere it says why not. $PYTHON names
 * the interpreter (default python3). */
#ifndef WSRV_BENCH_COLD_HF_H
#define WSRV_BENCH_COLD_HF_H

#include <stddef.h>
#include <stdint.h>

struct hf_result {
	double ready_at;            /* CLOCK_MONOTONIC, when the model was on the device */
	double import_s;            /* the interpreter's start and the imports */
	double load_s;              /* from_pretrained, to torch.cuda.synchronize() */
	uint64_t device_bytes;      /* torch.cuda.memory_allocated() */
};

/* Whether from_pretrained can run here: 0, or -EOPNOTSUPP with the reason
 * (no torch, no CUDA, no transformers) in why. */
int hf_probe(char *why, size_t len);

/* Loads model_dir in a new Python process and waits for it to be on the
 * device; the process exits after. 0 or -EIO. */
int hf_load(const char *model_dir, struct hf_result *r);

#endif
