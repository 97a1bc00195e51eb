// SPDX-License-Identifier: MIT
/* cliarg.h - command-line numbers for the programs (never the library):
 * a bad one is a sentence on stderr and exit status 2, never a silent 0. */
#ifndef WSRV_CLIARG_H
#define WSRV_CLIARG_H

#include <stdint.h>

/* The whole decimal number s, from lo to hi; else "PROG: OPT 'S': expected
 * a whole number from LO to HI" and exit(2). */
long cliarg_long(const char *prog, const char *opt, const char *s, long lo, long hi);

/* A finite number from lo to hi; else a sentence and exit(2). */
double cliarg_double(const char *prog, const char *opt, const char *s, double lo, double hi);

/* A size ("64M", "1.5G"; parse_size) from lo to hi; else exit(2). */
uint64_t cliarg_size(const char *prog, const char *opt, const char *s, uint64_t lo, uint64_t hi);

#endif
