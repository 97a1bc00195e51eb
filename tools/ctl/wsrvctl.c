// SPDX-License-Identifier: MIT
/* wsrvctl - look at model files offline and talk to a running wsrvd.
 *
 * Global options (--socket PATH, --wait SECONDS, --json) may come before or after the
 * command; exit status 0 success, 1 failure or invalid input, 2 usage. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ctl.h"
#include "sockpath.h"
#include "ticker.h"

static const struct ctl_command offline[] = {
	{ "inspect", ctl_inspect, "inspect PATH          validate a file or model directory offline",
	  "  PATH                  a .safetensors file or a model directory (no server)\n"
	  "  --memory-budget SIZE  the plan wsrvd would apply under this budget, and the\n"
	  "                        smallest budget that starts (exit 1 below it)\n"
	  "  --serve-when-loaded   the layout of a wsrvd that serves each model once loaded\n"
	  "                        (one run of segments); by default, the layout of one that\n"
	  "                        serves while loading, as wsrvd does by default\n"
	  "  --align BYTES, --max-segment SIZE, --layer-pattern REGEX\n"
	  "                        lay it out as wsrvd would with these (wsrvd --help)\n"
	  "  --plan FILE, --ranks A-B, --world W\n"
	  "                        the part a host of those ranks would hold\n" },
	{ NULL, NULL, NULL, NULL },
};

static const struct ctl_command served[] = {
	{ "status", ctl_status, "status                server version, uptime, clients, models, memory",
	  "  (no options; --json carries everything the text shows)\n" },
	{ "models", ctl_models, "models                the models served",
	  "  (no options; --json for the full record of each generation)\n" },
	{ "tensors", ctl_tensors, "tensors MODEL [--layer N]  a model's tensors",
	  "  MODEL                 a model the server serves\n"
	  "  --layer N             only layer N's tensors\n" },
	{ "layers", ctl_layers, "layers MODEL          a model's layers and their extents",
	  "  MODEL                 a model the server serves\n" },
	{ "stats", ctl_stats, "stats                 the server's counters",
	  "  (no options)\n" },
	{ "verify", ctl_verify, "verify MODEL [--hold S]  check every checksum in the shared mapping",
	  "  MODEL                 a model the server serves\n"
	  "  --hold S              keep the attachment S seconds after\n" },
	{ "dump", ctl_dump, "dump MODEL TENSOR [--plan F --rank R --world W] -o FILE  the bytes as a worker (rank) sees them (-o -: stdout)",
	  "  MODEL TENSOR          the tensor, by name\n"
	  "  -o FILE               where its bytes go\n"
	  "  --plan F              a plan (JSON) that shards it; with\n"
	  "  --rank R --world W    the rank whose view is written\n" },
	{ "plan", ctl_plan, "plan MODEL --plan FILE [--rank R --world W]  where each tensor lives, device memory",
	  "  --plan FILE           the plan (JSON)\n"
	  "  --rank R --world W    the rank and world it is read for (default 0 of 1)\n"
	  "  --slots N             streaming slots to count device memory for (default 2)\n" },
	{ "publish", ctl_publish, "publish MODEL --from DIR  a new generation from other files of the same tensors",
	  "  --from DIR            the model directory with the new weights (same tensors,\n"
	  "                        dtypes, shapes); the server's --allow-publish-uid or\n"
	  "                        --allow-publish-gid must name this user\n" },
	{ "reload", ctl_reload, "reload MODEL [--path DIR] | --all [--timeout S]  a new generation while workers run",
	  "  --path DIR            load it from DIR (default: its own path)\n"
	  "  --all                 every model, one after another (systemctl reload)\n"
	  "  --timeout S           wait at most S seconds for it to serve (default 600;\n"
	  "                        0: do not wait); exit 3 when the wait runs out first,\n"
	  "                        the reload going on in the server\n" },
	{ NULL, NULL, NULL, NULL },
};

static const struct ctl_command *const tables[] = { offline, served };

static void ctl_usage(FILE *f)
{
	fprintf(f, "usage: wsrvctl [--socket PATH] [--wait SECONDS] [--json] COMMAND [ARGS]\n"
		"       wsrvctl --help | --version | COMMAND --help\n"
		"--wait: while no wsrvd answers on the socket (one starting), try again for up\n"
		"to SECONDS before failing\ncommands:\n");
	for (size_t t = 0; t < 2; t++)
		for (const struct ctl_command *c = tables[t]; c->name; c++)
			fprintf(f, "  %s\n", c->help);
	fprintf(f, "environment: WSRV_SOCKET (the socket when --socket is not given; else\n"
		"$XDG_RUNTIME_DIR/wsrv.sock, else /run/wsrv/wsrv.sock)\n"
		"exit status: 0 done, 1 failed (the server's or the files' answer), 2 a usage error\n");
}

/* Removes the global options from argv wherever they are; returns argc. */
static int take_globals(int argc, char **argv, struct ctl_ctx *c)
{
	int out = 0;

	for (int i = 0; i < argc; i++) {
		if (strcmp(argv[i], "--json") == 0) {
			c->json = true;
		} else if (strcmp(argv[i], "--socket") == 0) {
			if (i + 1 >= argc || !argv[i + 1][0]) {
				fprintf(stderr, "wsrvctl: --socket needs a PATH\n");
				exit(2);
			}
			c->socket = argv[++i];
		} else if (strcmp(argv[i], "--wait") == 0 || strncmp(argv[i], "--wait=", 7) == 0) {
			const char *v = argv[i][6] == '=' ? argv[i] + 7 : i + 1 < argc ? argv[++i] : "";
			char *end;
			double s = strtod(v, &end);
			if (!*v || *end || !(s >= 0 && s <= 86400)) {
				fprintf(stderr, "wsrvctl: --wait needs SECONDS, from 0 to 86400\n");
				exit(2);
			}
			c->wait_ms = (int)(s * 1000);
		} else if (strncmp(argv[i], "--socket=", 9) == 0) {
			c->socket = argv[i] + 9;
			if (!c->socket[0]) {
				fprintf(stderr, "wsrvctl: --socket needs a PATH\n");
				exit(2);
			}
		} else {
			argv[out++] = argv[i];
		}
	}
	argv[out] = NULL;
	return out;
}

