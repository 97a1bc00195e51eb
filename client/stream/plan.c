// SPDX-License-Identifier: MIT
/* plan.c - where each tensor lives: residency rules over tensor names, from
 * JSON ({"residency": {...}, "budget": "4G", "tp_plan": {...}, "stages": S,
 * "share_resident": true}) or the API.
 *
 * A pattern matches a tensor's module path (its name without a final
 * ".weight", ".bias" or ".weight_scale_inv"), with or without a leading
 * "model."; "*" matches one dot-free component, as in Hugging Face tp_plans.
 * The first matching rule wins. */
#include <errno.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "wire.h"
#include "plan.h"
#include "rank_view.h"
#include "tensor_glob.h"
#include "units.h"

#define MAX_RULES 1024

WSRV_EXPORT int wsrv_plan_new(struct wsrv_plan **out)
{
	struct wsrv_plan *p;

	CL_NEED(out);
	if (!(p = calloc(1, sizeof(*p))))
		return cl_err(-ENOMEM, "out of memory");
	p->stages = 1;
	*out = p;
	return 0;
}

WSRV_EXPORT void wsrv_plan_free(struct wsrv_plan *p)
{
	if (!p)
		return;
	for (size_t i = 0; i < p->nrules; i++)
		free(p->rules[i].pattern);
	free(p->rules);
	json_decref(p->tp_plan);
	free(p);
}

/* A pattern is dot-separated non-empty components of [A-Za-z0-9_-] or a
 * lone "*". */
