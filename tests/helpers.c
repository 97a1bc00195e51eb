/* helpers.c - shared test helpers. */
#include "helpers.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "mkmodel.h"

int count_fds(void)
{
	DIR *d = opendir("/proc/self/fd");
	struct dirent *de;
	int n = 0;

	if (!d)
		return -1;
	while ((de = readdir(d)))
		if (de->d_name[0] != '.')
			n++;
	closedir(d);
	return n - 1; /* the directory's own fd */
}

char *test_tmpdir(const char *tag)
{
	char *p;

	if (asprintf(&p, "/tmp/wsrv-test-%s-XXXXXX", tag) < 0)
		return NULL;
	if (!mkdtemp(p)) {
		free(p);
		return NULL;
	}
	return p;
}

static int rm_one(const char *p, const struct stat *sb, int flag, struct FTW *ftw)
{
	(void)sb;
	(void)flag;
	(void)ftw;
	return remove(p);
}

void rm_rf(const char *path)
{
	if (path)
		nftw(path, rm_one, 16, FTW_DEPTH | FTW_PHYS);
}

const char *pjoin(const char *dir, const char *name)
{
	static char buf[8][4096];
	static int k;

	k = (k + 1) % 8;
	snprintf(buf[k], sizeof(buf[k]), "%s/%s", dir, name);
	return buf[k];
}

uint8_t *st_build(const char *header, size_t dlen, const void *data, size_t *len)
{
	size_t hl = strlen(header);
	uint8_t *b = malloc(8 + hl + dlen + 1);

	if (!b)
		return NULL;
	for (int i = 0; i < 8; i++)
		b[i] = (uint8_t)((uint64_t)hl >> (8 * i));
	memcpy(b + 8, header, hl);
	for (size_t i = 0; i < dlen; i++)
		b[8 + hl + i] = data ? ((const uint8_t *)data)[i] : (uint8_t)i;
	*len = 8 + hl + dlen;
	return b;
}

int st_write(const char *path, const char *header, size_t dlen, const void *data)
{
	size_t len;
	uint8_t *b = st_build(header, dlen, data, &len);
	FILE *f;
	int r = 0;

	if (!b)
		return -ENOMEM;
	f = fopen(path, "we");
	if (!f || fwrite(b, 1, len, f) != len)
		r = -EIO;
	if (f && fclose(f) != 0)
		r = -EIO;
	free(b);
	return r;
}

const char *hdr(const char *fmt, ...)
{
	static char buf[1 << 16];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(buf, sizeof(buf), fmt, ap);
	va_end(ap);
	return buf;
}

int make_model(const char *dir, const char *preset, uint64_t size, unsigned layers,
	       unsigned shards, uint64_t seed)
{
	struct mk_spec spec;
	struct errinfo e;
	int r = mk_preset(preset, size, layers, &spec, &e);

	if (r == 0)
		r = mk_write(&spec, dir, shards, seed, &e);
	if (r < 0)
		fprintf(stderr, "make_model: %s\n", e.msg);
	mk_spec_free(&spec);
	return r;
}

uint8_t *read_file(const char *path, size_t *len)
{
	FILE *f = fopen(path, "re");
	uint8_t *b = NULL;
	long n;

	if (!f)
		return NULL;
	if (fseek(f, 0, SEEK_END) == 0 && (n = ftell(f)) >= 0 && fseek(f, 0, SEEK_SET) == 0) {
		b = malloc((size_t)n + 1);
		if (b && fread(b, 1, (size_t)n, f) != (size_t)n) {
			free(b);
			b = NULL;
		}
		*len = (size_t)n;
	}
	fclose(f);
	return b;
}

const char *fixtures_dir(void)
{
	return WSRV_FIXTURES_DIR;
}
