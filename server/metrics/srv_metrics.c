// SPDX-License-Identifier: MIT
/* srv_metrics.c - the HTTP side of --metrics-listen (srv_metrics.h).
 *
 * Limits, so that a scraper can never disturb serving: 16 connections at
 * once, 4 from any one address, 5 s of silence before a connection is
 * dropped, and 10 s for a whole connection however busy it keeps (a
 * client trickling a header line every few seconds held a connection for
 * as long as it went on, and 16 of them kept /metrics from everyone).
 * A local peer (loopback, or the host's own address on a listener bound
 * to 0.0.0.0 or [::]) counts as its user (the kernel's socket diagnostics
 * say whose its socket is), not as its address. 16 KiB for a request's
 * headers (larger ones get MHD's 4xx), GET and HEAD of /metrics only (405
 * and 404 otherwise), epoll (fds above 1024 are fine). */
#include "srv_metrics.h"

#include <arpa/inet.h>
#include <errno.h>
#include <microhttpd.h>
#include <netdb.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <fcntl.h>
#include <stdint.h>
#include <unistd.h>

#include "clock.h"
#include "log.h"
#include "peer_uid.h"

#define METRICS_CONNS 16          /* connections served at once */
#define METRICS_SLOTS (2 * METRICS_CONNS) /* and closing ones, for room to evict: MHD's
                                   * own limit, which it applies before asking */
#define METRICS_SHUN 32           /* addresses remembered as slow */
#define METRICS_SHUN_S 10.0       /* how long an address whose connection was closed as
                                   * slow, never having sent a whole request, may not
                                   * take another's place */
#define METRICS_PER_ADDR 4        /* of them from one address (all loopback: one) */
#define METRICS_SLOW_S 0.1        /* a connection this long without a whole request may
                                   * be closed to make room for a new one (a scrape
                                   * takes milliseconds) */
#define METRICS_TIMEOUT_S 5
#define METRICS_DEADLINE_S 10.0
#define METRICS_HEADER_BYTES (16u << 10)
#define CONTENT_TYPE "text/plain; version=0.0.4; charset=utf-8"

struct srv_metrics {
	struct MHD_Daemon *d;
	pthread_mutex_t lock;       /* text and len */
	char *text;                 /* the snapshot served, or NULL */
	size_t len;
	char *pending;              /* published while the lock was held */
	size_t pending_len;
	uint16_t port;
	pthread_mutex_t conn_lock;  /* conns */
	struct mconn {
		int fd;             /* a dup of the connection's socket (ours), or -1 */
		double since;
		uint8_t key[17];    /* its address (addr_key) */
		uint8_t exact[17];  /* its address itself (addr_exact) */
		bool evicted;       /* closed for a newer one, not gone yet: not counted */
		bool asked;         /* it has sent a whole request (its headers) */
	} conns[METRICS_SLOTS];
	uint8_t next_key[17];       /* the address the policy let in last */
	uint8_t next_exact[17];
	struct shun {
		uint8_t exact[17];
		double until;
	} shun[METRICS_SHUN];       /* addresses closed as slow (METRICS_SHUN_S) */
};

/* An address for the per-address limit: IPv6, or IPv4 mapped into it,
 * then the family. Every loopback address is one: each of 127.0.0.0/8 is
 * this host, and counted apart they would let one local process take
 * every slot from 127.0.0.2, .3, ... */
static void addr_key(const struct sockaddr *sa, uint8_t key[17])
{
	memset(key, 0, 17);
	if (sa->sa_family == AF_INET) {
		const struct sockaddr_in *a = (const struct sockaddr_in *)(const void *)sa;
		if ((ntohl(a->sin_addr.s_addr) >> 24) == 127) {
			key[16] = 1;
			return;
		}
		key[10] = key[11] = 0xff;
		memcpy(key + 12, &a->sin_addr, 4);
	} else if (sa->sa_family == AF_INET6) {
		const struct sockaddr_in6 *a = (const struct sockaddr_in6 *)(const void *)sa;
		if (IN6_IS_ADDR_LOOPBACK(&a->sin6_addr) ||
		    (IN6_IS_ADDR_V4MAPPED(&a->sin6_addr) && a->sin6_addr.s6_addr[12] == 127)) {
			key[16] = 1;
			return;
		}
		memcpy(key, &a->sin6_addr, 16);
	}
	key[16] = 2;
}

