// SPDX-License-Identifier: MIT
/* model_dir.c - finding a model's files: one .safetensors file, or a Hugging
 * Face directory whose index must agree with its shards exactly. */
#include "model.h"

#include "file_open.h"

#include <dirent.h>
#include <fcntl.h>
#include <stdbool.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define INDEX_NAME "model.safetensors.index.json"

static char *join(const char *dir, const char *name)
{
	char *p;

	if (asprintf(&p, "%s/%s", dir, name) < 0)
		return NULL;
	return p;
}

static int add_file(struct model *m, const char *path, struct errinfo *e)
{
	struct st_file **v = realloc(m->files, (m->nfiles + 1) * sizeof(*v));
	int r;

	if (!v)
		return err_set(e, -ENOMEM, "out of memory");
	m->files = v;
	r = st_file_open(path, &m->files[m->nfiles], e);
	if (r < 0)
		return r;
	m->nfiles++;
	return 0;
}

static bool ends_with(const char *s, const char *suffix)
{
	size_t a = strlen(s), b = strlen(suffix);

	return a >= b && strcmp(s + a - b, suffix) == 0;
}

/* A shard named by the index must be a plain file name in the directory. */
static bool plain_name(const char *s)
{
	return *s && !strchr(s, '/') && strcmp(s, ".") && strcmp(s, "..");
}

