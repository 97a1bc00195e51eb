// SPDX-License-Identifier: MIT
/* test_unit.c - the installed systemd unit (server/systemd): it and each
 * shipped drop-in (the models, the metrics listener) pass systemd-analyze
 * verify and its offline security score, and the unit runs the wsrvd it
 * names with what the drop-ins set (issue 41: there was no unit to
 * install, only one in the docs). Issue 61 item 6: the example drop-in
 * passed --metrics-listen, which the unit's RestrictAddressFamilies=AF_UNIX
 * made wsrvd exit on; the listener now has its own drop-in, and wsrvd is
 * started here under the same address families, with and without it. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/socket.h>
#include <unistd.h>

#include "fixture.h"
#include "wsrv.h"

/* dir[0]: the unit and its drop-in folder, as systemd lays them out. */
static struct fixture F = { .tag = "unit", .models = { { "" } } };

static const char *analyze(void)
{
	if (access("/usr/bin/systemd-analyze", X_OK) == 0)
		return "/usr/bin/systemd-analyze";
	if (access("/bin/systemd-analyze", X_OK) == 0)
		return "/bin/systemd-analyze";
	skip(); /* no systemd here: nothing to verify with */
	return NULL;
}

/* systemd-analyze verify of the unit file u (named name): exit 0 and
 * nothing said of it; out and err go to F.dir[0]/verify-TAG.*. */
static void verify(const char *u, const char *name, const char *tag)
{
	/* --man=no: the man pages are installed with the units, not here. */
	const char *argv[] = { analyze(), "verify", "--man=no", u, NULL };
	char out[512], err[512];
	size_t n;
	char *text;

	snprintf(out, sizeof(out), "%s/verify-%s.out", F.dir[0], tag);
	snprintf(err, sizeof(err), "%s/verify-%s.err", F.dir[0], tag);
	int st = run_prog(argv, NULL, out, err, 0, 60);
	text = (char *)read_file(err, &n);
	if (st != 0 || (text && strstr(text, name)))
		fail_msg("systemd-analyze verify %s: exit %d\n%s", u, st, text ? text : "");
	free(text);
}

/* The unit, with each shipped drop-in in its wsrv.service.d, passes
 * systemd-analyze verify. */
static void unit_and_drop_ins_verify(void **s)
{
	const char *unit = getenv("WSRV_UNIT"), *models = getenv("WSRV_UNIT_DROPIN");
	const char *metrics = getenv("WSRV_UNIT_METRICS_DROPIN");
	char u[512], d[512];
	size_t n;
	char *text;

	assert_non_null(unit);
	assert_non_null(models);
	assert_non_null(metrics);
	snprintf(u, sizeof(u), "%s/wsrv.service", F.dir[0]);
	snprintf(d, sizeof(d), "%s/wsrv.service.d", F.dir[0]);
	assert_int_equal(copy_file(unit, u, 0644), 0);
	assert_int_equal(mkdir(d, 0755), 0);
	assert_int_equal(copy_file(models, pjoin(d, "models.conf"), 0644), 0);
	assert_int_equal(copy_file(metrics, pjoin(d, "metrics.conf"), 0644), 0);
	verify(u, "wsrv.service", "wsrv");
	/* The unit names the wsrvd built here, and the models come from
	 * $WSRV_ARGS, the listener from $WSRV_METRICS_ARGS. */
	text = (char *)read_file(u, &n);
	assert_non_null(text);
	assert_non_null(strstr(text, "/server/daemon/wsrvd --socket /run/wsrv/wsrv.sock --allow-gid wsrv "
				     "--refuse-own-uid $WSRV_ARGS $WSRV_METRICS_ARGS"));
	free(text);
	text = (char *)read_file(models, &n);
	assert_non_null(text);
	assert_non_null(strstr(text, "Environment=\"WSRV_ARGS=--model "));
	assert_null(strstr(text, "--metrics-listen")); /* it would not start without AF_INET */
	free(text);
	text = (char *)read_file(metrics, &n);
	assert_non_null(text);
	assert_non_null(strstr(text, "Environment=\"WSRV_METRICS_ARGS=--metrics-listen 127.0.0.1:9464\""));
	assert_non_null(strstr(text, "\nRestrictAddressFamilies=AF_INET\n"));
	assert_non_null(strstr(text, "\nIPAddressAllow=127.0.0.1\n"));
	free(text);
}

/* wsrvd with --metrics-listen under the unit's address families: AF_UNIX
 * alone (the unit without the drop-in) exits 1 naming the likely cause;
 * with AF_INET added (the drop-in) the listener serves. */
static void listener_under_the_units_families(void **s)
{
	static const int unix_only[] = { AF_UNIX }, with_inet[] = { AF_UNIX, AF_INET };
	struct test_server ts = { 0 };
	char *body = NULL, model[512];

	snprintf(model, sizeof(model), "%s/model", F.dir[0]);
	assert_int_equal(make_model(model, "tiny", 1 << 20, 2, 1, 1), 0);
	ts.seccomp = families_filter(unix_only, 1);
	assert_true(server_start(&ts, "m", model, "--metrics-listen", "127.0.0.1:0", NULL) < 0);
	assert_true(server_log_has(&ts, "Address family not supported"));
	assert_true(server_log_has(&ts, "RestrictAddressFamilies="));
	server_stop(&ts, SIGTERM);
	rm_rf(ts.dir);
	memset(&ts, 0, sizeof(ts));
	ts.seccomp = families_filter(with_inet, 2);
	assert_int_equal(server_start(&ts, "m", model, "--metrics-listen", "127.0.0.1:0", NULL), 0);
	assert_int_equal(http_get(server_metrics_port(&ts), "/metrics", &body), 200);
	assert_non_null(body);
	free(body);
	server_done(&ts);
}

