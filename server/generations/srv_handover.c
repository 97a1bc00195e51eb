// SPDX-License-Identifier: MIT
/* srv_handover.c - restarting without reloading, through systemd's file
 * descriptor store: wsrvd pushes its memfds (each model's manifest and
 * segments) and a state record (a sealed memfd holding JSON: the models,
 * their paths and generations, the first start) with FDSTORE=1; the next
 * wsrvd receives them back through LISTEN_FDS / LISTEN_FDNAMES and adopts
 * what still matches its --model arguments. */
#include "srv_handover.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "escape.h"
#include "log.h"
#include "core_door.h"
#include "memfd_util.h"
#include "loaded_door.h"

#ifdef HAVE_SYSTEMD
#include <systemd/sd-daemon.h>
#endif

#define STATE_MAX (1u << 20)
#define STATE_NAME "wsrv-state"

/* The state record's JSON, from its memfd. */
static json_t *read_state(int fd)
{
	struct stat st;
	json_error_t je;
	json_t *j = NULL;
	void *p;

	if (fstat(fd, &st) < 0 || st.st_size <= 0 || st.st_size > STATE_MAX)
		return NULL;
	p = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_SHARED, fd, 0);
	if (p == MAP_FAILED)
		return NULL;
	j = json_loadb(p, (size_t)st.st_size, 0, &je);
	munmap(p, (size_t)st.st_size);
	if (j && json_integer_value(json_object_get(j, "wsrv_state")) != 1) {
		json_decref(j);
		j = NULL;
	}
	return j;
}

void handover_init(struct handover *h)
{
	struct timespec now;

	memset(h, 0, sizeof(*h));
	clock_gettime(CLOCK_REALTIME, &now);
	h->started = (double)now.tv_sec + now.tv_nsec / 1e9;
}

int handover_collect(struct handover *h)
{
	handover_init(h);
#ifdef HAVE_SYSTEMD
	char **names = NULL;
	int n = sd_listen_fds_with_names(1, &names);

	if (n <= 0)
		return 0;
	h->v = calloc((size_t)n, sizeof(*h->v));
	for (int i = 0; i < n; i++) {
		int fd = SD_LISTEN_FDS_START + i;
		fcntl(fd, F_SETFD, FD_CLOEXEC);
		if (h->v && names && names[i]) {
			h->v[h->n].fd = fd;
			snprintf(h->v[h->n].name, sizeof(h->v[0].name), "%s", names[i]);
			h->n++;
		} else {
			close(fd);
		}
		if (names)
			free(names[i]);
	}
	free(names);
	handover_read_state(h);
	log_info("received %zu file descriptors from the store%s", h->n,
		 h->state ? ", with a state record" : " but no state record: nothing to adopt");
#endif
	return 0;
}

int handover_add(struct handover *h, const char *name, int fd)
{
	struct handed *v = realloc(h->v, (h->n + 1) * sizeof(*v));

	if (!v)
		return -ENOMEM;
	h->v = v;
	h->v[h->n].fd = fd;
	snprintf(h->v[h->n].name, sizeof(h->v[0].name), "%s", name);
	h->n++;
	return 0;
}

void handover_read_state(struct handover *h)
{
	int sfd = handover_take(h, STATE_NAME);

	if (sfd >= 0) {
		h->state = read_state(sfd);
		close(sfd);
	}
	if (h->state && json_is_number(json_object_get(h->state, "started")))
		h->started = json_number_value(json_object_get(h->state, "started"));
}

int handover_take(struct handover *h, const char *name)
{
	for (size_t i = 0; i < h->n; i++)
		if (h->v[i].fd >= 0 && strcmp(h->v[i].name, name) == 0) {
			int fd = h->v[i].fd;
			h->v[i].fd = -1;
			return fd;
		}
	return -1;
}

int handover_model(const struct handover *h, const char *name, uint64_t *generation, uint32_t *nseg,
		   uint64_t *files, const char **path)
{
	json_t *models = h->state ? json_object_get(h->state, "models") : NULL, *m;
	size_t i;

	json_array_foreach(models, i, m) {
		const char *n = json_string_value(json_object_get(m, "name"));
		const char *p = json_string_value(json_object_get(m, "path"));
		json_int_t segs = json_integer_value(json_object_get(m, "segments"));
		if (!n || !p || strcmp(n, name) != 0 || segs <= 0 || segs > WSRV_MAX_FDS)
			continue;
		*path = p;
		*generation = (uint64_t)json_integer_value(json_object_get(m, "generation"));
		*nseg = (uint32_t)segs;
		*files = strtoull(json_string_value(json_object_get(m, "files")) ?: "0", NULL, 16);
		return (int)i;
	}
	return -1;
}

void handover_say_dropped(const struct handover *h, const char *const *names, int n)
{
	json_t *models = h->state ? json_object_get(h->state, "models") : NULL, *m;
	size_t i;

	json_array_foreach(models, i, m) {
		const char *name = json_string_value(json_object_get(m, "name"));
		int k = 0;
		while (name && k < n && strcmp(names[k], name) != 0)
			k++;
		if (name && k == n)
			log_warn("model %s, served by the server this one replaces, is not in this one's --model list: "
				 "it is served no more (name it with --model to keep it)", esc(name));
	}
}

