// SPDX-License-Identifier: MIT
/* peer_serve.c - wsrvd's side of --peer-listen (peer_serve.h): starts
 * the peer process, tells it what is offered, and starts it again, with
 * everything offered, when it dies. */
#include "peer_serve.h"

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "clock.h"
#include "log.h"
#include "memfd_util.h"
#include "packet.h"
#include "peer_child.h"
#include "peer_table.h"
#include "peer_thread.h"

#define PEER_START_TIMEOUT_S 15
#define PEER_RESTART_MIN_S 1.0
#define PEER_RESTART_MAX_S 30.0

struct peer_serve {
	char addr[64];
	struct peer_trust trust;
	pthread_mutex_t lock;       /* what follows, and every send to the child */
	struct peer_table *tabs[PEER_MAX_TABLES]; /* offered now, owned */
	struct pc_expect expect;
	struct peer_serve_counters *cnt; /* shared with the child */
	int cnt_fd;
	int sock;                   /* to the child; -1 while it is down */
	pid_t pid;
	double started, respawn_at, backoff;
	struct peer_thread th;      /* the watch of the child */
};

/* The child's end as fd 3, then wsrvd again as the peer process. Only
 * async-signal-safe calls: wsrvd has threads. */
static void exec_child(int end)
{
	static char *const argv[] = { "wsrvd-peers", PEER_CHILD_ARG, NULL };

	if (end == PEER_CHILD_FD)
		fcntl(end, F_SETFD, 0);
	else if (dup2(end, PEER_CHILD_FD) < 0)
		_exit(127);
	execv("/proc/self/exe", argv);
	_exit(127);
}

/* Waits (PEER_START_TIMEOUT_S at most) for the child's PC_STARTED. */
static int wait_started(struct peer_serve *ps, struct errinfo *e)
{
	struct pollfd pf = { .fd = ps->sock, .events = POLLIN };
	struct pc_started st = { 0 };
	int fds[4], n = 0;
	long len;

	if (poll(&pf, 1, PEER_START_TIMEOUT_S * 1000) != 1)
		return err_set(e, -ETIMEDOUT, "peers: the peer process did not start within %d s",
			       PEER_START_TIMEOUT_S);
	len = pkt_recv(ps->sock, &st, sizeof(st), fds, 4, &n);
	pkt_close_fds(fds, n);
	if (len != sizeof(st) || st.kind != PC_STARTED)
		return err_set(e, -EIO, "peers: the peer process ended as it started");
	st.msg[sizeof(st.msg) - 1] = 0;
	if (st.status < 0)
		return err_set(e, st.status, "%s", st.msg);
	return 0;
}

static void send_offer(struct peer_serve *ps, const struct peer_table *t)
{
	struct pc_offer o = { .kind = PC_OFFER, .nseg = t->nseg, .hugetlb = t->hugetlb };
	int fds[WSRV_MAX_FDS], n = 0;
	uint32_t k = 0;

	fds[n++] = t->tfd;
	while (k < t->nseg && n < WSRV_MAX_FDS)
		fds[n++] = t->fd[k++];
	if (pkt_send(ps->sock, &o, sizeof(o), fds, n) < 0)
		return; /* the child is going: it gets everything when it comes back */
	while (k < t->nseg) { /* the rest of the segments, WSRV_MAX_FDS a packet */
		uint32_t more = PC_OFFER;
		for (n = 0; k < t->nseg && n < WSRV_MAX_FDS;)
			fds[n++] = t->fd[k++];
		if (pkt_send(ps->sock, &more, sizeof(more), fds, n) < 0)
			return;
	}
}

/* Everything offered now, to a child just started (lock held). */
static void send_all(struct peer_serve *ps)
{
	for (size_t i = 0; i < PEER_MAX_TABLES; i++)
		if (ps->tabs[i])
			send_offer(ps, ps->tabs[i]);
	(void)pkt_send(ps->sock, &ps->expect, sizeof(ps->expect), NULL, 0);
}

/* Starts the child and hands it the configuration (lock held, or before
 * the thread). */
