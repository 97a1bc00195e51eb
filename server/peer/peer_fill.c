// SPDX-License-Identifier: MIT
/* peer_fill.c - which tensor comes from where: the fill's scheduler. */
#include "peer_fill.h"

#include <errno.h>
#include <math.h>
#include <signal.h>
#include <sys/wait.h>
#include <sys/prctl.h>
#include <sys/mman.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <xxhash.h>

#include "clock.h"
#include "lifecycle.h"
#include "log.h"
#include "peer_fill_io.h"
#include "peer_fill_sum.h"
#include "peer_table.h"
#include "units.h"

/* A tensor's way into this host (lifecycle.h): it starts needed, or
 * this host's own to read (T_OWN), or done (it has no bytes); a needed
 * one is fetched from a peer, or given to the files (T_DISK); a fetch
 * ends done, needed again (a piece failed, a wrong checksum: another
 * try), or given to the files. T_OWN, T_DISK and T_DONE are where it
 * ends in the fill (the files' reads follow it). */
enum tstate { T_NEED, T_FETCH, T_DONE, T_DISK, T_OWN, T_STATE_MAX };
static const char *const t_names[T_STATE_MAX] = { "needed", "fetching", "done", "to the files", "own" };
static const unsigned t_moves[T_STATE_MAX] = {
	[T_NEED] = LIFE_BIT(T_FETCH) | LIFE_BIT(T_DISK) | LIFE_BIT(T_DONE) | LIFE_BIT(T_OWN),
	[T_FETCH] = LIFE_BIT(T_NEED) | LIFE_BIT(T_DISK) | LIFE_BIT(T_DONE),
	[T_DONE] = 0,
	[T_DISK] = 0,
	[T_OWN] = 0,
};
static const struct lifecycle t_life = { "peer fill's tensor", T_STATE_MAX, t_names, t_moves };

struct fill {
	const struct peer_fill_cfg *cfg;
	struct loaded_model *lm;
	struct model *m;
	struct peer_table *tab;     /* owned unless offered (then the server's) */
	bool offered;
	uint8_t *st;                /* enum tstate per tensor */
	uint64_t *excl;             /* peers that failed it, a bit each */
	uint64_t *next_off;         /* the next piece to ask for */
	uint32_t *busy;             /* pieces in flight */
	uint8_t *bad;               /* a piece failed: fetch it again */
	int *from;
	uint8_t **map;              /* writable mapping per segment, filling by mapping */
	struct fill_sums sums;      /* fetched tensors' checksums */
	uint32_t *active;           /* tensors with pieces left to ask for */
	size_t nactive, left;
	bool waiting;               /* some tensor waits for a peer */
	struct fpeer peers[PEER_MAX_PEERS];
	size_t np;
	struct fio io;
	struct peer_hello hello;
	struct fio_dest dest;       /* where pieces land (the fill's process opens fio) */
	uint32_t chunk;
	uint64_t window;
};

/* What the fill's process leaves for wsrvd (fill_in_process). */
struct fill_shared {
	int r;
	char msg[sizeof(((struct errinfo *)0)->msg)];
	struct load_source sources[LOAD_MAX_SOURCES];
};

/* Memory the fill's process writes and wsrvd reads: shared and anonymous,
 * made before the fork. NULL when out of memory. */
static void *shared_alloc(size_t n)
{
	void *p = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);

	return p == MAP_FAILED ? NULL : p;
}

/* Fleet host `owner` of tensor i: cut by held bytes of the layout into N
 * contiguous stretches. (A tensor's bytes here are its held part: all of
 * it unless only some ranks are loaded, and then every host of the fleet
 * holds the same parts, or the layout hashes differ.) */
static int owner_of(const struct model *m, uint64_t before, size_t n)
{
	uint64_t held = m->held ? m->held->bytes : m->data_bytes;
	uint64_t total = held ? held : 1;
	unsigned __int128 k = (unsigned __int128)before * n / total;

	return k >= n ? (int)n - 1 : (int)k;
}

