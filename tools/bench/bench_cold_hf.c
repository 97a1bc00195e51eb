// SPDX-License-Identifier: MIT
/* bench_cold_hf.c - from_pretrained in a Python process (bench_cold_hf.h). */
#include "bench_cold_hf.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

/* Prints "ok READY_AT IMPORT_S LOAD_S DEVICE_BYTES", or "skip: why" and
 * exits 77. time.monotonic() is CLOCK_MONOTONIC on Linux: the parent's
 * clock. */
static const char hf_script[] =
	"import sys, time\n"
	"t0 = time.monotonic()\n"
	"try:\n"
	"    import torch, transformers\n"
	"except ImportError as e:\n"
	"    print(f'skip: {e}'); sys.exit(77)\n"
	"if not torch.cuda.is_available():\n"
	"    print('skip: this torch sees no CUDA device'); sys.exit(77)\n"
	"if len(sys.argv) < 2:\n"
	"    print('ok'); sys.exit(0)\n"
	"t1 = time.monotonic()\n"
	"m = transformers.AutoModelForCausalLM.from_pretrained(sys.argv[1], device_map='cuda', torch_dtype='auto')\n"
	"torch.cuda.synchronize()\n"
	"t2 = time.monotonic()\n"
	"print(f'ok {t2:.6f} {t1 - t0:.6f} {t2 - t1:.6f} {torch.cuda.memory_allocated()}', flush=True)\n";

/* Runs the script (with model_dir, or none: the probe) and reads its one
 * line into line. The exit status, or -1. */
static int run_script(const char *model_dir, char *line, size_t len)
{
	const char *py = getenv("PYTHON") ? getenv("PYTHON") : "python3";
	int p[2], st = 0;
	pid_t pid;
	FILE *f;

	if (pipe(p) < 0)
		return -1;
	if ((pid = fork()) == 0) {
		dup2(p[1], 1);
		close(p[0]);
		close(p[1]);
		execlp(py, py, "-c", hf_script, model_dir, (char *)NULL);
		printf("skip: cannot run %s: %s\n", py, strerror(errno));
		_exit(77);
	}
	close(p[1]);
	line[0] = 0;
	if (pid > 0 && (f = fdopen(p[0], "r"))) {
		if (!fgets(line, (int)len, f))
			line[0] = 0;
		fclose(f);
	} else {
		close(p[0]);
	}
	line[strcspn(line, "\n")] = 0;
	if (pid < 0 || waitpid(pid, &st, 0) < 0)
		return -1;
	return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

int hf_probe(char *why, size_t len)
{
	char line[512];
	int rc = run_script(NULL, line, sizeof(line));

	if (rc == 0 && strcmp(line, "ok") == 0)
		return 0;
	snprintf(why, len, "%s", rc == 77 && !strncmp(line, "skip: ", 6) ? line + 6 : "the probe failed");
	return -EOPNOTSUPP;
}

int hf_load(const char *model_dir, struct hf_result *r)
{
	char line[512];
	unsigned long long dev = 0;

	if (run_script(model_dir, line, sizeof(line)) != 0 ||
	    sscanf(line, "ok %lf %lf %lf %llu", &r->ready_at, &r->import_s, &r->load_s, &dev) != 4)
		return -EIO;
	r->device_bytes = dev;
	return 0;
}