/* A local peer's user: in the place of its address in the per-address
 * key, and beside its address in the exact one, so that one user's slow
 * connections on 127.0.0.1, or on the host's own address when the
 * listener is bound to 0.0.0.0 or [::], never shut out another user's
 * scraper there (the limit and the shunning are that user's). A peer is
 * local when its socket is in this host's table, whatever its address: a
 * remote one's never is. Left as they were when its user cannot be found. */
static void user_key(const struct srv_metrics *m, const struct sockaddr *sa, uint8_t key[17], uint8_t exact[17])
{
	uid_t uid;

	if (local_peer_uid(sa, m->port, &uid) < 0)
		return;
	memset(key, 0, 17);
	memcpy(key, &uid, sizeof(uid));
	key[16] = 3;
	memcpy(exact, &uid, sizeof(uid)); /* over a loopback address's zeros */
	exact[16] = 3;
}

/* The address itself, every loopback one apart: whom to shun. */
static void addr_exact(const struct sockaddr *sa, uint8_t key[17])
{
	memset(key, 0, 17);
	if (sa->sa_family == AF_INET) {
		const struct sockaddr_in *a = (const struct sockaddr_in *)(const void *)sa;
		key[10] = key[11] = 0xff;
		memcpy(key + 12, &a->sin_addr, 4);
	} else if (sa->sa_family == AF_INET6) {
		memcpy(key, &((const struct sockaddr_in6 *)(const void *)sa)->sin6_addr, 16);
	}
	key[16] = 2;
}

/* Whether exact was closed as slow within METRICS_SHUN_S. */
static bool shunned(const struct srv_metrics *m, const uint8_t exact[17], double now)
{
	for (int i = 0; i < METRICS_SHUN; i++)
		if (m->shun[i].until > now && memcmp(m->shun[i].exact, exact, 17) == 0)
			return true;
	return false;
}

/* Address exact is shunned for METRICS_SHUN_S (in the place of the entry
 * that ends first). */
static void shun(struct srv_metrics *m, const uint8_t exact[17], double now)
{
	int at = 0;

	for (int i = 0; i < METRICS_SHUN; i++) {
		if (memcmp(m->shun[i].exact, exact, 17) == 0) {
			at = i;
			break;
		}
		if (m->shun[i].until < m->shun[at].until)
			at = i;
	}
	memcpy(m->shun[at].exact, exact, 17);
	m->shun[at].until = now + METRICS_SHUN_S;
}

/* Whether connection c is slow: METRICS_SLOW_S without a whole request
 * (its first, or the next of a connection kept alive). */
static bool is_slow(const struct mconn *c, double now)
{
	return c->fd >= 0 && !c->evicted && c->since && now - c->since >= METRICS_SLOW_S;
}

/* The connections address exact holds (with slow_only, those of them
 * that are slow and have never sent a whole request). */
static int held_by(const struct srv_metrics *m, const uint8_t exact[17], double now, bool slow_only)
{
	int n = 0;

	for (int i = 0; i < METRICS_SLOTS; i++) {
		const struct mconn *c = &m->conns[i];
		if (c->fd >= 0 && !c->evicted && memcmp(c->exact, exact, 17) == 0)
			n += !slow_only || (is_slow(c, now) && !c->asked);
	}
	return n;
}

/* The slow connection (with key, or any when key is NULL) to close for a
 * newcomer, or -1: one of the address that holds the most connections,
 * the oldest of them. A scraper holds one at a time, a crowd of slow
 * clients many, so the crowd's go first. */
static int slow_victim(const struct srv_metrics *m, const uint8_t *key, double now)
{
	int best = -1, best_n = 0;

	for (int i = 0; i < METRICS_SLOTS; i++) {
		const struct mconn *c = &m->conns[i];
		if (!is_slow(c, now) || (key && memcmp(c->key, key, 17) != 0))
			continue;
		int n = held_by(m, c->exact, now, false);
		if (best < 0 || n > best_n || (n == best_n && c->since < m->conns[best].since)) {
			best = i;
			best_n = n;
		}
	}
	return best;
}

