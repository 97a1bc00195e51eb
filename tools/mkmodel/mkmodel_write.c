// SPDX-License-Identifier: MIT
/* mkmodel_write.c - writing a spec as safetensors shards, an index and a
 * config.json. Values are plausible weights (small BF16, non-NaN FP8,
 * positive scales, norms near 1), so a forward pass over them stays finite. */
#include "mkmodel.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <stdbool.h>
#include <libgen.h>
#include <stdio.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include "progress.h"

#define CHUNK (4u << 20)

static uint64_t splitmix(uint64_t *s)
{
	uint64_t z = (*s += 0x9E3779B97F4A7C15ULL);
	z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
	z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
	return z ^ (z >> 31);
}

/* One 8-byte word of values of the tensor's kind. */
static uint64_t word(const struct mk_tensor *t, uint64_t r)
{
	switch (t->fill) {
	case MK_NORM: /* BF16 near 1.0 */
		return 0x3F803F803F803F80ULL | (r & 0x000F000F000F000FULL);
	case MK_SCALE: /* F32 in [2^-10, 2^-9) */
		return 0x3A8000003A800000ULL | (r & 0x007FFFFF007FFFFFULL);
	case MK_BIAS: /* F32, small, either sign */
		return 0x3C0000003C000000ULL | (r & 0x807FFFFF807FFFFFULL);
	case MK_WEIGHT:
	default:
		if (dtype_bits(t->dtype) == 8) /* E4M3 with exponent < 8: no NaN */
			return r & 0xBFBFBFBFBFBFBFBFULL;
		if (t->dtype == DT_F32)
			return 0x3C0000003C000000ULL | (r & 0x807FFFFF807FFFFFULL);
		/* BF16 with exponents 120..123: |v| in [2^-7, 2^-3) */
		return 0x3C003C003C003C00ULL | (r & 0x81FF81FF81FF81FFULL);
	}
}

static int write_all(int fd, const void *buf, size_t len)
{
	const char *p = buf;

	while (len) {
		ssize_t n = write(fd, p, len);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return -errno;
		p += n;
		len -= (size_t)n;
	}
	return 0;
}

static int write_tensor(int fd, const struct mk_tensor *t, uint64_t seed, uint8_t *buf)
{
	uint64_t left = mk_tensor_bytes(t);
	uint64_t s = seed ^ XXH64(t->name, strlen(t->name), 0);

	while (left) {
		size_t n = left < CHUNK ? (size_t)left : CHUNK;
		for (size_t i = 0; i < n; i += 8) {
			uint64_t w = word(t, splitmix(&s));
			memcpy(buf + i, &w, n - i < 8 ? n - i : 8);
		}
		int r = write_all(fd, buf, n);
		if (r < 0)
			return r;
		left -= n;
	}
	return 0;
}

static int cmp_name(const void *a, const void *b)
{
	return strcmp((*(const struct mk_tensor *const *)a)->name,
		      (*(const struct mk_tensor *const *)b)->name);
}

/* The header of one shard: tensors sorted by name, as HF writers do, so the
 * file order differs from the arena's layer-major order. */
static char *shard_header(const struct mk_tensor **ts, size_t n, size_t *len)
{
	json_t *h = json_pack("{s:{s:s}}", "__metadata__", "format", "pt");
	uint64_t off = 0;
	char *txt, *padded;
	size_t tl;

	for (size_t i = 0; h && i < n; i++) {
		json_t *shape = json_array();
		for (uint32_t d = 0; d < ts[i]->rank; d++)
			json_array_append_new(shape, json_integer((json_int_t)ts[i]->shape[d]));
		uint64_t b = mk_tensor_bytes(ts[i]);
		json_object_set_new(h, ts[i]->name, json_pack("{s:s, s:o, s:[I,I]}",
			"dtype", dtype_name(ts[i]->dtype), "shape", shape,
			"data_offsets", (json_int_t)off, (json_int_t)(off + b)));
		off += b;
	}
	txt = h ? json_dumps(h, JSON_COMPACT | JSON_PRESERVE_ORDER) : NULL;
	json_decref(h);
	if (!txt)
		return NULL;
	tl = strlen(txt);
	*len = (tl + 7) / 8 * 8; /* pad with spaces to 8 bytes, like the reference */
	padded = malloc(*len);
	if (padded) {
		memcpy(padded, txt, tl);
		memset(padded + tl, ' ', *len - tl);
	}
	free(txt);
	return padded;
}

/* Bytes written so far and the progress they are told to: a model of
 * gigabytes takes tens of seconds, which a bar (a terminal) or a line
 * every few seconds (a log, a test) accounts for (issue 70 item 6). */
struct written {
	struct progress p;
	uint64_t done;
};

