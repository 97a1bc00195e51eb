// SPDX-License-Identifier: MIT
/* prog_path.h - a program of this build, found next to the one running:
 * one rule for the tests' and the benchmarks' wsrvd and wsrv-copyd. */
#ifndef WSRV_PROG_PATH_H
#define WSRV_PROG_PATH_H

/* rel (say "../server/daemon/wsrvd") from the running program's folder
 * when it exists there (a build tree), else $env when set, else dflt.
 * The string is static per call site's buf (cap bytes). */
const char *prog_path(char *buf, unsigned long cap, const char *rel, const char *env, const char *dflt);

#endif