/* For a newcomer whose address holds no connection: one that has never
 * asked a whole request, of the address (exact) holding the most, when
 * that is two or more (with key, of that key), the oldest of them; or -1.
 * However young a crowd's connections are, an address that holds none
 * takes the place of one of an address that holds several: a scraper on
 * 127.0.0.1 beside 32 slow connections from 127.0.0.2-9 found every slot
 * younger than slow now and then (22 of 24 scrapes in a busy sanitizer
 * run), and its scrape was refused. */
static int crowd_victim(const struct srv_metrics *m, const uint8_t *key, double now)
{
	int best = -1, best_n = 1;

	for (int i = 0; i < METRICS_SLOTS; i++) {
		const struct mconn *c = &m->conns[i];
		if (c->fd < 0 || c->evicted || c->asked || (key && memcmp(c->key, key, 17) != 0))
			continue;
		int n = held_by(m, c->exact, now, false);
		if (n > best_n || (best >= 0 && n == best_n && c->since < m->conns[best].since)) {
			best = i;
			best_n = n;
		}
	}
	return best;
}

/* MHD asks before it takes a connection: within METRICS_CONNS in all and
 * METRICS_PER_ADDR from its address, or else in the place of a slow one
 * there (closed now: slow_victim's), so that slow clients never keep a
 * scraper out; refused when there is none. An address shunned (a
 * connection of its closed as slow, never having sent a whole request,
 * within METRICS_SHUN_S; or refused while one of its own sat so) is
 * refused: slow clients that came back at once whenever closed would keep
 * every slot younger than slow, and a scraper would find none to take. A
 * scraper sends whole requests and holds one connection, so it is never
 * shunned, unless it shares its address with a slow client. */
static enum MHD_Result policy(void *arg, const struct sockaddr *sa, socklen_t len)
{
	struct srv_metrics *m = arg;
	uint8_t key[17], exact[17];
	int same = 0, all = 0, v = -1;
	double now = mono_now();
	bool full;

	(void)len;
	addr_key(sa, key);
	addr_exact(sa, exact);
	user_key(m, sa, key, exact);
	pthread_mutex_lock(&m->conn_lock);
	for (int i = 0; i < METRICS_SLOTS; i++)
		if (m->conns[i].fd >= 0 && !m->conns[i].evicted) {
			all++;
			same += memcmp(m->conns[i].key, key, 17) == 0;
		}
	full = same >= METRICS_PER_ADDR || all >= METRICS_CONNS || shunned(m, exact, now);
	if (full && !shunned(m, exact, now))
		v = slow_victim(m, same >= METRICS_PER_ADDR ? key : NULL, now);
	if (full && v < 0 && !shunned(m, exact, now) && !held_by(m, exact, now, false))
		v = crowd_victim(m, same >= METRICS_PER_ADDR ? key : NULL, now);
	if (v >= 0) {
		(void)shutdown(m->conns[v].fd, SHUT_RDWR);
		m->conns[v].evicted = true;
		if (!m->conns[v].asked) /* a scraper between its requests is not slow */
			shun(m, m->conns[v].exact, now);
	}
	/* Refused while one of its own connections sits slow, never having
	 * asked: an address that crowds, not a scraper. */
	if (full && v < 0 && held_by(m, exact, now, true))
		shun(m, exact, now);
	memcpy(m->next_key, key, 17);
	memcpy(m->next_exact, exact, 17);
	pthread_mutex_unlock(&m->conn_lock);
	return !full || v >= 0 ? MHD_YES : MHD_NO;
}

static enum MHD_Result reply(struct MHD_Connection *c, unsigned status, const char *body)
{
	struct MHD_Response *r = MHD_create_response_from_buffer(strlen(body), (void *)body,
								 MHD_RESPMEM_PERSISTENT);
	enum MHD_Result ret;

	if (!r)
		return MHD_NO;
	MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, "text/plain; charset=utf-8");
	if (status == MHD_HTTP_METHOD_NOT_ALLOWED)
		MHD_add_response_header(r, MHD_HTTP_HEADER_ALLOW, "GET, HEAD");
	ret = MHD_queue_response(c, status, r);
	MHD_destroy_response(r);
	return ret;
}

/* The snapshot, copied under the lock (the loop only ever tries it). */
static enum MHD_Result serve_snapshot(struct srv_metrics *m, struct MHD_Connection *c)
{
	struct MHD_Response *r = NULL;
	enum MHD_Result ret;