static int alloc_state(struct fill *F, struct errinfo *e)
{
	size_t n = F->m->ntensors + 1;

	F->st = shared_alloc(n); /* the fill's process sets it, wsrvd reads it */
	F->excl = calloc(n, sizeof(*F->excl));
	F->next_off = calloc(n, sizeof(*F->next_off));
	F->busy = calloc(n, sizeof(*F->busy));
	F->bad = calloc(n, 1);
	F->from = calloc(n, sizeof(*F->from));
	F->active = calloc(n, sizeof(*F->active));
	F->map = calloc(arena_nseg(F->lm->arena) + 1, sizeof(*F->map));
	if (!F->st || !F->excl || !F->next_off || !F->busy || !F->bad || !F->from || !F->active || !F->map)
		return err_set(e, -ENOMEM, "out of memory");
	if (fill_sums_init(&F->sums, F->m->ntensors, F->lm->arena, e) < 0)
		return -ENOMEM;
	for (uint32_t s = 0; !arena_fills_by_write(F->lm->arena) && s < arena_nseg(F->lm->arena); s++) {
		int r = arena_fill_map(F->lm->arena, s, &F->map[s], e);
		if (r < 0)
			return r;
	}
	return 0;
}

/* The one setter of tensor i's state. */
static void t_to(struct fill *F, uint32_t i, enum tstate to)
{
	if (life_check(&t_life, i, F->st[i], to) == 0)
		F->st[i] = (uint8_t)to;
}

/* Which tensors this host reads itself (T_OWN), which it fetches. */
static void assign(struct fill *F)
{
	const struct model *m = F->m;
	uint64_t before = 0;

	for (size_t i = 0; i < m->ntensors; i++) {
		bool own = F->np == 0 ||
			   (F->cfg->fleet_index >= 0 &&
			    owner_of(m, before, F->cfg->npeers) == F->cfg->fleet_index);
		before += m->tensors[i].part_len;
		if (m->tensors[i].part_len == 0) {
			F->m->tensors[i].xxh3 = XXH3_64bits("", 0);
			peer_table_set_ready(F->tab, (uint32_t)i, F->m->tensors[i].xxh3);
			t_to(F, (uint32_t)i, T_DONE);
		} else if (own) {
			t_to(F, (uint32_t)i, T_OWN);
			peer_table_set_coming(F->tab, (uint32_t)i);
		} else {
			F->left++; /* T_NEED, as it starts */
		}
	}
}

static int setup_peers(struct fill *F, struct errinfo *e)
{
	const struct peer_fill_cfg *c = F->cfg;
	double until = mono_now() + c->connect_wait_s;

	for (size_t i = 0; i < c->npeers; i++) {
		struct fpeer *fp = &F->peers[F->np];
		struct load_source *src;
		int r;
		if ((int)i == c->fleet_index)
			continue;
		if ((r = peer_parse_addr(c->peers[i], &fp->ss, &fp->sl, e)) < 0)
			return r;
		snprintf(fp->name, sizeof(fp->name), "%s", c->peers[i]);
		fp->connect_until = until;
		fp->tab = calloc(F->m->ntensors + 1, sizeof(*fp->tab));
		if (!fp->tab)
			return err_set(e, -ENOMEM, "out of memory");
		src = &F->lm->sources[F->lm->nsources++];
		snprintf(src->name, sizeof(src->name), "%s", c->peers[i]);
		fp->src = src;
		F->np++;
	}
	return 0;
}

static void start_fetch(struct fill *F, uint32_t i, int p)
{
	if (fill_sums_start(&F->sums, i) < 0) {
		log_warn("peers: out of memory for %s's checksum; reading it from the files",
			 F->m->tensors[i].name);
		t_to(F, i, T_DISK);
		F->left--;
		return;
	}
	t_to(F, i, T_FETCH);
	F->from[i] = p;
	F->next_off[i] = 0;
	F->bad[i] = 0;
	F->peers[p].assigned += F->m->tensors[i].part_len;
	F->active[F->nactive++] = i;
}

