/* wsrvd.c - the weight server: loads its models into sealed shared memory.
 *
 * Serving clients over the Unix socket is the next step of the build (see
 * docs/design.md, "what exists now"); until then wsrvd runs with
 * --load-only: it loads every model as it will when serving, reports what it
 * got, and exits. That is also a useful pre-flight check of a host's disk,
 * memory, NUMA and huge-page setup.
 */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "load_args.h"
#include "log.h"
#include "report.h"

#define MAX_MODELS 64

struct args {
	struct load_opts load;
	const char *names[MAX_MODELS];
	const char *paths[MAX_MODELS];
	char *specs[MAX_MODELS];
	int nmodels;
	int load_only;
	int json;
};

static void usage(FILE *f)
{
	fprintf(f,
		"usage: wsrvd --load-only --model NAME=PATH [--model NAME=PATH ...] [options]\n"
		"  --model NAME=PATH         a .safetensors file or a Hugging Face model directory\n"
		"  --load-only               load, report and exit\n"
		"  --json                    report as JSON on stdout\n"
		"  --quiet / --verbose       log less / more\n"
		"%s", load_options_help);
}

static int add_model(struct args *a, const char *spec)
{
	char *s, *eq;

	if (a->nmodels >= MAX_MODELS) {
		log_err("at most %d models", MAX_MODELS);
		return -E2BIG;
	}
	s = strdup(spec);
	eq = s ? strchr(s, '=') : NULL;
	if (!eq || eq == s || !eq[1]) {
		log_err("--model '%s': expected NAME=PATH", spec);
		free(s);
		return -EINVAL;
	}
	*eq = 0;
	a->specs[a->nmodels] = s;
	a->names[a->nmodels] = s;
	a->paths[a->nmodels++] = eq + 1;
	return 0;
}

enum { O_MODEL = 1, O_LOAD_ONLY, O_JSON, O_QUIET, O_VERBOSE, O_HELP };

static int parse(int argc, char **argv, struct args *a)
{
	static const struct option own[] = {
		{ "model", required_argument, NULL, O_MODEL },
		{ "load-only", no_argument, NULL, O_LOAD_ONLY },
		{ "json", no_argument, NULL, O_JSON },
		{ "quiet", no_argument, NULL, O_QUIET },
		{ "verbose", no_argument, NULL, O_VERBOSE },
		{ "help", no_argument, NULL, O_HELP },
	};
	struct option all[sizeof(own) / sizeof(own[0]) + LOAD_OPTIONS_COUNT + 1];
	struct errinfo e;
	int c, r;

	memcpy(all, own, sizeof(own));
	memcpy(all + sizeof(own) / sizeof(own[0]), load_long_options,
	       (LOAD_OPTIONS_COUNT + 1) * sizeof(struct option));
	while ((c = getopt_long(argc, argv, "", all, NULL)) != -1) {
		r = load_args_handle(c, optarg, &a->load, &e);
		if (r < 0) {
			log_err("%s", e.msg);
			return r;
		}
		if (r == 1)
			continue;
		switch (c) {
		case O_MODEL: if (add_model(a, optarg) < 0) return -EINVAL; break;
		case O_LOAD_ONLY: a->load_only = 1; break;
		case O_JSON: a->json = 1; break;
		case O_QUIET: log_set_level(LOG_WARN); break;
		case O_VERBOSE: log_set_level(LOG_DEBUG); break;
		case O_HELP: usage(stdout); exit(0);
		default: usage(stderr); return -EINVAL;
		}
	}
	if (optind < argc || a->nmodels == 0) {
		usage(stderr);
		return -EINVAL;
	}
	return 0;
}

static int load_all(struct args *a)
{
	json_t *arr = json_array();
	int status = 0;

	for (int i = 0; i < a->nmodels; i++) {
		struct loaded_model *lm;
		struct errinfo e;

		a->load.loader.progress = !a->json;
		if (model_load(a->names[i], a->paths[i], &a->load, &lm, &e) < 0) {
			log_err("model %s: %s", a->names[i], e.msg);
			status = 1;
			continue;
		}
		log_info("model %s loaded: %zu tensors, %.2f GB in %.3f s (%.2f GB/s)",
			 a->names[i], lm->model->ntensors, (double)lm->model->data_bytes / 1e9,
			 lm->stats.seconds,
			 lm->stats.seconds > 0 ? (double)lm->model->data_bytes / lm->stats.seconds / 1e9 : 0.0);
		if (a->json)
			json_array_append_new(arr, report_loaded_json(lm));
		else
			report_loaded(stdout, lm);
		loaded_model_free(lm);
	}
	if (a->json) {
		json_dumpf(arr, stdout, JSON_INDENT(2));
		fputc('\n', stdout);
	}
	json_decref(arr);
	return status;
}

int main(int argc, char **argv)
{
	struct args a = { 0 };
	int status;

	log_set_ident("wsrvd");
	if (parse(argc, argv, &a) < 0) {
		status = 2;
	} else if (!a.load_only) {
		log_err("serving clients is not built yet; run with --load-only to load, report and exit");
		status = 2;
	} else {
		status = load_all(&a);
	}
	for (int i = 0; i < a.nmodels; i++)
		free(a.specs[i]);
	free((void *)a.load.model.layer_patterns);
	return status;
}
