// SPDX-License-Identifier: MIT
/* cliopt.c - getopt's list and --help from a daemon's option table
 * (cliopt.h). */
#include "cliopt.h"

#include <errno.h>
#include <string.h>

#include "escape.h"

void cliopt_usage(FILE *f, const struct cli_opt *opts, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		const struct cli_opt *o = &opts[i];
		int w = fprintf(f, "  --%s%s%s", o->name, o->arg ? " " : "", o->arg ? o->arg : "");
		fprintf(f, "%*s", w < CLIOPT_HELP_COL ? CLIOPT_HELP_COL - w : 2, "");
		for (const char *h = o->help, *nl; *h; h = nl ? nl + 1 : h + strlen(h)) {
			nl = strchr(h, '\n');
			fprintf(f, "%.*s\n", nl ? (int)(nl - h) : (int)strlen(h), h);
			if (nl)
				fprintf(f, "%*s", CLIOPT_HELP_COL, "");
		}
	}
}

void cliopt_getopt(const struct cli_opt *opts, size_t n, struct option *out)
{
	for (size_t i = 0; i < n; i++)
		out[i] = (struct option){ opts[i].name, opts[i].arg ? required_argument : no_argument, NULL,
					  opts[i].code };
}

/* The entry named exactly by word (its first len bytes), or NULL. */
static const struct option *named(const struct option *o, const char *word, size_t len)
{
	for (; o->name; o++)
		if (strlen(o->name) == len && strncmp(o->name, word, len) == 0)
			return o;
	return NULL;
}

/* The sentence for word, which names no option: the options it begins. */
static int not_named(const struct option *o, const char *word, size_t len, char *err, size_t errlen)
{
	char name[64];
	size_t n = 0, k = 0;

	snprintf(name, sizeof(name), "%.*s", (int)(len < 60 ? len : 60), word);
	n = (size_t)snprintf(err, errlen, "unknown option '--%s'", esc(name));
	for (; o->name && n < errlen; o++)
		if (strncmp(o->name, word, len) == 0)
			n += (size_t)snprintf(err + n, errlen - n, "%s--%s", k++ ? ", " : ": did you mean ", o->name);
	if (k && n < errlen)
		snprintf(err + n, errlen - n, "?");
	return -EINVAL;
}

int cliopt_exact(int argc, char *const argv[], const struct option *longopts, char *err, size_t errlen)
{
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i], *eq;
		const struct option *o;
		size_t len;

		if (strcmp(a, "--") == 0)
			break;
		if (strncmp(a, "--", 2) != 0 || !a[2])
			continue;
		eq = strchr(a + 2, '=');
		len = eq ? (size_t)(eq - a - 2) : strlen(a + 2);
		if (!(o = named(longopts, a + 2, len)))
			return not_named(longopts, a + 2, len, err, errlen);
		if (o->has_arg == required_argument && !eq)
			i++; /* its value, whatever it looks like */
	}
	return 0;
}