/* Tensor i from the least busy peer that has it; or wait for one that
 * is connecting or reading it; or, when none can, from the files. */
static void decide(struct fill *F, uint32_t i)
{
	bool wait = false;
	int best = -1;

	for (size_t p = 0; p < F->np; p++) {
		struct fpeer *fp = &F->peers[p];
		if ((F->excl[i] >> p) & 1 || fp->st == FP_DEAD)
			continue;
		if (fp->st != FP_READY) {
			wait = true;
		} else if (fp->tab[i].ready == PEER_READY) {
			if (fp->assigned >= F->window)
				wait = true;
			else if (best < 0 || fp->assigned < F->peers[best].assigned)
				best = (int)p;
		} else if (fp->tab[i].ready == PEER_COMING) {
			wait = true;
			F->waiting = true;
		}
	}
	if (best >= 0) {
		start_fetch(F, i, best);
	} else if (!wait) {
		t_to(F, i, T_DISK);
		F->left--;
	}
}

static void schedule(struct fill *F)
{
	F->waiting = false;
	for (uint32_t i = 0; i < F->m->ntensors; i++)
		if (F->st[i] == T_NEED)
			decide(F, i);
}

/* Tensor i once every piece asked for has landed or failed: checked
 * against the checksum its peer reported, which the peer had from where
 * the bytes were first read from disk, and done; or, a piece failed or the
 * sum is wrong, asked for again (from another peer when this one was at
 * fault). */
static void maybe_finish(struct fill *F, uint32_t i)
{
	const struct model_tensor *t = &F->m->tensors[i];
	struct fpeer *fp = &F->peers[F->from[i]];
	struct errinfo e;
	uint64_t h;

	if (F->st[i] != T_FETCH || F->busy[i] || F->next_off[i] < t->part_len)
		return;
	fp->assigned -= t->part_len;
	F->io.changed = true;
	if (F->bad[i]) {
		t_to(F, i, T_NEED);
		return;
	}
	if (fill_sums_end(&F->sums, i, t->segment, t->offset + t->part_off, t->part_len, &h, &e) < 0) {
		log_warn("peers: %s; reading %s from the files", e.msg, t->name);
		t_to(F, i, T_DISK);
		F->left--;
		return;
	}
	if (h != fp->tab[i].xxh3) {
		fp->src->checksum_failures++;
		F->excl[i] |= 1ull << F->from[i];
		log_warn("peer %s: tensor %s came with the wrong checksum (%016llx, not %016llx); fetching it again",
			 fp->name, t->name, (unsigned long long)h, (unsigned long long)fp->tab[i].xxh3);
		t_to(F, i, T_NEED);
		return;
	}
	F->m->tensors[i].xxh3 = h;
	peer_table_set_ready(F->tab, i, h);
	fp->src->bytes += t->part_len;
	t_to(F, i, T_DONE);
	F->left--;
}

/* Counts the pieces that landed or failed since the last turn. */
static bool take_landed(struct fill *F)
{
	bool any = F->io.ndone > 0;

	for (uint32_t k = 0; k < F->io.ndone; k++) {
		struct fslot *s = &F->io.slots[F->io.done_slots[k]];
		uint32_t i = s->tensor;
		F->busy[i]--;
		if (s->status == 0)
			fill_sums_piece(&F->sums, i, s->off, s->dst, s->len);
		if (s->status < 0) {
			F->bad[i] = 1;
			/* The peer answered but would not give it: not from it again. */
			if (s->status != -ECONNRESET)
				F->excl[i] |= 1ull << s->peer;
		}
		fio_release(&F->io, s);
		maybe_finish(F, i);
	}
	F->io.ndone = 0;
	return any;
}

