// SPDX-License-Identifier: MIT
/* fuzz_reader.c - libFuzzer target for the safetensors reader: any bytes as a
 * whole file, then the layer names of whatever it accepted. Seeds: the
 * reference fixtures and tests/fuzz/corpus. */
#include <stddef.h>
#include <stdint.h>

#include "layer_name.h"
#include "st_reader.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct st_file *f = NULL;
	struct errinfo e;

	if (st_file_parse_buffer("fuzz.safetensors", data, size, &f, &e) < 0)
		return 0;
	for (size_t i = 0; i < f->ntensors; i++) {
		const struct st_tensor *t = &f->tensors[i];
		/* What the reader accepted must hold together. */
		if (t->end < t->begin || f->data_start + t->end > f->file_size)
			__builtin_trap();
		(void)layer_from_name(t->name, NULL, 0);
	}
	st_file_free(f);
	return 0;
}