	pthread_mutex_lock(&m->lock);
	if (m->text)
		r = MHD_create_response_from_buffer(m->len, m->text, MHD_RESPMEM_MUST_COPY);
	pthread_mutex_unlock(&m->lock);
	if (!r)
		return reply(c, MHD_HTTP_SERVICE_UNAVAILABLE, "no metrics yet\n");
	MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, CONTENT_TYPE);
	ret = MHD_queue_response(c, MHD_HTTP_OK, r);
	MHD_destroy_response(r);
	return ret;
}

/* Connection c has sent a whole request: not slow while it is answered. */
static void asked(struct srv_metrics *m, struct MHD_Connection *c)
{
	const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
	intptr_t slot = ci ? (intptr_t)ci->socket_context - 1 : -1;

	pthread_mutex_lock(&m->conn_lock);
	if (slot >= 0 && slot < METRICS_SLOTS && m->conns[slot].fd >= 0 && m->conns[slot].since &&
	    !m->conns[slot].evicted) {
		m->conns[slot].since = mono_now();
		m->conns[slot].asked = true;
	}
	pthread_mutex_unlock(&m->conn_lock);
}

static enum MHD_Result on_request(void *arg, struct MHD_Connection *c, const char *url,
				  const char *method, const char *version, const char *upload,
				  size_t *upload_len, void **state)
{
	asked(arg, c);
	if (strcmp(method, MHD_HTTP_METHOD_GET) != 0 && strcmp(method, MHD_HTTP_METHOD_HEAD) != 0)
		return reply(c, MHD_HTTP_METHOD_NOT_ALLOWED, "only GET and HEAD\n");
	if (strcmp(url, "/metrics") != 0)
		return reply(c, MHD_HTTP_NOT_FOUND, "wsrvd serves /metrics only\n");
	return serve_snapshot(arg, c);
}

/* MHD tells of each connection: a dup of its socket is kept with its
 * start, so that srv_metrics_sweep can end it from outside MHD's thread;
 * the dup is this file's, so its number is never another's. */
static void on_conn(void *arg, struct MHD_Connection *c, void **ctx, enum MHD_ConnectionNotificationCode code)
{
	struct srv_metrics *m = arg;
	const union MHD_ConnectionInfo *ci;
	intptr_t slot = (intptr_t)*ctx - 1;

	pthread_mutex_lock(&m->conn_lock);
	if (code == MHD_CONNECTION_NOTIFY_STARTED &&
	    (ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD))) {
		for (slot = 0; slot < METRICS_SLOTS && m->conns[slot].fd >= 0; slot++)
			;
		if (slot < METRICS_SLOTS &&
		    (m->conns[slot].fd = fcntl(ci->connect_fd, F_DUPFD_CLOEXEC, 3)) >= 0) {
			m->conns[slot].since = mono_now();
			m->conns[slot].evicted = false;
			m->conns[slot].asked = false;
			memcpy(m->conns[slot].key, m->next_key, 17); /* policy ran just before, on this thread */
			memcpy(m->conns[slot].exact, m->next_exact, 17);
			*ctx = (void *)(slot + 1);
		}
	} else if (code == MHD_CONNECTION_NOTIFY_CLOSED && slot >= 0 && slot < METRICS_SLOTS) {
		close(m->conns[slot].fd);
		m->conns[slot].fd = -1;
		*ctx = NULL;
	}
	pthread_mutex_unlock(&m->conn_lock);
}

/* A request answered: the connection's next one has its own deadline
 * (a scraper keeping its connection alive is not slow). */
static void on_done(void *arg, struct MHD_Connection *c, void **ctx, enum MHD_RequestTerminationCode toe)
{
	struct srv_metrics *m = arg;
	const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
	intptr_t slot = ci ? (intptr_t)ci->socket_context - 1 : -1;

	pthread_mutex_lock(&m->conn_lock);
	/* (An evicted connection may be ended by MHD only later, and said
	 * to be complete: it is slow, not answered.) */
	if (toe == MHD_REQUEST_TERMINATED_COMPLETED_OK && slot >= 0 && slot < METRICS_SLOTS &&
	    m->conns[slot].fd >= 0 && m->conns[slot].since && !m->conns[slot].evicted) {
		m->conns[slot].since = mono_now();
		m->conns[slot].asked = true;
	}
	pthread_mutex_unlock(&m->conn_lock);
}

