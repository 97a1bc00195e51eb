// SPDX-License-Identifier: MIT
/* test_unit.c - the installed systemd unit (server/systemd): it and the
 * example drop-in that names the models pass systemd-analyze verify, and
 * the unit runs the wsrvd it names with what the drop-in sets (issue 41:
 * there was no unit to install, only one in the docs). */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fixture.h"

/* dir[0]: the unit and its drop-in folder, as systemd lays them out. */
static struct fixture F = { .tag = "unit", .models = { { "" } } };

static void unit_and_drop_in_verify(void **s)
{
	const char *unit = getenv("WSRV_UNIT"), *dropin = getenv("WSRV_UNIT_DROPIN");
	/* --man=no: wsrvd(8) is installed with the unit, not here. */
	const char *argv[] = { "/usr/bin/systemd-analyze", "verify", "--man=no", NULL, NULL };
	char u[512], d[512], out[512], err[512];
	size_t n;
	char *text;

	if (access(argv[0], X_OK) != 0)
		argv[0] = "/bin/systemd-analyze";
	if (access(argv[0], X_OK) != 0)
		skip(); /* no systemd here: nothing to verify with */
	assert_non_null(unit);
	assert_non_null(dropin);
	snprintf(u, sizeof(u), "%s/wsrv.service", F.dir[0]);
	snprintf(d, sizeof(d), "%s/wsrv.service.d", F.dir[0]);
	assert_int_equal(copy_file(unit, u, 0644), 0);
	assert_int_equal(mkdir(d, 0755), 0);
	snprintf(d, sizeof(d), "%s/wsrv.service.d/models.conf", F.dir[0]);
	assert_int_equal(copy_file(dropin, d, 0644), 0);
	argv[3] = u;
	snprintf(out, sizeof(out), "%s/verify.out", F.dir[0]);
	snprintf(err, sizeof(err), "%s/verify.err", F.dir[0]);
	int st = run_prog(argv, NULL, out, err, 0, 60);
	text = (char *)read_file(err, &n);
	if (st != 0 || (text && strstr(text, "wsrv.service")))
		fail_msg("systemd-analyze verify %s: exit %d\n%s", u, st, text ? text : "");
	free(text);
	/* The unit names the wsrvd built here, and the models come from
	 * $WSRV_ARGS, which the drop-in sets. */
	text = (char *)read_file(u, &n);
	assert_non_null(text);
	assert_non_null(strstr(text, "/server/daemon/wsrvd --socket /run/wsrv/wsrv.sock --allow-gid wsrv $WSRV_ARGS"));
	free(text);
	text = (char *)read_file(d, &n);
	assert_non_null(text);
	assert_non_null(strstr(text, "Environment=\"WSRV_ARGS=--model "));
	free(text);
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

FIXTURE_MAIN(F,
	cmocka_unit_test(unit_and_drop_in_verify),
	cmocka_unit_test(unit_is_hardened),
)