/* Asks for the pieces of active tensors, as far as each peer's slots go. */
static void pump(struct fill *F)
{
	size_t k = 0;

	while (k < F->nactive) {
		uint32_t i = F->active[k];
		const struct model_tensor *t = &F->m->tensors[i];
		int p = F->from[i];

		/* Its peer gone before every piece was asked for: fetched again
		 * whole, as a failed piece is. Summed with pieces never sent, it
		 * would fail its checksum, and a peer that only timed out would
		 * be blamed for corruption. */
		if (F->peers[p].st != FP_READY && F->next_off[i] < t->part_len)
			F->bad[i] = 1;
		if (F->peers[p].st != FP_READY || F->bad[i])
			F->next_off[i] = t->part_len; /* finished when its pieces land */
		while (F->next_off[i] < t->part_len) {
			uint64_t left = t->part_len - F->next_off[i];
			uint32_t len = left < F->chunk ? (uint32_t)left : F->chunk;
			if (fio_get(&F->io, p, i, F->next_off[i], len, t->segment,
				    t->offset + t->part_off + F->next_off[i]) < 0)
				break;
			F->busy[i]++;
			F->next_off[i] += len;
		}
		if (F->next_off[i] < t->part_len) {
			k++;
			continue;
		}
		F->active[k] = F->active[--F->nactive];
		maybe_finish(F, i);
	}
}

struct disk_job {
	struct fill *F;
	const struct load_opts *o;
	uint8_t *want;              /* owned */
	struct loader_stats st;
	struct errinfo e;
	int r;
};

static void disk_placed(void *arg, uint32_t i)
{
	struct fill *F = arg;

	peer_table_set_ready(F->tab, i, F->m->tensors[i].xxh3);
}

/* Reads the tensors in state `which` from the files. */
static void *disk_main(void *arg)
{
	struct disk_job *j = arg;
	struct loader_opts lo = j->o->loader;

	lo.want = j->want;
	lo.on_tensor = disk_placed;
	lo.on_tensor_arg = j->F;
	j->r = loader_run(j->F->m, j->F->lm->arena, &lo, &j->st, &j->e);
	return NULL;
}

static int disk_job_init(struct disk_job *j, struct fill *F, const struct load_opts *o, uint8_t which)
{
	size_t n = 0;

	memset(j, 0, sizeof(*j));
	j->F = F;
	j->o = o;
	if (!(j->want = calloc(F->m->ntensors + 1, 1)))
		return -ENOMEM;
	for (size_t i = 0; i < F->m->ntensors; i++)
		n += (j->want[i] = F->st[i] == which);
	return n ? 1 : 0;
}

static void add_stats(struct loaded_model *lm, const struct loader_stats *s)
{
	lm->stats.bytes_read += s->bytes_read;
	lm->stats.tensor_bytes += s->tensor_bytes;
	lm->stats.hash_seconds += s->hash_seconds;
	lm->stats.copy_seconds += s->copy_seconds;
	lm->stats.buffered_files += s->buffered_files;
	if (s->pool_bytes > lm->stats.pool_bytes)
		lm->stats.pool_bytes = s->pool_bytes;
	lm->disk_bytes += s->tensor_bytes;
}

static void connect_peers(struct fill *F)
{
	double now = mono_now();

	for (size_t p = 0; p < F->np; p++) {
		struct fpeer *fp = &F->peers[p];
		if (fp->st != FP_IDLE || fp->close_pending || now < fp->next_try)
			continue;
		if (now > fp->connect_until)
			fio_kill(&F->io, p, fp->why[0] ? fp->why : "cannot connect");
		else
			fio_connect(&F->io, p);
	}
}

static bool any_busy(const struct fill *F)
{
	return F->io.nfree < FIO_MAX_SLOTS;
}

/* Whether to start handing tensors out: once every peer has answered or
 * failed, or a second after the first answer, so that the first to answer
 * does not get everything. */
static bool settled(const struct fill *F, double *first)
{
	bool all = true;

	for (size_t p = 0; p < F->np; p++) {
		if (F->peers[p].st == FP_READY && *first == 0)
			*first = mono_now();
		all &= F->peers[p].st == FP_READY || F->peers[p].st == FP_DEAD;
	}
	return all || (*first > 0 && mono_now() - *first > 1.0);
}

/* Seconds a fill from peers may take in all: a minute, and the bytes to
 * fetch at FILL_MIN_RATE (a peer slow on every piece, but never past the
 * piece's limit, would drag a fill on for ever). */