static int pattern_ok(const char *s)
{
	size_t comp = 0;
	bool star = false;

	if (!*s)
		return 0;
	for (; *s; s++) {
		if (*s == '.') {
			if (comp == 0)
				return 0;
			comp = 0;
			star = false;
			continue;
		}
		if (*s == '*') {
			if (comp > 0)
				return 0;
			star = true;
		} else if (star || !((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') ||
				      (*s >= '0' && *s <= '9') || *s == '_' || *s == '-')) {
			return 0;
		}
		comp++;
	}
	return comp > 0;
}

WSRV_EXPORT int wsrv_plan_add(struct wsrv_plan *p, const char *pattern, int residency, unsigned k)
{
	struct plan_rule *v;

	CL_NEED(p);
	CL_NEED(pattern);
	if (!pattern_ok(pattern))
		return cl_err(-EINVAL, "plan: '%s' is not a pattern (dot-separated names, '*' for one whole component)",
			      pattern);
	if (residency < WSRV_STREAMED || residency > WSRV_LAYER_SHARD_PEER ||
	    residency == WSRV_NOT_IN_VIEW)
		return cl_err(-EINVAL, "plan: unknown residency %d for '%s'", residency, pattern);
	if ((residency == WSRV_LAYER_SHARD || residency == WSRV_LAYER_SHARD_PEER) && (k < 1 || k > 1024))
		return cl_err(-EINVAL, "plan: layer_shard for '%s' needs a group of 1 to 1024 workers", pattern);
	if (p->nrules >= MAX_RULES)
		return cl_err(-E2BIG, "plan: more than %d rules", MAX_RULES);
	v = realloc(p->rules, (p->nrules + 1) * sizeof(*v));
	if (!v)
		return cl_err(-ENOMEM, "out of memory");
	p->rules = v;
	v[p->nrules] = (struct plan_rule){ strdup(pattern), residency, k };
	if (!v[p->nrules].pattern)
		return cl_err(-ENOMEM, "out of memory");
	p->nrules++;
	return 0;
}

WSRV_EXPORT int wsrv_plan_set_budget(struct wsrv_plan *p, uint64_t bytes)
{
	CL_NEED(p);
	p->budget = bytes;
	return 0;
}

WSRV_EXPORT int wsrv_plan_set_expert_cache(struct wsrv_plan *p, uint32_t slots, uint64_t bytes)
{
	CL_NEED(p);
	if (slots && bytes)
		return cl_err(-EINVAL, "plan: an expert cache of slots or of bytes, not both");
	p->expert_slots = slots;
	p->expert_bytes = bytes;
	p->expert_fraction = 0;
	return 0;
}

/* "layer_shard:K" or "layer_shard:K:peer" (s past "layer_shard:"). */
static int parse_shard(const char *pat, const char *s, int *res, unsigned *k)
{
	char *end;
	unsigned long v = strtoul(s, &end, 10);

	*k = (unsigned)v;
	*res = WSRV_LAYER_SHARD;
	if (end == s || (*end && strcmp(end, ":peer") != 0) || v > 1024)
		return cl_err(-EINVAL, "plan: '%s': layer_shard:K or layer_shard:K:peer, K a group of 1 to 1024, "
			      "not layer_shard:%s", pat, s);
	if (*end)
		*res = WSRV_LAYER_SHARD_PEER;
	return 0;
}

/* "resident", "streamed", "layer_shard:K[:peer]" or {"layer_shard": K}
 * with "source": "peer" or "host" (the default). */
static int parse_residency(const char *pat, json_t *v, int *res, unsigned *k)
{
	const char *s = json_string_value(v);

	if (json_is_object(v) && json_is_integer(json_object_get(v, "layer_shard"))) {
		const char *src = json_string_value(json_object_get(v, "source"));
		if (json_object_get(v, "source") && (!src || (strcmp(src, "peer") && strcmp(src, "host"))))
			return cl_err(-EINVAL, "plan: '%s': a layer shard's source is \"peer\" or \"host\"", pat);
		if (json_object_size(v) > (json_object_get(v, "source") ? 2u : 1u))
			return cl_err(-EINVAL, "plan: '%s': a layer shard is {\"layer_shard\": K, \"source\": "
				      "\"peer\"|\"host\"}, nothing else", pat);
		*res = src && strcmp(src, "peer") == 0 ? WSRV_LAYER_SHARD_PEER : WSRV_LAYER_SHARD;
		*k = (unsigned)json_integer_value(json_object_get(v, "layer_shard"));
		return 0;
	}
	if (s && strcmp(s, "resident") == 0)
		*res = WSRV_RESIDENT;
	else if (s && strcmp(s, "experts_on_demand") == 0)
		*res = WSRV_EXPERTS_ON_DEMAND;
	else if (s && strcmp(s, "streamed") == 0)
		*res = WSRV_STREAMED;
	else if (s && strncmp(s, "layer_shard:", 12) == 0 && s[12])
		return parse_shard(pat, s + 12, res, k);
	else
		return cl_err(-EINVAL, "plan: '%s': unknown residency %s (resident, streamed, layer_shard:K, "
			      "layer_shard:K:peer, experts_on_demand)", pat, s ? s : "(not a string)");
	return 0;
}

static int parse_budget(json_t *b, uint64_t *out)
{
	const char *s = json_string_value(b);

	if (json_is_integer(b) && json_integer_value(b) >= 0) {
		*out = (uint64_t)json_integer_value(b);
		return 0;
	}
	if (!s)
		return cl_err(-EINVAL, "plan: budget must be bytes or a string like \"4G\"");
	if (parse_size(s, out) < 0)
		return cl_err(-EINVAL, "plan: budget '%s' is not a size (bytes, or a number with K, M, G, T)", s);
	return 0;
}

/* {"slots": N} | {"bytes": B or "2G"} | {"fraction": F}, one of them. */
static int parse_expert_cache(struct wsrv_plan *p, json_t *c)
{
	json_t *sl = json_object_get(c, "slots"), *b = json_object_get(c, "bytes");
	json_t *f = json_object_get(c, "fraction");
	int r;

	if (!json_is_object(c) || json_object_size(c) != 1 || !(sl || b || f))
		return cl_err(-EINVAL, "plan: \"expert_cache\" is {\"slots\": N}, {\"bytes\": SIZE} or {\"fraction\": F}");
	if (sl) {
		if (!json_is_integer(sl) || json_integer_value(sl) < 1 || json_integer_value(sl) > (1 << 24))
			return cl_err(-EINVAL, "plan: expert_cache slots is 1 to 16777216");
		p->expert_slots = (uint32_t)json_integer_value(sl);
	} else if (b) {
		if ((r = parse_budget(b, &p->expert_bytes)) < 0)
			return r;
		if (!p->expert_bytes)
			return cl_err(-EINVAL, "plan: expert_cache bytes must be more than 0");
	} else {
		if (!json_is_number(f) || !(json_number_value(f) > 0) || json_number_value(f) > 1)
			return cl_err(-EINVAL, "plan: expert_cache fraction is more than 0 and at most 1");
		p->expert_fraction = json_number_value(f);
	}
	return 0;
}

static int from_json(struct wsrv_plan *p, json_t *root)
{
	json_t *res = json_object_get(root, "residency"), *v;
	struct rv_rules rules;
	struct errinfo e;
	const char *pat;
	int r;

	if (!json_is_object(root))
		return cl_err(-EINVAL, "plan: not a JSON object");
	if (res && !json_is_object(res))
		return cl_err(-EINVAL, "plan: \"residency\" must map patterns to residencies");
	json_object_foreach(res, pat, v) {
		int kind = 0;
		unsigned k = 0;
		if ((r = parse_residency(pat, v, &kind, &k)) < 0 || (r = wsrv_plan_add(p, pat, kind, k)) < 0)
			return r;
	}
	if (json_object_get(root, "budget") &&
	    (r = parse_budget(json_object_get(root, "budget"), &p->budget)) < 0)
		return r;
	if ((r = rv_rules_from_plan(root, &rules, &e)) < 0)
		return cl_err(r, "%s", e.msg);
	p->tp_plan = json_incref((json_t *)rules.tp_plan);
	p->stages = rules.stages;
	v = json_object_get(root, "share_resident");
	if (v && !json_is_boolean(v))
		return cl_err(-EINVAL, "plan: \"share_resident\" is true or false");
	p->no_share = v && json_is_false(v);
	if ((v = json_object_get(root, "expert_cache")) && (r = parse_expert_cache(p, v)) < 0)
		return r;
	return 0;
}

WSRV_EXPORT int wsrv_plan_parse(const char *json, size_t len, struct wsrv_plan **out)
{
	struct wsrv_plan *p;
	json_error_t je;
	json_t *root;
	int r;

	CL_NEED(json);
	CL_NEED(out);
	root = json_loadb(json, len, JSON_REJECT_DUPLICATES, &je);
	if (!root)
		return cl_err(-EINVAL, "plan: not valid JSON: %s (line %d)", je.text, je.line);
	r = wsrv_plan_new(&p);
	if (r == 0 && (r = from_json(p, root)) < 0)
		wsrv_plan_free(p);
	json_decref(root);
	if (r == 0)
		*out = p;
	return r;
}

WSRV_EXPORT int wsrv_plan_load(const char *path, struct wsrv_plan **out)
{
	FILE *f;
	char *buf;
	long n;
	int r;

	CL_NEED(path);
	CL_NEED(out);
	if (!(f = fopen(path, "re")))
		return cl_err(-errno, "plan: %s: %s", path, strerror(errno));
	if (fseek(f, 0, SEEK_END) < 0 || (n = ftell(f)) < 0 || n > (16 << 20) || fseek(f, 0, SEEK_SET) < 0) {
		fclose(f);
		return cl_err(-EFBIG, "plan: %s: unreadable or larger than 16 MiB", path);
	}
	buf = malloc((size_t)n + 1);
	if (!buf || fread(buf, 1, (size_t)n, f) != (size_t)n) {
		free(buf);
		fclose(f);
		return cl_err(-EIO, "plan: %s: cannot read", path);
	}
	fclose(f);
	r = wsrv_plan_parse(buf, (size_t)n, out);
	free(buf);
	return r;
}

const struct plan_rule *plan_match(const struct wsrv_plan *p, const char *name)
{
	for (size_t i = 0; p && i < p->nrules; i++)
		if (tensor_pattern_match(p->rules[i].pattern, name))
			return &p->rules[i];
	return NULL;
}