void handover_done(struct handover *h)
{
	for (size_t i = 0; i < h->n; i++)
		if (h->v[i].fd >= 0)
			close(h->v[i].fd);
	free(h->v);
	json_decref(h->state);
	memset(h, 0, sizeof(*h));
}

static void copy_text(void *map, void *text)
{
	memcpy(map, text, strlen(text));
}

/* The state record for srv in a sealed memfd (the caller's), or -errno. */
int handover_state_fd(const struct server *srv, double started)
{
	json_t *models = json_array(), *root;
	char *text;
	int fd = -ENOMEM;

	for (size_t i = 0; i < srv->nmodels; i++) {
		const struct loaded_model *lm = srv->models[i].lm;
		char files[24];
		if (!srv_model_handed(&srv->models[i]))
			continue; /* generations being replaced, loading, or tiered are not handed over */
		snprintf(files, sizeof(files), "%016llx", (unsigned long long)model_files_identity(lm->model));
		json_array_append_new(models, json_pack("{s:s, s:s, s:I, s:i, s:s}", "name", lm->model->name,
			"path", lm->model->path, "generation", (json_int_t)srv->models[i].generation,
			"segments", (int)arena_nseg(lm->arena), "files", files));
	}
	root = json_pack("{s:i, s:f, s:o}", "wsrv_state", 1, "started", started, "models", models);
	text = root ? json_dumps(root, JSON_COMPACT) : NULL;
	json_decref(root);
	if (text)
		fd = memfd_new_sealed(STATE_NAME, strlen(text), copy_text, text);
	free(text);
	return fd;
}

#ifdef HAVE_SYSTEMD
static int push(int fd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static int push(int fd, const char *fmt, ...)
{
	char name[64], msg[128];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(name, sizeof(name), fmt, ap);
	va_end(ap);
	snprintf(msg, sizeof(msg), "FDSTORE=1\nFDNAME=%s", name);
	return sd_pid_notify_with_fds(0, 0, msg, &fd, 1);
}
#endif

int handover_store(struct server *srv, const struct handover *h)
{
#ifdef HAVE_SYSTEMD
	int sfd, r = 0;
	size_t pushed = 0;

	if (!getenv("NOTIFY_SOCKET"))
		return 0;
	if (srv_tiered_model(srv))
		log_info("model %s has a disk tier: not in the service manager's store; the next server reads it again",
			 srv_tiered_model(srv));
	/* What the store held is replaced, not added to: what this server
	 * was handed, or pushed itself before (a reload). */
	for (size_t i = 0; h && i < h->n; i++) {
		char msg[128];
		snprintf(msg, sizeof(msg), "FDSTOREREMOVE=1\nFDNAME=%s", h->v[i].name);
		sd_notify(0, msg);
	}
	for (uint32_t i = 0; i < srv->stored_models; i++) {
		char msg[128];
		snprintf(msg, sizeof(msg), "FDSTOREREMOVE=1\nFDNAME=m%u-manifest", i);
		sd_notify(0, msg);
		for (uint32_t k = 0; k < srv->stored_segs[i]; k++) {
			snprintf(msg, sizeof(msg), "FDSTOREREMOVE=1\nFDNAME=m%u-seg%u", i, k);
			sd_notify(0, msg);
		}
	}
	sd_notify(0, "FDSTOREREMOVE=1\nFDNAME=" STATE_NAME);
	size_t j = 0; /* the state record's position: what the names count */
	for (size_t i = 0; r >= 0 && i < srv->nmodels; i++) {
		const struct loaded_model *lm = srv->models[i].lm;
		if (!srv_model_handed(&srv->models[i]))
			continue;
		r = push(lm->manifest_fd, "m%zu-manifest", j);
		for (uint32_t k = 0; r >= 0 && k < arena_nseg(lm->arena); k++)
			r = push(arena_seg_fd(lm->arena, k), "m%zu-seg%u", j, k);
		pushed += 1 + arena_nseg(lm->arena);
		j++;
	}
	/* The state last: a store without it holds nothing to adopt. */
	if (r >= 0 && (sfd = handover_state_fd(srv, h ? h->started : srv->started_wall)) >= 0) {
		r = push(sfd, STATE_NAME);
		close(sfd);
		pushed++;
	}
	srv->stored_models = 0;
	for (size_t i = 0; i < srv->nmodels && srv->stored_models < SRV_STORED_MAX; i++)
		if (srv_model_handed(&srv->models[i]))
			srv->stored_segs[srv->stored_models++] =
				arena_nseg(srv->models[i].lm->arena);
	if (r < 0) {
		log_warn("cannot push the models' memfds to the service manager's fd store: %s (a restart will reload them; FileDescriptorStoreMax= must be at least %zu)",
			 strerror(-r), pushed + 1);
		return r;
	}
	log_info("%zu file descriptors in the service manager's store: a restart adopts the models instead of loading them",
		 pushed);
#endif
	return 0;
}