static int write_shard(const char *path, const struct mk_tensor **ts, size_t n,
		       uint64_t seed, uint8_t *buf, struct written *w, struct errinfo *e)
{
	size_t hl;
	char *hdr;
	uint8_t len8[8];
	int fd, r;

	qsort(ts, n, sizeof(*ts), cmp_name);
	hdr = shard_header(ts, n, &hl);
	if (!hdr)
		return err_set(e, -ENOMEM, "out of memory");
	for (int i = 0; i < 8; i++)
		len8[i] = (uint8_t)((uint64_t)hl >> (8 * i));
	fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (fd < 0) {
		free(hdr);
		return err_set(e, -errno, "%s: %s", path, strerror(errno));
	}
	r = write_all(fd, len8, 8);
	if (r == 0)
		r = write_all(fd, hdr, hl);
	for (size_t i = 0; r == 0 && i < n; i++) {
		r = write_tensor(fd, ts[i], seed, buf);
		w->done += mk_tensor_bytes(ts[i]);
		progress_update(&w->p, w->done);
	}
	free(hdr);
	if (close(fd) < 0 && r == 0)
		r = -errno;
	return r < 0 ? err_set(e, r, "%s: write failed: %s", path, strerror(-r)) : 0;
}

static int write_json(const char *dir, const char *name, json_t *j, struct errinfo *e)
{
	char path[4096];

	snprintf(path, sizeof(path), "%s/%s", dir, name);
	if (json_dump_file(j, path, JSON_INDENT(2) | JSON_PRESERVE_ORDER) < 0)
		return err_set(e, -EIO, "%s: cannot write", path);
	return 0;
}

/* Shard k of n takes the tensors whose cumulative bytes fall in its share;
 * shards follow the tensor order and none is left empty. */
static void assign_shards(const struct mk_spec *s, unsigned n, unsigned *owner)
{
	uint64_t before = 0;

	for (size_t i = 0; i < s->n; i++) {
		uint64_t mid = before + mk_tensor_bytes(&s->t[i]) / 2;
		uint64_t k = s->bytes ? (uint64_t)((__uint128_t)mid * n / s->bytes) : 0;
		uint64_t lo = i ? owner[i - 1] : 0, hi = i ? owner[i - 1] + 1 : 0;
		uint64_t need = n > s->n - i ? n - (s->n - i) : 0;

		k = k < lo ? lo : k > hi ? hi : k;
		owner[i] = (unsigned)(k < need ? need : k);
		before += mk_tensor_bytes(&s->t[i]);
	}
}

static int write_dir(const struct mk_spec *spec, const char *dir, unsigned shards,
		     uint64_t seed, struct errinfo *e)
{
	const struct mk_tensor **ts = calloc(spec->n + 1, sizeof(*ts));
	unsigned *owner = calloc(spec->n + 1, sizeof(*owner));
	uint8_t *buf = malloc(CHUNK);
	json_t *wm = json_object();
	struct written w = { .done = 0 };
	char what[160];
	int r = 0;

	if (!ts || !owner || !buf || !wm) {
		r = err_set(e, -ENOMEM, "out of memory");
		goto out;
	}
	if (shards == 0 || shards > spec->n || shards > 99999) {
		r = err_set(e, -EINVAL, "--shards %u: between 1 and the %zu tensors", shards, spec->n);
		goto out;
	}
	if (mkdir(dir, 0755) < 0 && errno != EEXIST) {
		r = err_set(e, -errno, "%s: %s", dir, strerror(errno));
		goto out;
	}
	assign_shards(spec, shards, owner);
	snprintf(what, sizeof(what), "wsrv-mkmodel: the model's tensors, %u file%s", shards, shards == 1 ? "" : "s");
	progress_begin(&w.p, PROGRESS_AUTO, what, spec->bytes);
	for (unsigned k = 0; r == 0 && k < shards; k++) {
		char name[64], path[4096];
		size_t n = 0;
		if (shards == 1)
			snprintf(name, sizeof(name), "model.safetensors");
		else
			snprintf(name, sizeof(name), "model-%05u-of-%05u.safetensors", k + 1, shards);
		for (size_t i = 0; i < spec->n; i++)
			if (owner[i] == k) {
				ts[n++] = &spec->t[i];
				json_object_set_new(wm, spec->t[i].name, json_string(name));
			}
		snprintf(path, sizeof(path), "%s/%s", dir, name);
		r = write_shard(path, ts, n, seed, buf, &w, e);
	}
	progress_end(&w.p);
	if (r == 0 && shards > 1) {
		json_t *idx = json_pack("{s:{s:I}, s:O}", "metadata", "total_size",
					(json_int_t)spec->bytes, "weight_map", wm);
		r = idx ? write_json(dir, "model.safetensors.index.json", idx, e)
			: err_set(e, -ENOMEM, "out of memory");
		json_decref(idx);
	}
	if (r == 0)
		r = write_json(dir, "config.json", spec->config, e);
out:
	json_decref(wm);
	free(ts);
	free(owner);
	free(buf);
	return r;
}