/* Whether the socket (--socket, else $WSRV_SOCKET) can be a Unix socket's
 * path: one that cannot is a usage error, exit 2, as it is for wsrvd
 * (issue 61 item 13: wsrvctl exited 1). */
static bool socket_fits(const struct ctl_ctx *c)
{
	const char *path = c->socket ? c->socket : getenv("WSRV_SOCKET");
	char why[200];

	if (!path || !*path || sockpath_check(path, why, sizeof(why)) == 0)
		return true;
	fprintf(stderr, "wsrvctl: %s%s\n", why, c->socket ? "" : " ($WSRV_SOCKET)");
	return false;
}

/* Whether a command's arguments ask for its help (--help, -h). */
static bool asks_help(int argc, char **argv)
{
	for (int i = 2; i < argc; i++)
		if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0)
			return true;
	return false;
}

/* `wsrvctl COMMAND --help`: its line of the usage and its options, exit
 * 0 (issue 61 item 8: its options were only in the man page). */
static int command_help(const struct ctl_command *cmd)
{
	printf("usage: wsrvctl [--socket PATH] [--wait SECONDS] [--json] %s\noptions:\n%s"
	       "exit status: 0 done, 1 failed, 2 a usage error%s; the socket: --socket, else $WSRV_SOCKET,\n"
	       "else $XDG_RUNTIME_DIR/wsrv.sock, else /run/wsrv/wsrv.sock\n", cmd->help,
	       cmd->opts ? cmd->opts : "", cmd->run == ctl_reload ? ", 3 the wait ran out" : "");
	return 0;
}

int main(int argc, char **argv)
{
	struct ctl_ctx c = { 0 };

	argc = take_globals(argc, argv, &c);
	if (argc >= 2 && strcmp(argv[1], "--version") == 0) {
		printf("wsrvctl %s\n", WSRV_VERSION_STRING);
		return 0;
	}
	if (argc < 2 || strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "help") == 0) {
		ctl_usage(argc < 2 ? stderr : stdout);
		return argc < 2 ? 2 : 0;
	}
	for (size_t t = 0; t < 2; t++)
		for (const struct ctl_command *cmd = tables[t]; cmd->name; cmd++) {
			if (strcmp(argv[1], cmd->name) != 0)
				continue;
			if (asks_help(argc, argv))
				return command_help(cmd);
			if (t == 1 && !socket_fits(&c))
				return 2;
			/* A long step (a publish, a reload's wait) says what it
			 * is past 2 s; the quick commands set none. */
			ticker_start("wsrvctl");
			int r = cmd->run(&c, argc - 1, argv + 1);
			ticker_stop();
			return r;
		}
	fprintf(stderr, "wsrvctl: unknown command '%s'\nsee wsrvctl --help\n", argv[1]);
	return 2;
}