#define FILL_MIN_RATE 100e6
static double fill_limit(const struct fill *F)
{
	uint64_t bytes = 0;

	for (size_t i = 0; i < F->m->ntensors; i++)
		if (F->st[i] == T_NEED)
			bytes += F->m->tensors[i].part_len;
	return 60.0 + (double)bytes / FILL_MIN_RATE;
}

/* Past the fill's limit: every peer is given up on, naming it; what is
 * not fetched yet comes from the files. */
static void give_up_peers(struct fill *F, double limit)
{
	char why[160];

	snprintf(why, sizeof(why), "the fill from peers took more than %.0f s; the rest from the files", limit);
	for (size_t p = 0; p < F->np; p++)
		fio_kill(&F->io, p, why);
}

/* Until every tensor not read here is fetched or left to the files. */
static int fill_loop(struct fill *F, const struct load_opts *o, struct errinfo *e)
{
	double last_status = 0, first = 0, limit = fill_limit(F), until = mono_now() + limit;

	while (F->left || any_busy(F)) {
		bool any;
		if (o->loader.stop && o->loader.stop())
			return err_set(e, -ECANCELED, "the load was stopped");
		if (mono_now() > until) {
			give_up_peers(F, limit);
			until = INFINITY;
		}
		any = fio_progress(&F->io);
		any |= take_landed(F);
		connect_peers(F);
		if (F->io.changed && settled(F, &first)) {
			F->io.changed = false;
			schedule(F);
		}
		pump(F);
		if (F->waiting && mono_now() - last_status > 0.05) {
			for (size_t p = 0; p < F->np; p++)
				fio_status(&F->io, p);
			last_status = mono_now();
			F->io.changed = true; /* decide again once tables arrive */
		}
		if (!any && any_busy(F))
			fio_wait(&F->io, 1);
		else if (!any)
			usleep(1000);
	}
	return 0;
}

static int start(struct fill *F, struct errinfo *e)
{
	const struct peer_fill_cfg *c = F->cfg;
	int r;

	F->chunk = c->chunk ? c->chunk : 1u << 20;
	F->window = c->window ? c->window : 64ull << 20;
	if (F->chunk > PEER_MAX_CHUNK)
		F->chunk = PEER_MAX_CHUNK;
	if ((r = peer_table_create(F->m, F->lm->arena, &F->tab, e)) < 0 ||
	    (r = alloc_state(F, e)) < 0 || (r = setup_peers(F, e)) < 0)
		return r;
	assign(F);
	F->hello = (struct peer_hello){ .magic = PEER_MAGIC, .version = PEER_VERSION,
					.layout = F->tab->layout, .ntensors = (uint32_t)F->m->ntensors };
	snprintf(F->hello.model, sizeof(F->hello.model), "%s", F->m->name);
	if (c->serve) {
		F->offered = true;
		if ((r = peer_serve_offer(c->serve, F->tab, e)) < 0) {
			F->tab = NULL;
			return r;
		}
	}
	F->io.changed = true;
	F->dest = (struct fio_dest){ .arena = F->lm->arena, .map = F->map, .chunk = F->chunk };
	return 0;
}

static void fill_finish(struct fill *F)
{
	if (F->io.worker)
		fio_fini(&F->io);
	for (size_t p = 0; p < F->np; p++)
		free(F->peers[p].tab);
	if (!F->offered)
		peer_table_free(F->tab);
	if (F->st)
		munmap(F->st, F->m->ntensors + 1);
	free(F->excl);
	free(F->next_off);
	free(F->busy);
	free(F->bad);
	free(F->from);
	free(F->active);
	free(F->map);
	fill_sums_fini(&F->sums);
	free(F);
}

/* Reads `which` tensors from the files: on a thread (*th) when th is set,
 * else here. Returns 1 when a thread was started. */