static int rm_one(const char *p, const struct stat *sb, int flag, struct FTW *ftw)
{
	return remove(p) < 0 ? -1 : 0;
}

/* Is there room for the model next to dir? */
static int check_space(const struct mk_spec *spec, const char *dir, struct errinfo *e)
{
	char parent[4096];
	struct statvfs v;
	uint64_t avail, need = spec->bytes + (1u << 20);

	snprintf(parent, sizeof(parent), "%s", dir);
	if (statvfs(dirname(parent), &v) < 0)
		return 0; /* the writes will say what is wrong */
	avail = (uint64_t)v.f_bavail * v.f_frsize;
	if (avail < need)
		return err_set(e, -ENOSPC, "%s: %.1f MiB free, the model needs %.1f MiB", parent,
			       (double)avail / 1048576.0, (double)need / 1048576.0);
	return 0;
}

/* Makes the folders above dir that are missing (mkdir -p of its
 * parent), 0755: --out /models/demo on a machine without /models. */
static int make_parents(const char *dir, struct errinfo *e)
{
	char p[4096];
	size_t n = (size_t)snprintf(p, sizeof(p), "%s", dir);

	if (n >= sizeof(p))
		return err_set(e, -ENAMETOOLONG, "%s: path too long", dir);
	while (n > 1 && p[n - 1] == '/') /* "a/b/" names b */
		p[--n] = 0;
	for (char *s = p + 1; (s = strchr(s, '/')); s++) {
		*s = 0;
		if (mkdir(p, 0755) < 0 && errno != EEXIST)
			return err_set(e, -errno, "%s: cannot make %s: %s", dir, p, strerror(errno));
		*s = '/';
	}
	return 0;
}

/* Whether name is one wsrv-mkmodel writes. */
static bool ours(const char *name)
{
	unsigned a, b;
	char end;

	return strcmp(name, "model.safetensors") == 0 || strcmp(name, "model.safetensors.index.json") == 0 ||
	       strcmp(name, "config.json") == 0 ||
	       (sscanf(name, "model-%5u-of-%5u.safetensor%c", &a, &b, &end) == 3 && end == 's' &&
		strlen(name) == strlen("model-00001-of-00001.safetensors"));
}

/* dir may be replaced: it does not exist, or holds only what a run of
 * wsrv-mkmodel writes (a file of the operator's beside the shards would
 * go with them). */
static int check_replaceable(const char *dir, struct errinfo *e)
{
	DIR *d = opendir(dir);
	struct dirent *de;
	int r = 0;

	if (!d)
		return errno == ENOENT ? 0 : err_set(e, -errno, "%s: %s", dir, strerror(errno));
	while (r == 0 && (de = readdir(d)))
		if (strcmp(de->d_name, ".") && strcmp(de->d_name, "..") && !ours(de->d_name))
			r = err_set(e, -ENOTEMPTY, "%s holds %s, which wsrv-mkmodel did not write: give --out a new or "
				    "empty directory, or one a run of wsrv-mkmodel made (its model is replaced whole)",
				    dir, de->d_name);
	closedir(d);
	return r;
}

/* Writes into a new directory beside dir and swaps it into place, so a
 * failure (ENOSPC included) leaves dir as it was and a rerun never mixes an
 * old index with new shards. A dir that holds anything else is refused. */
int mk_write(const struct mk_spec *spec, const char *dir, unsigned shards,
	     uint64_t seed, struct errinfo *e)
{
	char tmp[3968]; /* room for "/" and a file name within PATH_MAX */
	int r = make_parents(dir, e);

	if (r == 0)
		r = check_replaceable(dir, e);
	if (r == 0)
		r = check_space(spec, dir, e);
	if (r < 0)
		return r;
	if ((size_t)snprintf(tmp, sizeof(tmp), "%s.tmp-XXXXXX", dir) >= sizeof(tmp))
		return err_set(e, -ENAMETOOLONG, "%s: path too long", dir);
	if (!mkdtemp(tmp) || chmod(tmp, 0755) < 0)
		return err_set(e, -errno, "%s: cannot make a folder beside it: %s", dir, strerror(errno));
	r = write_dir(spec, tmp, shards, seed, e);
	if (r == 0 && renameat2(AT_FDCWD, tmp, AT_FDCWD, dir, RENAME_EXCHANGE) < 0) {
		if (errno == ENOENT && rename(tmp, dir) == 0)
			return 0;
		r = err_set(e, -errno, "%s: cannot replace it: %s", dir, strerror(errno));
	}
	/* tmp now holds the old model, or the failed new one. */
	nftw(tmp, rm_one, 16, FTW_DEPTH | FTW_PHYS);
	return r;
}
