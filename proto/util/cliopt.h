// SPDX-License-Identifier: MIT
/* cliopt.h - a daemon's options as one table: getopt's list and --help are
 * made from it (and, through --help, the man page's check, tools/man/
 * check-pages), so that the three never drift apart. wsrvd and wsrv-copyd
 * both use it (cliopt.c). */
#ifndef WSRV_CLIOPT_H
#define WSRV_CLIOPT_H

#include <getopt.h>
#include <stddef.h>
#include <stdio.h>

/* One option: its name, its argument's name (NULL: it takes none), its
 * getopt code and its --help text (lines after the first are indented
 * under it). */
struct cli_opt {
	const char *name;
	const char *arg;
	int code;
	const char *help;
};

/* --help's column: a lead wider than this puts the text two spaces after. */
#define CLIOPT_HELP_COL 28

/* Writes each of the n options as --help shows them, in the table's order. */
void cliopt_usage(FILE *f, const struct cli_opt *opts, size_t n);

/* getopt_long's entries for the n options into out (n entries; the caller
 * adds the terminator, or more entries after them). */
void cliopt_getopt(const struct cli_opt *opts, size_t n, struct option *out);

/* Every --NAME (or --NAME=VALUE) in argv[1..argc), up to "--", must name
 * an option of longopts (ended by a zero entry) exactly: getopt_long
 * takes an unambiguous prefix as the option (--hugepage for --hugepages)
 * and calls an ambiguous one unknown (--max). A required argument given
 * apart is skipped. 0, or -EINVAL with a sentence in err (errlen bytes)
 * naming the word and the options that begin with it. */
int cliopt_exact(int argc, char *const argv[], const struct option *longopts, char *err, size_t errlen);

#endif