void srv_metrics_sweep(struct srv_metrics *m)
{
	double now = mono_now();

	pthread_mutex_lock(&m->conn_lock);
	for (int i = 0; i < METRICS_SLOTS; i++)
		if (m->conns[i].fd >= 0 && m->conns[i].since && now - m->conns[i].since > METRICS_DEADLINE_S) {
			log_info("metrics: a request not whole after %.0f s; its connection is closed",
				 METRICS_DEADLINE_S);
			(void)shutdown(m->conns[i].fd, SHUT_RDWR);
			m->conns[i].since = 0; /* once */
		}
	pthread_mutex_unlock(&m->conn_lock);
}

__attribute__((format(printf, 2, 0))) static void mhd_log(void *arg, const char *fmt, va_list ap)
{
	char buf[256];

	vsnprintf(buf, sizeof(buf), fmt, ap);
	buf[strcspn(buf, "\n")] = 0;
	log_debug("metrics: %s", buf);
}

/* The port of "HOST:PORT": digits only, 0 (any free port) to 65535
 * (getaddrinfo takes 99999 and keeps its low 16 bits). */
static int parse_port(const char *addr, const char *p, struct errinfo *e)
{
	unsigned long v = 0;

	if (!*p || strlen(p) > 5 || strspn(p, "0123456789") != strlen(p) || (v = strtoul(p, NULL, 10)) > 65535)
		return err_set(e, -EINVAL, "--metrics-listen '%s': the port must be a number from 0 (any free "
			       "port) to 65535", addr);
	return 0;
}

/* "HOST:PORT" or "[IPv6]:PORT": HOST a numeric IP address, or localhost
 * (127.0.0.1). No other name: a daemon's start does not wait on DNS. */
static int parse_addr(const char *addr, struct sockaddr_storage *ss, struct errinfo *e)
{
	char host[128];
	const char *colon = strrchr(addr, ':'), *h = addr;
	size_t hl;
	struct addrinfo hints = { .ai_flags = AI_NUMERICHOST | AI_NUMERICSERV, .ai_socktype = SOCK_STREAM }, *ai;
	int r;

	if (!colon || colon == addr)
		return err_set(e, -EINVAL, "--metrics-listen '%s': want HOST:PORT, such as 127.0.0.1:9464", addr);
	if ((r = parse_port(addr, colon + 1, e)) < 0)
		return r;
	hl = (size_t)(colon - addr);
	if (*h == '[' && hl >= 2 && colon[-1] == ']') {
		h++;
		hl -= 2;
	}
	if (hl >= sizeof(host))
		return err_set(e, -EINVAL, "--metrics-listen '%s': the address is too long", addr);
	memcpy(host, h, hl);
	host[hl] = 0;
	if (strcmp(host, "localhost") == 0)
		snprintf(host, sizeof(host), "127.0.0.1");
	if (getaddrinfo(host, colon + 1, &hints, &ai) != 0)
		return err_set(e, -EINVAL, "--metrics-listen '%s': %s is not a numeric IP address or localhost",
			       addr, host);
	memcpy(ss, ai->ai_addr, ai->ai_addrlen);
	freeaddrinfo(ai);
	return 0;
}

int srv_metrics_check(const char *addr, struct errinfo *e)
{
	struct sockaddr_storage ss;

	return parse_addr(addr, &ss, e);
}

static socklen_t addr_len(const struct sockaddr_storage *ss)
{
	return ss->ss_family == AF_INET6 ? sizeof(struct sockaddr_in6) : sizeof(struct sockaddr_in);
}

/* 0 when nobody listens on ss: a bind without SO_REUSEPORT fails beside
 * any listener, one with it or not. With SO_REUSEADDR, as the listener
 * itself binds (MHD_OPTION_LISTENING_ADDRESS_REUSE): connections of an
 * earlier server in TIME_WAIT do not count (a scrape can leave one there,
 * and a restart on the same port must still bind). */
static int port_free(const struct sockaddr_storage *ss)
{
	int fd = socket(ss->ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0), r, one = 1;

	if (fd < 0)
		return -errno;
	(void)setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	r = bind(fd, (const struct sockaddr *)ss, addr_len(ss)) < 0 ? -errno : 0;
	close(fd);
	return r;
}

