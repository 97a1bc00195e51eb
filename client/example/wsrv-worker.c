// SPDX-License-Identifier: MIT
/* wsrv-worker - an example inference worker: attaches to a model on wsrvd,
 * streams its layers through a host device with a plan, and runs a forward
 * pass on the CPU (a matrix-vector product per weight). Prints the result's
 * digest, which equals the same computation over the direct mapping
 * (--check computes both). */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cliarg.h"
#include "forward.h"
#include "ticker.h"
#include "wsrv.h"

#define P "wsrv-worker"

static int fail(const char *what)
{
	fprintf(stderr, "wsrv-worker: %s: %s\n", what, wsrv_last_error());
	return 1;
}

/* Between passes: the old generation detached, the new one attached and
 * streamed. */
static int switch_generation(struct wsrv_client *c, const char *model, struct wsrv_device *d,
			     const struct wsrv_plan *plan, const struct wsrv_stream_opts *so,
			     struct wsrv_model **m, struct wsrv_stream **s)
{
	uint64_t from, to;

	wsrv_model_generation(*m, &from, NULL);
	wsrv_stream_close(*s);
	wsrv_detach(*m);
	*s = NULL;
	if (wsrv_attach(c, model, m) < 0 || wsrv_stream_open(*m, d, plan, so, s) < 0)
		return -1;
	wsrv_model_generation(*m, &to, NULL);
	printf("worker %d: switched from generation %" PRIu64 " to %" PRIu64 "\n", (int)getpid(), from, to);
	fflush(stdout);
	return 0;
}

/* Where the resident tensors are: the shared device region, or private. */
static void print_sharing(const struct wsrv_stream *s, const struct wsrv_stream_stats *st)
{
	struct wsrv_sharing sh;

	wsrv_stream_sharing(s, &sh);
	if (sh.role == WSRV_SHARE_PRIVATE)
		printf("worker %d: resident tensors: a private copy of %.1f MiB (%s)\n", (int)getpid(),
		       (double)st->resident_bytes / 1048576, sh.note);
	else
		printf("worker %d: resident tensors: %.1f MiB in shared device region %u on %s (%s %u); %.1f MiB of slots private\n",
		       (int)getpid(), (double)st->shared_bytes / 1048576, sh.region_id, sh.device,
		       sh.role == WSRV_SHARE_WRITER ? "filled by this worker, pid" : "mapped read-only, filled by pid",
		       sh.writer_pid, (double)st->private_bytes / 1048576);
}

/* Holds on (the weights attached, for a look at its mappings) for
 * seconds, or with -1 until told; SIGUSR1, SIGINT or SIGTERM ends it. */