static int cmp_str(const void *a, const void *b)
{
	return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* Collects the distinct shard names of weight_map, sorted. */
static int shard_names(json_t *wm, const char *ipath, const char ***out,
		       size_t *n, struct errinfo *e)
{
	json_t *seen = json_object();
	const char *k, *name;
	json_t *v;
	size_t i = 0;

	if (!seen)
		return err_set(e, -ENOMEM, "out of memory");
	json_object_foreach(wm, k, v) {
		if (!json_is_string(v) || !plain_name(json_string_value(v))) {
			json_decref(seen);
			return err_set(e, -EINVAL,
				       "%s: weight_map entry for tensor '%s' is not a file name in the model directory",
				       ipath, k);
		}
		json_object_set(seen, json_string_value(v), json_true());
	}
	*out = calloc(json_object_size(seen) + 1, sizeof(char *));
	if (!*out) {
		json_decref(seen);
		return err_set(e, -ENOMEM, "out of memory");
	}
	/* The names live in wm's values, which outlive this list. */
	json_object_foreach(wm, k, v) {
		name = json_string_value(v);
		if (json_object_get(seen, name)) {
			(*out)[i++] = name;
			json_object_del(seen, name);
		}
	}
	json_decref(seen);
	qsort(*out, i, sizeof(char *), cmp_str);
	*n = i;
	return 0;
}

static bool file_has(const struct st_file *sf, const char *name)
{
	for (size_t i = 0; i < sf->ntensors; i++)
		if (strcmp(sf->tensors[i].name, name) == 0)
			return true;
	return false;
}

/* Tensor t sits in shard `in` while the index places it in `want`. */
static int misplaced(const struct model *m, const char *ipath, const char *t,
		     const char *in, const char *want, struct errinfo *e)
{
	for (size_t f = 0; f < m->nfiles; f++)
		if (strcmp(m->files[f]->label, want) == 0 && file_has(m->files[f], t))
			return err_set(e, -EINVAL, "%s: tensor '%s' appears in two shards: %s and %s",
				       ipath, t, want, in);
	return err_set(e, -EINVAL, "%s: tensor '%s' is in %s but the index places it in %s",
		       ipath, t, in, want);
}

/* Every tensor of every shard is listed under that shard, and every listed
 * tensor was found. */
static int check_index(struct model *m, json_t *wm, const char *ipath,
		       struct errinfo *e)
{
	size_t matched = 0;

	for (size_t f = 0; f < m->nfiles; f++) {
		const struct st_file *sf = m->files[f];
		for (size_t i = 0; i < sf->ntensors; i++) {
			const char *t = sf->tensors[i].name;
			const char *want = json_string_value(json_object_get(wm, t));
			if (!want)
				return err_set(e, -EINVAL,
					       "%s: tensor '%s' is not listed in %s",
					       sf->label, t, INDEX_NAME);
			if (strcmp(want, sf->label) != 0)
				return misplaced(m, ipath, t, sf->label, want, e);
			matched++;
		}
	}
	if (matched == json_object_size(wm))
		return 0;
	/* Find one listed tensor that no shard holds, to name it. */
	for (size_t f = 0; f < m->nfiles; f++) {
		const struct st_file *sf = m->files[f];
		const char *k;
		json_t *v;
		json_object_foreach(wm, k, v) {
			if (strcmp(json_string_value(v), sf->label) != 0)
				continue;
			if (!file_has(sf, k))
				return err_set(e, -EINVAL,
					       "%s: tensor '%s' is listed under %s, which does not contain it",
					       ipath, k, sf->label);
		}
	}
	return err_set(e, -EINVAL, "%s: index and shards disagree", ipath);
}

static int open_shards(struct model *m, const char *dir, const char *ipath,
		       const char **names, size_t n, struct errinfo *e)
{
	for (size_t i = 0; i < n; i++) {
		char *p = join(dir, names[i]);
		struct stat st;
		int r;

		if (!p)
			return err_set(e, -ENOMEM, "out of memory");
		if (stat(p, &st) < 0) {
			r = err_set(e, -errno, "%s: shard %s is missing: %s", ipath,
				    names[i], strerror(errno));
			free(p);
			return r;
		}
		r = add_file(m, p, e);
		free(p);
		if (r < 0)
			return r;
	}
	return 0;
}

/* An index of DeepSeek-V3's size is about 9 MB; config.json far less. */
#define JSON_FILE_MAX (256u << 20)

/* One read of the whole file, then the parse: jansson's json_loadfd reads
 * a byte per system call. */
static int load_json_file(const char *path, json_t **out, struct errinfo *e)
{
	json_error_t jerr;
	size_t len;
	char *buf;
	json_t *j;
	int r = file_read_all(path, JSON_FILE_MAX, &buf, &len, e);

	if (r < 0)
		return r;
	j = json_loadb(buf, len, JSON_REJECT_DUPLICATES, &jerr);
	free(buf);
	if (!j)
		return err_set(e, -EINVAL, "%s: not valid JSON: %s (line %d)", path,
			       jerr.text, jerr.line);
	if (!json_is_object(j)) {
		json_decref(j);
		return err_set(e, -EINVAL, "%s: not a JSON object", path);
	}
	*out = j;
	return 0;
}

static int open_index(struct model *m, const char *dir, const char *ipath,
		      struct errinfo *e)
{
	const char **names = NULL;
	json_t *idx, *wm;
	size_t n = 0;
	int r;

	r = load_json_file(ipath, &idx, e);
	if (r < 0)
		return r;
	wm = json_object_get(idx, "weight_map");
	if (!json_is_object(wm) || json_object_size(wm) == 0)
		r = err_set(e, -EINVAL, "%s: no weight_map object, or an empty one", ipath);
	else
		r = shard_names(wm, ipath, &names, &n, e);
	if (r == 0)
		r = open_shards(m, dir, ipath, names, n, e);
	if (r == 0)
		r = check_index(m, wm, ipath, e);
	free(names);
	json_decref(idx);
	return r;
}

/* The preferred file (model.safetensors[.index.json]) in dir, or else the
 * only *.safetensors (*.safetensors.index.json when index) there; -ENOENT
 * when there is none, -EINVAL when there are several. */
static int find_single(const char *dir, bool index, char **out, struct errinfo *e)
{
	const char *suffix = index ? ".safetensors.index.json" : ".safetensors";
	const char *preferred = index ? INDEX_NAME : "model.safetensors";
	char first[256] = "", second[256] = "";
	bool have_preferred = false;
	DIR *d = opendir(dir);
	struct dirent *de;
	size_t count = 0;

	if (!d)
		return err_set(e, -errno, "%s: cannot open directory: %s", dir, strerror(errno));
	while ((de = readdir(d))) {
		if (!ends_with(de->d_name, suffix))
			continue;
		have_preferred |= strcmp(de->d_name, preferred) == 0;
		snprintf(count ? second : first, sizeof(first), "%s", de->d_name);
		count++;
	}
	closedir(d);
	if (count == 0)
		return -ENOENT;
	if (count > 1 && !have_preferred)
		return err_set(e, -EINVAL, "%s: several %s files (%s, %s, ...) and no %s",
			       dir, suffix, first, second, preferred);
	*out = strdup(have_preferred ? preferred : first);
	return *out ? 0 : err_set(e, -ENOMEM, "out of memory");
}

static int open_config(struct model *m, const char *dir, struct errinfo *e)
{
	char *p = join(dir, "config.json");
	struct stat st;
	int r = 0;

	if (!p)
		return err_set(e, -ENOMEM, "out of memory");
	if (stat(p, &st) == 0)
		r = load_json_file(p, &m->config, e);
	free(p);
	return r;
}

/* The files of the model directory dir, into m->files. */
int model_dir_files(const char *dir, struct model *m, struct errinfo *e)
{
	char *name = NULL, *p;
	int r;

	r = find_single(dir, true, &name, e);
	if (r == -ENOENT)
		r = find_single(dir, false, &name, e);
	if (r == -ENOENT)
		return err_set(e, -ENOENT,
			       "%s: no .safetensors file and no %s in this directory",
			       dir, INDEX_NAME);
	if (r < 0)
		return r;
	p = join(dir, name);
	if (!p)
		r = err_set(e, -ENOMEM, "out of memory");
	else if (ends_with(name, ".index.json"))
		r = open_index(m, dir, p, e);
	else
		r = add_file(m, p, e);
	free(p);
	free(name);
	return r < 0 ? r : open_config(m, dir, e);
}