/* Issue 49 item 1: the unit ran wsrvd as root with no hardening
 * (systemd-analyze security: 9.6 UNSAFE). Now a user of its own, the
 * sandboxing that applies, exposure 5.0 at most; a usage error is not
 * restarted, and systemctl reload reloads every model. */
static void unit_is_hardened(void **s)
{
	const char *unit = getenv("WSRV_UNIT");
	const char *argv[] = { "/usr/bin/systemd-analyze", "security", "--offline=true", "--threshold=50", unit, NULL };
	char out[512], err[512];
	size_t n;
	char *text;

	(void)s;
	if (access(argv[0], X_OK) != 0)
		argv[0] = "/bin/systemd-analyze";
	if (access(argv[0], X_OK) != 0)
		skip(); /* no systemd here */
	assert_non_null(text = (char *)read_file(unit, &n));
	assert_non_null(strstr(text, "\nUser=wsrv\n"));
	assert_non_null(strstr(text, "\nRestartPreventExitStatus=2\n"));
	assert_non_null(strstr(text, "\nExecReload="));
	assert_non_null(strstr(text, "wsrvctl --socket /run/wsrv/wsrv.sock reload --all\n"));
	free(text);
	snprintf(out, sizeof(out), "%s/security.out", F.dir[0]);
	snprintf(err, sizeof(err), "%s/security.err", F.dir[0]);
	int st = run_prog(argv, NULL, out, err, 0, 60);
	text = (char *)read_file(out, &n);
	if (st != 0)
		fail_msg("systemd-analyze security: exit %d (exposure above 5.0?)\n%s", st, text ? text : "");
	assert_non_null(text);
	assert_non_null(strstr(text, "Overall exposure level for "));
	free(text);
}

/* The offline security score holds with the metrics drop-in, merged into
 * the unit as systemd would (its lines added to [Service]). */
static void hardened_with_the_metrics_drop_in(void **s)
{
	const char *unit = getenv("WSRV_UNIT"), *metrics = getenv("WSRV_UNIT_METRICS_DROPIN");
	char merged[512], out[512], err[512], *u, *m, *svc;
	const char *argv[] = { analyze(), "security", "--offline=true", "--threshold=50", NULL, NULL };
	size_t n, k;
	FILE *f;

	assert_non_null(u = (char *)read_file(unit, &n));
	assert_non_null(m = (char *)read_file(metrics, &k));
	assert_non_null(svc = strstr(m, "[Service]\n"));
	snprintf(merged, sizeof(merged), "%s/wsrv.service", F.dir[0]);
	assert_non_null(f = fopen(merged, "w"));
	/* The unit's [Install] last: the drop-in's lines go in [Service]. */
	char *inst = strstr(u, "\n[Install]");
	assert_non_null(inst);
	fprintf(f, "%.*s\n%s%s\n", (int)(inst - u), u, svc + strlen("[Service]\n"), inst);
	fclose(f);
	argv[4] = merged;
	snprintf(out, sizeof(out), "%s/security-metrics.out", F.dir[0]);
	snprintf(err, sizeof(err), "%s/security-metrics.err", F.dir[0]);
	int st = run_prog(argv, NULL, out, err, 0, 60);
	free(u);
	free(m);
	u = (char *)read_file(out, &n);
	if (st != 0)
		fail_msg("systemd-analyze security with the metrics drop-in: exit %d\n%s", st, u ? u : "");
	assert_non_null(u);
	assert_non_null(strstr(u, "Overall exposure level for "));
	free(u);
}

/* The copy service's unit passes systemd-analyze verify, runs as its own
 * user in group wsrv (wsrvd refuses its own user), and may open the GPUs'
 * device nodes and nothing else. */
static void copyd_unit_verifies(void **s)
{
	const char *unit = getenv("WSRV_COPYD_UNIT");
	char u[512];
	size_t n;
	char *text;

	assert_non_null(unit);
	snprintf(u, sizeof(u), "%s/wsrv-copyd.service", F.dir[0]);
	assert_int_equal(copy_file(unit, u, 0644), 0);
	verify(u, "wsrv-copyd.service", "copyd");
	text = (char *)read_file(u, &n);
	assert_non_null(text);
	assert_non_null(strstr(text, "/client/wsrv-copyd --socket /run/wsrv-copyd/copyd.sock --wsrvd /run/wsrv/wsrv.sock "
				     "--allow-gid wsrv $WSRV_COPYD_ARGS"));
	assert_non_null(strstr(text, "\nUser=wsrv-copyd\n"));
	assert_non_null(strstr(text, "\nDevicePolicy=closed\n"));
	assert_null(strstr(text, "PrivateDevices=yes"));
	/* No GPU to serve (exit 69) is not restarted on (issue 75 item 7). */
	assert_non_null(strstr(text, "\nRestartPreventExitStatus=2 69\n"));
	free(text);
}

FIXTURE_MAIN(F,
	cmocka_unit_test(unit_and_drop_ins_verify),
	cmocka_unit_test(copyd_unit_verifies),
	cmocka_unit_test(unit_is_hardened),
	cmocka_unit_test(hardened_with_the_metrics_drop_in),
	cmocka_unit_test(listener_under_the_units_families),
)