static void hold_on(int seconds)
{
	struct timespec ts = { seconds, 0 };
	sigset_t set;

	sigemptyset(&set);
	sigaddset(&set, SIGUSR1);
	sigaddset(&set, SIGINT);
	sigaddset(&set, SIGTERM);
	sigprocmask(SIG_BLOCK, &set, NULL);
	while (seconds < 0 ? sigwaitinfo(&set, NULL) < 0 : sigtimedwait(&set, NULL, &ts) < 0 && errno == EINTR)
		;
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "socket", required_argument, NULL, 'S' }, { "model", required_argument, NULL, 'm' },
		{ "plan", required_argument, NULL, 'p' }, { "rank", required_argument, NULL, 'r' },
		{ "slots", required_argument, NULL, 's' }, { "passes", required_argument, NULL, 'n' },
		{ "bandwidth", required_argument, NULL, 'b' }, { "hold", required_argument, NULL, 'h' },
		{ "check", no_argument, NULL, 'c' }, { "help", no_argument, NULL, 'H' },
		{ "device-name", required_argument, NULL, 'D' }, { "no-share", no_argument, NULL, 'N' },
		{ "follow", no_argument, NULL, 'F' }, { "wait", required_argument, NULL, 'W' },
		{ "version", no_argument, NULL, 'V' }, { 0 },
	};
	static const char usage[] =
		"usage: wsrv-worker [--socket PATH] --model NAME [--plan FILE] [--rank R]\n"
		"                   [--slots D] [--passes N] [--bandwidth GBPS] [--hold S|signal]\n"
		"                   [--check] [--device-name NAME] [--no-share] [--follow] [--wait SECONDS]\n"
		"       wsrv-worker --help | --version\n"
		"--hold: keep the weights attached at the end, S seconds or (signal) until told:\n"
		"SIGUSR1, SIGINT or SIGTERM ends either hold, and the worker exits 0.\n"
		"--wait: while no wsrvd answers on the socket (one starting), try again for up\n"
		"to SECONDS.\n"
		"--follow: between passes, switch to a new generation of the model when the\n"
		"server announces one (wsrvctl reload).\n"
		"Workers whose devices have the same name (default: host:any) share one device\n"
		"copy of the resident tensors; --no-share keeps a private one.\n";
	struct wsrv_connect_opts co = { .struct_size = sizeof(co), .client_name = "wsrv-worker" };
	struct wsrv_stream_opts so = { .struct_size = sizeof(so), .slots = 2 };
	struct wsrv_host_opts ho = { .struct_size = sizeof(ho), .numa_node = -1 };
	const char *sock = NULL, *model = NULL, *plan_path = NULL;
	int passes = 1, hold = 0, check = 0, follow = 0, o;
	struct wsrv_plan *plan = NULL;
	struct wsrv_stream_stats st;
	struct wsrv_client *c;
	struct wsrv_model *m;
	struct wsrv_device *d;
	struct wsrv_stream *s;
	uint64_t digest, direct;

	while ((o = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		switch (o) {
		case 'S': sock = optarg; break;
		case 'm': model = optarg; break;
		case 'p': plan_path = optarg; break;
		case 'r': so.rank = (int)cliarg_long(P, "--rank", optarg, 0, 4095); break;
		case 's': so.slots = (unsigned)cliarg_long(P, "--slots", optarg, 1, 64); break;
		case 'n': passes = (int)cliarg_long(P, "--passes", optarg, 1, 1000000); break;
		case 'b': ho.bandwidth_gbps = cliarg_double(P, "--bandwidth", optarg, 0, 1e6); break;
		case 'h':
			hold = strcmp(optarg, "signal") == 0 ? -1 : (int)cliarg_long(P, "--hold", optarg, 0, 86400 * 365);
			break;
		case 'c': check = 1; break;
		case 'D': ho.device_name = optarg; break;
		case 'N': so.share = WSRV_SHARE_OFF; break;
		case 'F': follow = 1; break;
		case 'W': co.wait_ms = (int)cliarg_long(P, "--wait", optarg, 0, 86400) * 1000; break;
		case 'H': fputs(usage, stdout); return 0;
		case 'V': printf("wsrv-worker %s\n", WSRV_VERSION_STRING); return 0;
		default: fprintf(stderr, "see wsrv-worker --help\n"); return 2;
		}
	}
	if (!model || optind != argc) {
		if (!model)
			fprintf(stderr, "wsrv-worker: --model NAME is required: the served model to run (wsrvctl models lists them)\n");
		else
			fprintf(stderr, "wsrv-worker: unexpected argument '%s'\n", argv[optind]);
		fputs(usage, stderr);
		return 2;
	}
	if (hold) { /* a SIGUSR1 sent before the hold ends it then, not the worker now */
		sigset_t usr1;
		sigemptyset(&usr1);
		sigaddset(&usr1, SIGUSR1);
		sigprocmask(SIG_BLOCK, &usr1, NULL);
	}
	if (plan_path && wsrv_plan_load(plan_path, &plan) < 0)
		return fail("plan");
	ticker_start("wsrv-worker"); /* a step past 2 s says what it is */
	ticker_step("connecting to wsrvd and attaching %s", model);
	if (wsrv_connect(sock, &co, &c) < 0 || wsrv_attach(c, model, &m) < 0)
		return fail("attach");
	ticker_step("opening the stream: placing the resident tensors of %s", model);
	if (wsrv_device_host(&ho, &d) < 0 || wsrv_stream_open(m, d, plan, &so, &s) < 0)
		return fail("stream");
	ticker_step("computing over %s", model);
	/* Following, each pass starts afresh (on whichever generation), and
	 * --check compares the last one. */
	int per = follow ? 1 : passes;
	for (int p = 0; p < passes; p += per) {
		if (follow && p > 0 && wsrv_client_poll_events(c) > 0 &&
		    switch_generation(c, model, d, plan, &so, &m, &s) < 0)
			return fail("switch");
		if (forward_pass(m, s, per, &digest) < 0) {
			fprintf(stderr, "wsrv-worker: forward pass: %s\n",
				*forward_error() ? forward_error() : wsrv_last_error());
			return 1;
		}
	}
	wsrv_stream_report(s); /* for wsrvctl stats while this worker holds on */
	wsrv_stream_stats(s, &st);
	printf("worker %d: %d pass%s over %s: digest %016" PRIx64 "; %" PRIu64 " bytes streamed, %.0f%% of copy time hidden\n",
	       (int)getpid(), passes, passes == 1 ? "" : "es", model, digest, st.bytes_copied,
	       100 * st.hidden_fraction);
	print_sharing(s, &st);
	/* A direct pass that fails is an error, never a mismatch. It takes
	 * a disk tier's layers on a connection of its own: a worker's share
	 * of the tier's cache (--memory-budget-share) is per connection. The
	 * stream's slots hold the next pass's first layers, and a disk tier's
	 * pieces with them: under a budget that holds one layer beside what
	 * stays, the direct pass would wait for them in vain. Unless held on,
	 * the stream is done. */
	if (check && !hold) {
		wsrv_stream_close(s);
		s = NULL;
	}
	struct wsrv_client *dc = NULL;
	ticker_step("checking: the same pass over the direct mapping");
	if (check && wsrv_connect(sock, &co, &dc) < 0)
		return fail("connect for --check");
	if (check && forward_pass_direct(dc, model, m, per, &direct) < 0) {
		fprintf(stderr, "wsrv-worker: the same pass over the direct mapping: %s\n",
			*forward_error() ? forward_error() : wsrv_last_error());
		return 1;
	}
	wsrv_disconnect(dc);
	if (check)
		printf("worker %d: the same pass over the direct mapping: %016" PRIx64 " (%s)\n", (int)getpid(),
		       direct, direct == digest ? "bit-identical" : "DIFFERENT");
	fflush(stdout);
	ticker_stop();
	if (hold)
		hold_on(hold);
	wsrv_stream_close(s);
	wsrv_device_destroy(d);
	wsrv_plan_free(plan);
	wsrv_detach(m);
	wsrv_disconnect(c);
	return check && direct != digest ? 1 : 0;
}