static uint16_t bound_port(struct MHD_Daemon *d)
{
	const union MHD_DaemonInfo *i = MHD_get_daemon_info(d, MHD_DAEMON_INFO_LISTEN_FD);
	struct sockaddr_storage ss;
	socklen_t len = sizeof(ss);

	if (!i || getsockname(i->listen_fd, (struct sockaddr *)&ss, &len) < 0)
		return 0;
	return ntohs(ss.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&ss)->sin6_port
					     : ((struct sockaddr_in *)&ss)->sin_port);
}

int srv_metrics_start(const char *addr, bool share_port, struct srv_metrics **out, struct errinfo *e)
{
	struct sockaddr_storage ss = { 0 };
	struct srv_metrics *m;
	unsigned flags = MHD_USE_EPOLL_INTERNAL_THREAD | MHD_USE_ERROR_LOG;
	int r;

	if ((r = parse_addr(addr, &ss, e)) < 0)
		return r;
	/* Every server listens with SO_REUSEPORT, so that a successor can bind
	 * beside the server it takes over; any other one must find the port
	 * free, so that two servers never answer one port by mistake. */
	if (!share_port && (r = port_free(&ss)) < 0)
		return err_set(e, r, "--metrics-listen %s: cannot listen there: %s%s", addr,
			       r == -EADDRINUSE ? "the port is in use" : strerror(-r),
			       r == -EAFNOSUPPORT || r == -EPERM
				       ? " (under systemd, the unit's RestrictAddressFamilies= is the likely cause: "
					 "the shipped metrics.conf.example drop-in allows AF_INET)"
				       : "");
	if (!(m = calloc(1, sizeof(*m))))
		return err_set(e, -ENOMEM, "out of memory");
	pthread_mutex_init(&m->lock, NULL);
	pthread_mutex_init(&m->conn_lock, NULL);
	for (int i = 0; i < METRICS_SLOTS; i++)
		m->conns[i].fd = -1;
	if (ss.ss_family == AF_INET6)
		flags |= MHD_USE_IPv6;
	m->d = MHD_start_daemon(flags, 0, policy, m, on_request, m,
				MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&ss,
				MHD_OPTION_CONNECTION_LIMIT, (unsigned)METRICS_SLOTS,
				MHD_OPTION_NOTIFY_CONNECTION, on_conn, m,
				MHD_OPTION_NOTIFY_COMPLETED, on_done, m,
				MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)METRICS_TIMEOUT_S,
				MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)METRICS_HEADER_BYTES,
				MHD_OPTION_EXTERNAL_LOGGER, mhd_log, NULL,
				MHD_OPTION_LISTENING_ADDRESS_REUSE, 1u,
				MHD_OPTION_END);
	if (!m->d) {
		pthread_mutex_destroy(&m->conn_lock);
		pthread_mutex_destroy(&m->lock);
		free(m);
		return err_set(e, -EADDRNOTAVAIL, "--metrics-listen %s: cannot listen there (in use, or not this host's)", addr);
	}
	m->port = bound_port(m->d);
	*out = m;
	return 0;
}

uint16_t srv_metrics_port(const struct srv_metrics *m)
{
	return m->port;
}

void srv_metrics_publish(struct srv_metrics *m, char *text, size_t len)
{
	if (pthread_mutex_trylock(&m->lock) != 0) {
		free(m->pending); /* the loop's own: only it touches pending */
		m->pending = text;
		m->pending_len = len;
		return;
	}
	free(m->text);
	m->text = text;
	m->len = len;
	pthread_mutex_unlock(&m->lock);
	free(m->pending);
	m->pending = NULL;
}

void srv_metrics_stop(struct srv_metrics *m)
{
	if (!m)
		return;
	MHD_stop_daemon(m->d);
	for (int i = 0; i < METRICS_SLOTS; i++)
		if (m->conns[i].fd >= 0)
			close(m->conns[i].fd);
	pthread_mutex_destroy(&m->conn_lock);
	pthread_mutex_destroy(&m->lock);
	free(m->text);
	free(m->pending);
	free(m);
}

void srv_metrics_tick(struct server *srv)
{
	char *text = NULL;
	size_t len = 0;

	if (!srv->metrics)
		return;
	srv_metrics_sweep(srv->metrics);
	if (srv_metrics_render(srv, &text, &len) == 0)
		srv_metrics_publish(srv->metrics, text, len);
}
