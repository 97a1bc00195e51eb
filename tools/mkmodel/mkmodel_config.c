// SPDX-License-Identifier: MIT
/* mkmodel_config.c - config.json keys a test sets beyond the preset's:
 * rope_scaling and hidden_act, so examples can be checked on models whose
 * config asks for more than the plain architecture. */
#include "mkmodel.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

/* TYPE:FACTOR as an object; NULL (and e set) when arg is not one. */
static json_t *rope_short(json_t *config, const char *arg, struct errinfo *e)
{
	const char *colon = strchr(arg, ':');
	char type[16], *end;
	double f;

	if (!colon || (size_t)(colon - arg) >= sizeof(type)) {
		err_set(e, -EINVAL, "--rope-scaling '%s': expected TYPE:FACTOR or a JSON object", arg);
		return NULL;
	}
	memcpy(type, arg, (size_t)(colon - arg));
	type[colon - arg] = 0;
	f = strtod(colon + 1, &end);
	if (end == colon + 1 || *end || !(f >= 1.0 && f <= 1024.0)) {
		err_set(e, -EINVAL, "--rope-scaling '%s': the factor must be a number from 1 to 1024", arg);
		return NULL;
	}
	if (strcmp(type, "llama3") == 0) {
		json_int_t orig = json_integer_value(json_object_get(config, "max_position_embeddings"));
		json_object_set_new(config, "max_position_embeddings", json_integer((json_int_t)(orig * f)));
		return json_pack("{s:s, s:f, s:f, s:f, s:I}", "rope_type", "llama3", "factor", f,
				 "low_freq_factor", 1.0, "high_freq_factor", 4.0,
				 "original_max_position_embeddings", orig);
	}
	if (strcmp(type, "linear") && strcmp(type, "dynamic")) {
		err_set(e, -EINVAL, "--rope-scaling '%s': TYPE is linear, dynamic or llama3 (a JSON object for any other)", arg);
		return NULL;
	}
	return json_pack("{s:s, s:f}", "rope_type", type, "factor", f);
}

int mk_config_rope(struct mk_spec *spec, const char *arg, struct errinfo *e)
{
	json_t *v;

	if (arg[0] == '{') {
		json_error_t je;
		v = json_loads(arg, 0, &je);
		if (!v || !json_is_object(v)) {
			json_decref(v);
			return err_set(e, -EINVAL, "--rope-scaling: not a JSON object: %s", v ? "" : je.text);
		}
	} else if (!(v = rope_short(spec->config, arg, e))) {
		return -EINVAL;
	}
	json_object_set_new(spec->config, "rope_scaling", v);
	return 0;
}

int mk_config_act(struct mk_spec *spec, const char *name, struct errinfo *e)
{
	if (json_object_set_new(spec->config, "hidden_act", json_string(name)) < 0)
		return err_set(e, -ENOMEM, "--hidden-act '%s': not a UTF-8 string", name);
	return 0;
}