static int disk_read(struct fill *F, const struct load_opts *o, uint8_t which, struct disk_job *j,
		     pthread_t *th, struct errinfo *e)
{
	int r = disk_job_init(j, F, o, which);

	if (r < 0)
		return err_set(e, r, "out of memory");
	if (r == 0)
		return 0;
	if (th && pthread_create(th, NULL, disk_main, j) == 0)
		return 1;
	disk_main(j);
	if (j->r < 0)
		*e = j->e;
	add_stats(F->lm, &j->st);
	return j->r;
}

static void log_sources(const struct loaded_model *lm)
{
	uint64_t peers = 0;
	char d[32], p[32];

	for (uint32_t i = 0; i < lm->nsources; i++)
		peers += lm->sources[i].bytes;
	log_info("model %s: %s from the files, %s from %u peer%s", lm->model->name,
		 fmt_bytes(lm->disk_bytes, d, sizeof(d)), fmt_bytes(peers, p, sizeof(p)), lm->nsources,
		 lm->nsources == 1 ? "" : "s");
	for (uint32_t i = 0; i < lm->nsources; i++)
		log_info("  peer %s: %s, %u checksum failure%s, %u failure%s", lm->sources[i].name,
			 fmt_bytes(lm->sources[i].bytes, p, sizeof(p)), lm->sources[i].checksum_failures,
			 lm->sources[i].checksum_failures == 1 ? "" : "s", lm->sources[i].failures,
			 lm->sources[i].failures == 1 ? "" : "s");
}

/* The fill's process: UCX from start to end, so that a peer's bytes that
 * make UCX abort end this process, not wsrvd. Pieces
 * land in the arena's shared pages; F->st and the table (shared too) say
 * which tensors are whole and checked. Never returns. */
static void fill_child(struct fill *F, const struct load_opts *o, struct fill_shared *sh)
{
	struct errinfo e = { 0 };
	int r;

	prctl(PR_SET_NAME, "wsrvd-fill");
	prctl(PR_SET_PDEATHSIG, SIGKILL);
	/* The peers' counters where wsrvd reads them, however this ends. */
	for (size_t p = 0; p < F->np; p++)
		F->peers[p].src = &sh->sources[F->peers[p].src - F->lm->sources];
	/* UCX's memory hooks are off in wsrvd from its start (wsrvd.c,
	 * no_ucx_memory_hooks): their lock may have been held at the fork. */
	r = fio_init(&F->io, F->peers, F->np, &F->hello, F->cfg->trust, &F->dest, &e);
	if (r == 0)
		r = fill_loop(F, o, &e);
	if (F->io.worker)
		fio_fini(&F->io);
	snprintf(sh->msg, sizeof(sh->msg), "%s", r < 0 ? e.msg : "");
	sh->r = r;
	_exit(0);
}

/* Waits for the fill's process; kills it when the load is stopped. Its
 * wait status, or -ECANCELED. */
static int reap_fill(pid_t pid, const struct load_opts *o)
{
	int status;

	for (;;) {
		if (waitpid(pid, &status, WNOHANG) == pid)
			return status;
		if (o->loader.stop && o->loader.stop()) {
			kill(pid, SIGKILL);
			waitpid(pid, &status, 0);
			return -ECANCELED;
		}
		usleep(2000);
	}
}

/* What the fill's process left: its outcome and sources, the checksums
 * of what it fetched. One that died gave what it had checked; the rest
 * goes to the files. */
static int fill_outcome(struct fill *F, pid_t pid, int status, const struct fill_shared *sh,
			struct errinfo *e)
{
	bool whole = WIFEXITED(status) && WEXITSTATUS(status) == 0;

	memcpy(F->lm->sources, sh->sources, sizeof(sh->sources));

	for (size_t i = 0; i < F->m->ntensors; i++) {
		if (F->st[i] == T_DONE)
			F->m->tensors[i].xxh3 = F->tab->xxh3[i];
		else if (!whole && (F->st[i] == T_NEED || F->st[i] == T_FETCH))
			t_to(F, (uint32_t)i, T_DISK);
	}
	if (!whole) {
		log_warn("peers: the fill's process (pid %d) ended (%s %d); what it had not fetched and checked "
			 "is read from the files", (int)pid, WIFSIGNALED(status) ? "signal" : "exit status",
			 WIFSIGNALED(status) ? WTERMSIG(status) : WEXITSTATUS(status));
		return 0;
	}
	return sh->r < 0 ? err_set(e, sh->r, "%s", sh->msg) : 0;
}

