// SPDX-License-Identifier: MIT
/* stream_trace.c - a Chrome trace of a stream (chrome://tracing, Perfetto):
 * copies on one track, waits and compute on another, per layer. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "stream_internal.h"

#define TRACE_MAX (1u << 20)

void stream_trace_add(struct wsrv_stream *s, int32_t layer, char kind, double t0, double t1)
{
	if (!s->trace_path || s->ntrace >= TRACE_MAX)
		return;
	if (s->ntrace == s->trace_cap) {
		size_t cap = s->trace_cap ? s->trace_cap * 2 : 1024;
		struct trace_ev *v = realloc(s->trace, cap * sizeof(*v));
		if (!v)
			return;
		s->trace = v;
		s->trace_cap = cap;
	}
	s->trace[s->ntrace++] = (struct trace_ev){ layer, kind, t0, t1 };
}

int stream_trace_write(const struct wsrv_stream *s, const char *path)
{
	FILE *f = fopen(path, "we");

	if (!f)
		return cl_err(-errno, "trace: %s: cannot write", path);
	fprintf(f, "{\"displayTimeUnit\":\"ms\",\"traceEvents\":[\n"
		   "{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":1,\"tid\":1,\"args\":{\"name\":\"copies (%s)\"}},\n"
		   "{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":1,\"tid\":2,\"args\":{\"name\":\"worker\"}}",
		s->d->ops->name);
	for (size_t i = 0; i < s->ntrace; i++) {
		const struct trace_ev *e = &s->trace[i];
		const char *what = e->kind == 'c' ? "copy" : e->kind == 'p' ? "peer copy" : e->kind == 'w' ? "wait"
				 : "compute";
		fprintf(f, ",\n{\"name\":\"%s L%d\",\"cat\":\"%s\",\"ph\":\"X\",\"pid\":1,\"tid\":%d,"
			   "\"ts\":%.3f,\"dur\":%.3f}",
			what, e->layer, what, e->kind == 'c' || e->kind == 'p' ? 1 : 2, (e->t0 - s->opened) * 1e6,
			(e->t1 - e->t0) * 1e6);
	}
	fprintf(f, "\n]}\n");
	return fclose(f) == 0 ? 0 : cl_err(-EIO, "trace: %s: write failed", path);
}