static int spawn(struct peer_serve *ps, double busy_wait_s, struct errinfo *e)
{
	struct pc_config c = { .kind = PC_CONFIG, .busy_wait_s = busy_wait_s, .trust = ps->trust };
	int sv[2], r;

	if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) < 0)
		return err_set(e, -errno, "peers: socketpair: %s", strerror(errno));
	ps->pid = fork();
	if (ps->pid == 0)
		exec_child(sv[1]);
	close(sv[1]);
	if (ps->pid < 0) {
		close(sv[0]);
		return err_set(e, -errno, "peers: cannot start the peer process: %s", strerror(errno));
	}
	ps->sock = sv[0];
	ps->started = mono_now();
	snprintf(c.addr, sizeof(c.addr), "%s", ps->addr);
	r = pkt_send(ps->sock, &c, sizeof(c), &ps->cnt_fd, 1);
	explicit_bzero(&c, sizeof(c));
	if (r < 0)
		err_set(e, r, "peers: the peer process ended as it started");
	else
		r = wait_started(ps, e);
	if (r < 0) {
		close(ps->sock);
		ps->sock = -1;
		kill(ps->pid, SIGKILL);
		waitpid(ps->pid, NULL, 0);
		return r;
	}
	send_all(ps);
	return 0;
}

/* How the child ended, in words. */
static void describe(int status, char *buf, size_t len)
{
	if (WIFSIGNALED(status))
		snprintf(buf, len, "killed by signal %d (%s)", WTERMSIG(status), strsignal(WTERMSIG(status)));
	else
		snprintf(buf, len, "exit status %d", WEXITSTATUS(status));
}

/* The child hung up: reaped, and started again after a pause that grows
 * while it keeps dying soon after its start (lock held). */
static void child_gone(struct peer_serve *ps)
{
	char how[96];
	int status = 0;

	close(ps->sock);
	ps->sock = -1;
	waitpid(ps->pid, &status, 0);
	describe(status, how, sizeof(how));
	if (mono_now() - ps->started > 60)
		ps->backoff = PEER_RESTART_MIN_S;
	else
		ps->backoff = ps->backoff < PEER_RESTART_MIN_S ? PEER_RESTART_MIN_S
			    : ps->backoff * 2 > PEER_RESTART_MAX_S ? PEER_RESTART_MAX_S : ps->backoff * 2;
	ps->respawn_at = mono_now() + ps->backoff;
	log_warn("peers: the peer process (pid %d) ended: %s; clients of this server are not affected; "
		 "starting it again in %.0f s", (int)ps->pid, how, ps->backoff);
}

static void *watch(void *arg)
{
	struct peer_serve *ps = arg;

	for (;;) {
		struct pollfd pf[2] = { { .fd = ps->th.stopfd, .events = POLLIN }, { .fd = ps->sock, .events = 0 } };
		struct errinfo e;
		poll(pf, ps->sock >= 0 ? 2 : 1, 500);
		if (pf[0].revents)
			return NULL;
		pthread_mutex_lock(&ps->lock);
		if (ps->sock >= 0 && (pf[1].revents & (POLLHUP | POLLERR | POLLIN)))
			child_gone(ps);
		if (ps->sock < 0 && mono_now() >= ps->respawn_at) {
			if (spawn(ps, 30, &e) == 0) {
				ps->cnt->restarts++;
				log_info("peers: the peer process serves again (pid %d)", (int)ps->pid);
			} else {
				ps->respawn_at = mono_now() + PEER_RESTART_MAX_S;
				log_warn("%s; trying again in %.0f s", e.msg, PEER_RESTART_MAX_S);
			}
		}
		pthread_mutex_unlock(&ps->lock);
	}
}

static int counters_new(struct peer_serve *ps, struct errinfo *e)
{
	void *p;

	ps->cnt_fd = memfd_new_mapped("wsrv:peers:counters", sizeof(*ps->cnt), &p);
	if (ps->cnt_fd < 0)
		return err_set(e, ps->cnt_fd, "peers: cannot make the counters: %s", strerror(-ps->cnt_fd));
	ps->cnt = p;
	return 0;
}

int peer_serve_start(const char *addr, const struct peer_trust *trust, double busy_wait_s,
		     struct peer_serve **out, struct errinfo *e)
{
	struct peer_serve *ps = calloc(1, sizeof(*ps));
	int r;

	if (!ps)
		return err_set(e, -ENOMEM, "out of memory");
	ps->trust = *trust;
	ps->sock = ps->cnt_fd = -1;
	ps->expect.kind = PC_EXPECT;
	snprintf(ps->addr, sizeof(ps->addr), "%s", addr);
	pthread_mutex_init(&ps->lock, NULL);
	r = peer_thread_init(&ps->th, e);
	if (r == 0)
		r = counters_new(ps, e);
	if (r == 0)
		r = spawn(ps, busy_wait_s, e);
	if (r == 0)
		r = peer_thread_start(&ps->th, watch, ps, e);
	if (r < 0) {
		peer_serve_stop(ps);
		return r;
	}
	log_info("peers: the peer process is pid %d", (int)ps->pid);
	*out = ps;
	return 0;
}