/* The fill's process, and what it leaves. */
struct fill_proc {
	pid_t pid;                  /* 0: none */
	struct fill_shared *sh;     /* owned */
};

/* Starts the fill's process. Called before this fill starts a thread of
 * its own: a fork copies only the calling thread, and a lock another
 * thread held (malloc's under ASan, UCX's memory hooks) stays held in the
 * child for ever (a fleet's fill hung so). */
static int fill_fork(struct fill *F, const struct load_opts *o, struct fill_proc *p, struct errinfo *e)
{
	if (!(p->sh = shared_alloc(sizeof(*p->sh))))
		return err_set(e, -ENOMEM, "out of memory");
	memcpy(p->sh->sources, F->lm->sources, sizeof(p->sh->sources));
	p->pid = fork();
	if (p->pid == 0)
		fill_child(F, o, p->sh);
	if (p->pid < 0) {
		p->pid = 0;
		return err_set(e, -errno, "peers: cannot start the fill's process: %s", strerror(errno));
	}
	return 0;
}

/* Waits for the fill's process (killed first when failed is set: the
 * load fails anyway) and takes what it left. */
static int fill_join(struct fill *F, const struct load_opts *o, struct fill_proc *p, bool failed,
		     struct errinfo *e)
{
	int status, r = 0;

	if (p->pid > 0 && failed)
		kill(p->pid, SIGKILL);
	if (p->pid > 0 && (status = reap_fill(p->pid, o)) == -ECANCELED)
		r = err_set(e, -ECANCELED, "the load was stopped");
	else if (p->pid > 0 && !failed)
		r = fill_outcome(F, p->pid, status, p->sh, e);
	if (p->sh)
		munmap(p->sh, sizeof(*p->sh));
	*p = (struct fill_proc){ 0 };
	return r;
}

int peer_fill_run(void *arg, struct loaded_model *lm, const struct load_opts *o, struct errinfo *e)
{
	struct fill *F = calloc(1, sizeof(*F));
	struct disk_job own = { 0 }, rest = { 0 };
	struct fill_proc proc = { 0 };
	double t0 = mono_now();
	pthread_t th;
	int r, threaded = 0;

	if (!F)
		return err_set(e, -ENOMEM, "out of memory");
	F->cfg = arg;
	F->lm = lm;
	F->m = lm->model;
	memset(&lm->stats, 0, sizeof(lm->stats));
	r = start(F, e);
	/* What peers give, in the fill's process, while this host's own share
	 * is read from the files; then what no peer could give. */
	if (r == 0 && F->np)
		r = fill_fork(F, o, &proc, e);
	if (r == 0)
		r = threaded = disk_read(F, o, T_OWN, &own, F->np ? &th : NULL, e);
	if (proc.pid) {
		struct errinfo je;
		int rj = fill_join(F, o, &proc, r < 0, &je);
		if (r >= 0 && rj < 0)
			*e = je, r = rj;
	}
	log_debug("model %s: peers done at %.3f s", F->m->name, mono_now() - t0);
	if (threaded == 1) {
		pthread_join(th, NULL);
		log_debug("model %s: this host's share read at %.3f s", F->m->name, mono_now() - t0);
		add_stats(lm, &own.st);
		if (r >= 0 && own.r < 0) {
			*e = own.e;
			r = own.r;
		}
	}
	if (r >= 0)
		r = disk_read(F, o, T_DISK, &rest, NULL, e);
	free(own.want);
	free(rest.want);
	fill_finish(F);
	log_debug("model %s: filled at %.3f s", lm->model->name, mono_now() - t0);
	lm->stats.seconds = mono_now() - t0;
	if (r >= 0 && lm->nsources)
		log_sources(lm);
	return r < 0 ? r : 0;
}