int peer_serve_offer(struct peer_serve *ps, struct peer_table *t, struct errinfo *e)
{
	size_t free_at = PEER_MAX_TABLES;

	pthread_mutex_lock(&ps->lock);
	for (size_t i = 0; i < PEER_MAX_TABLES; i++) {
		if (ps->tabs[i] && strcmp(ps->tabs[i]->name, t->name) == 0) {
			peer_table_free(ps->tabs[i]);
			ps->tabs[i] = NULL;
		}
		if (!ps->tabs[i] && free_at == PEER_MAX_TABLES)
			free_at = i;
	}
	if (free_at == PEER_MAX_TABLES) {
		pthread_mutex_unlock(&ps->lock);
		peer_table_free(t);
		return err_set(e, -E2BIG, "peers: more than %d models offered", PEER_MAX_TABLES);
	}
	ps->tabs[free_at] = t;
	if (ps->sock >= 0)
		send_offer(ps, t);
	pthread_mutex_unlock(&ps->lock);
	return 0;
}

int peer_serve_offer_loaded(struct peer_serve *ps, const struct model *m, const struct arena *a,
			    struct errinfo *e)
{
	struct peer_table *t;
	int r = peer_table_create(m, a, &t, e);

	if (r < 0)
		return r;
	for (uint32_t i = 0; i < t->ntensors; i++)
		peer_table_set_ready(t, i, m->tensors[i].xxh3);
	return peer_serve_offer(ps, t, e);
}

void peer_serve_withdraw(struct peer_serve *ps, const char *name)
{
	struct pc_name w = { .kind = PC_WITHDRAW };

	snprintf(w.name, sizeof(w.name), "%s", name);
	pthread_mutex_lock(&ps->lock);
	for (size_t i = 0; i < PEER_MAX_TABLES; i++)
		if (ps->tabs[i] && strcmp(ps->tabs[i]->name, name) == 0) {
			peer_table_free(ps->tabs[i]);
			ps->tabs[i] = NULL;
		}
	if (ps->sock >= 0)
		(void)pkt_send(ps->sock, &w, sizeof(w), NULL, 0);
	pthread_mutex_unlock(&ps->lock);
}

void peer_serve_expect(struct peer_serve *ps, const char *const *names, size_t n)
{
	pthread_mutex_lock(&ps->lock);
	ps->expect.n = 0;
	for (size_t i = 0; i < n && i < PEER_MAX_TABLES; i++)
		snprintf(ps->expect.names[ps->expect.n++], sizeof(ps->expect.names[0]), "%s", names[i]);
	if (ps->sock >= 0)
		(void)pkt_send(ps->sock, &ps->expect, sizeof(ps->expect), NULL, 0);
	pthread_mutex_unlock(&ps->lock);
}

void peer_serve_counters(struct peer_serve *ps, struct peer_serve_counters *out)
{
	/* Written by the child under its own lock: a scrape may see one
	 * counter a moment older than another, never a torn one. */
	out->bytes_served = __atomic_load_n(&ps->cnt->bytes_served, __ATOMIC_RELAXED);
	out->gets = __atomic_load_n(&ps->cnt->gets, __ATOMIC_RELAXED);
	out->refused = __atomic_load_n(&ps->cnt->refused, __ATOMIC_RELAXED);
	out->conns = __atomic_load_n(&ps->cnt->conns, __ATOMIC_RELAXED);
	out->restarts = __atomic_load_n(&ps->cnt->restarts, __ATOMIC_RELAXED);
}

/* Asks the child to stop, and waits 3 s for it before SIGKILL. */
static void stop_child(struct peer_serve *ps)
{
	uint32_t stop = PC_STOP;
	int status;

	if (ps->sock < 0)
		return;
	(void)pkt_send(ps->sock, &stop, sizeof(stop), NULL, 0);
	for (int i = 0; i < 300 && waitpid(ps->pid, &status, WNOHANG) == 0; i++)
		usleep(10000);
	if (waitpid(ps->pid, &status, WNOHANG) == 0) {
		kill(ps->pid, SIGKILL);
		waitpid(ps->pid, &status, 0);
	}
	close(ps->sock);
	ps->sock = -1;
}

void peer_serve_stop(struct peer_serve *ps)
{
	if (!ps)
		return;
	peer_thread_end(&ps->th);
	stop_child(ps);
	for (size_t i = 0; i < PEER_MAX_TABLES; i++)
		peer_table_free(ps->tabs[i]);
	if (ps->cnt)
		munmap(ps->cnt, sizeof(*ps->cnt));
	if (ps->cnt_fd >= 0)
		close(ps->cnt_fd);
	pthread_mutex_destroy(&ps->lock);
	free(ps);
}
