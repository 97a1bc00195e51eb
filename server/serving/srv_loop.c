// SPDX-License-Identifier: MIT
/* srv_loop.c - accept, receive, dispatch, send: all on one io_uring.
 *
 * Nothing here blocks on a client: receives and sends are io_uring
 * operations, a client that does not read its replies stops being read from
 * (at most SRV_MAX_PENDING replies queue up), and a session is freed only
 * once no operation of it is in flight.
 */
#include "srv_loop.h"
#include "core_door.h"
#include "holds_door.h"
#include "generations_door.h"

#include <errno.h>
#include <fcntl.h>
#include <liburing.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/signalfd.h>
#include <unistd.h>

#include "log.h"
#include "metrics_door.h"
#include "listen_socket.h"
#include "wsrv.pb-c.h"

#ifdef HAVE_SYSTEMD
#include <systemd/sd-daemon.h>
#endif

#define SRV_RING 512
#define SRV_MAX_PENDING 8
#define SRV_STOP_GRACE 2.0

struct send_op {
	struct srv_op op;
	int owned_fd;               /* closed when the send completes; -1: none */
	int nfds;
	struct msghdr msg;
	struct iovec iov;
	char ctrl[CMSG_SPACE(sizeof(int) * WSRV_MAX_FDS)];
	uint8_t buf[];
};

struct loop {
	struct io_uring ring;
	struct server *srv;
	int lfd, lock, sigfd;
	int reserve_fd;             /* given up to accept a client when out of fds */
	struct srv_op accept_op, sig_op, tick_op, accept_cancel_op, reload_op;
	uint64_t reload_count;      /* the reload eventfd's read buffer */
	bool accept_cancelling;
	struct signalfd_siginfo si;
	struct __kernel_timespec tick;
	bool accept_armed;
	double stop_deadline;
	struct reply reply;
	struct ratelimit refusals, send_errors;
};

static struct io_uring_sqe *sqe_get(struct loop *L)
{
	struct io_uring_sqe *sqe = io_uring_get_sqe(&L->ring);

	if (!sqe) { /* the ring is full: hand what is queued to the kernel */
		io_uring_submit(&L->ring);
		sqe = io_uring_get_sqe(&L->ring);
	}
	return sqe;
}

static void arm_accept(struct loop *L)
{
	struct io_uring_sqe *sqe = sqe_get(L);

	io_uring_prep_multishot_accept(sqe, L->lfd, NULL, NULL, SOCK_CLOEXEC);
	io_uring_sqe_set_data(sqe, &L->accept_op);
	L->accept_armed = true;
}

static void arm_recv(struct loop *L, struct session *s)
{
	struct io_uring_sqe *sqe = sqe_get(L);

	s->riov = (struct iovec){ s->rbuf, (size_t)L->srv->cfg.max_message + 1 };
	memset(&s->rmsg, 0, sizeof(s->rmsg));
	memset(s->rctrl, 0, sizeof(s->rctrl));
	s->rmsg.msg_iov = &s->riov;
	s->rmsg.msg_iovlen = 1;
	s->rmsg.msg_control = s->rctrl;
	s->rmsg.msg_controllen = sizeof(s->rctrl);
	s->recv_op = (struct srv_op){ OP_RECV, s };
	io_uring_prep_recvmsg(sqe, s->fd, &s->rmsg, MSG_CMSG_CLOEXEC);
	io_uring_sqe_set_data(sqe, &s->recv_op);
	s->recv_armed = true;
}

/* Queues r to s. The fds are the server's own and stay open, except
 * r->owned_fd, which the send takes (r->owned_fd becomes -1). */
static void send_reply(struct loop *L, struct session *s, struct reply *r)
{
	struct send_op *op = r->drop ? NULL : malloc(sizeof(*op) + r->len);
	struct io_uring_sqe *sqe;

	r->drop = false;
	if (!op) { /* out of memory, or a test seam's drop (srv_dispatch.c) */
		if (r->owned_fd >= 0)
			close(r->owned_fd);
		r->owned_fd = -1;
		session_close(s);
		return;
	}
	memset(op, 0, sizeof(*op));
	op->op = (struct srv_op){ OP_SEND, s };
	op->owned_fd = r->owned_fd;
	op->nfds = r->nfds;
	r->owned_fd = -1;
	s->fds_unread += (uint32_t)r->nfds;
	memcpy(op->buf, r->buf, r->len);
	op->iov = (struct iovec){ op->buf, r->len };
	op->msg.msg_iov = &op->iov;
	op->msg.msg_iovlen = 1;
	if (r->nfds) {
		struct cmsghdr *c;
		op->msg.msg_control = op->ctrl;
		op->msg.msg_controllen = CMSG_SPACE(sizeof(int) * (size_t)r->nfds);
		c = CMSG_FIRSTHDR(&op->msg);
		c->cmsg_level = SOL_SOCKET;
		c->cmsg_type = SCM_RIGHTS;
		c->cmsg_len = CMSG_LEN(sizeof(int) * (size_t)r->nfds);
		memcpy(CMSG_DATA(c), r->fds, sizeof(int) * (size_t)r->nfds);
	}
	sqe = sqe_get(L);
	io_uring_prep_sendmsg(sqe, s->fd, &op->msg, MSG_NOSIGNAL);
	io_uring_sqe_set_data(sqe, &op->op);
	s->pending_sends++;
}

static void log_gone(const struct session *s)
{
	uint64_t leases = s->nleases;
	uint32_t att = attach_count(s);

	/* A client that held nothing (wsrvctl, a health check) is routine. */
	log_msg(att || leases ? LOG_INFO : LOG_DEBUG, "client %llu (pid %d, uid %d) gone: released %u attachment%s, %llu lease%s",
			 (unsigned long long)s->id, (int)s->cred.pid, (int)s->cred.uid, att,
			 att == 1 ? "" : "s", (unsigned long long)leases, leases == 1 ? "" : "s");
}

/* Frees s once it is closing and nothing of it is in flight; cancels a
 * receive still armed so that it soon is. */
static void loop_settle(struct loop *L, struct session *s)
{
	if (!session_closing(s))
		return;
	if (s->recv_armed && !s->cancel_armed) {
		/* The cancel names the receive by its address, so s (and that
		 * address) lives until the cancel too has completed: a new
		 * session at the same address could otherwise lose its
		 * receive to this cancel. */
		struct io_uring_sqe *sqe = sqe_get(L);
		io_uring_prep_cancel(sqe, &s->recv_op, 0);
		s->cancel_op = (struct srv_op){ OP_CANCEL, s };
		io_uring_sqe_set_data(sqe, &s->cancel_op);
		s->cancel_armed = true;
	}
	if (s->recv_armed || s->cancel_armed || s->pending_sends)
		return;
	log_gone(s);
	session_free(L->srv, s);
}

/* Logs how many refusals the rate limit kept out of the log, once. */
static void report_suppressed(struct ratelimit *rl)
{
	if (rl->suppressed)
		log_warn("... and %u more refusals not logged", rl->suppressed);
	rl->suppressed = 0;
}

/* Refuses a connection at once (it never becomes a session, so it counts
 * against nothing), and logs it within the refusal rate limit. */
static void loop_refuse(struct loop *L, int fd, const struct ucred *c, enum srv_refusal reason, int code,
		   const char *why)
{
	struct ratelimit *rl = &L->refusals;

	L->srv->refused++;
	L->srv->count.refused[reason]++;
	if (ratelimit_pass(rl, mono_now())) {
		log_warn("refused a client (uid %d, gid %d, pid %d): %s", (int)c->uid, (int)c->gid,
			 (int)c->pid, why);
		report_suppressed(rl);
	}
	srv_refuse_fd(fd, code, why);
}

static void on_accept(struct loop *L, int fd)
{
	struct server *srv = L->srv;
	struct ucred cred = { .pid = 0, .uid = (uid_t)-1, .gid = (gid_t)-1 };
	socklen_t len = sizeof(cred);
	struct session *s;

	if (srv_stopping(srv)) {
		close(fd);
		return;
	}
	if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) < 0) {
		close(fd);
		return;
	}
	if (srv_own_uid_refused(srv, &cred)) {
		loop_refuse(L, fd, &cred, SRV_REFUSE_NOT_ALLOWED, EACCES, "a client of the server's own user is refused (--refuse-own-uid): it would own the memfds other workers map");
		return;
	}
	if (!srv_peer_allowed(srv, fd, &cred)) {
		loop_refuse(L, fd, &cred, SRV_REFUSE_NOT_ALLOWED, EACCES, "this user is not allowed to use this wsrvd (--allow-uid, --allow-gid)");
		return;
	}
	if (srv->nsessions >= srv->cfg.max_clients) {
		loop_refuse(L, fd, &cred, SRV_REFUSE_MAX_CLIENTS, EUSERS, "the server has as many clients as it takes (--max-clients)");
		return;
	}
	s = session_new(srv, fd);
	if (!s) {
		log_err("out of memory for a new client");
		return;
	}
	s->cred = cred;
	srv_identity_init(s);
	arm_recv(L, s);
}

/* Out of fds: the pending connections cannot be accepted into sessions.
 * The reserve fd is given up for each in turn, so that it is answered
 * EUSERS and closed instead of waiting in the backlog for nothing. */
static void shed_connections(struct loop *L)
{
	for (int i = 0; i < 64; i++) {
		struct ucred c = { 0, (uid_t)-1, (gid_t)-1 };
		int fd;

		if (L->reserve_fd >= 0)
			close(L->reserve_fd);
		fd = accept4(L->lfd, NULL, NULL, SOCK_CLOEXEC);
		if (fd >= 0) {
			socklen_t len = sizeof(c);
			getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &c, &len);
			loop_refuse(L, fd, &c, SRV_REFUSE_OUT_OF_FDS, EUSERS, "the server is out of file descriptors; try again later");
		}
		L->reserve_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
		if (fd < 0)
			break;
	}
}

static void on_packet(struct loop *L, struct session *s, int res)
{
	struct server *srv = L->srv;
	int fds[8], nfds, total;

	total = pkt_take_fds(&s->rmsg, fds, 8, &nfds);
	if (total == 1 && nfds == 1 && session_greeted(s) && (size_t)res <= srv->cfg.max_message &&
	    !(s->rmsg.msg_flags & (MSG_TRUNC | MSG_CTRUNC))) {
		/* One fd: a RegionCommit's handle; dispatch owns it. */
		srv_dispatch(srv, s, s->rbuf, (size_t)res, fds[0], &L->reply);
		send_reply(L, s, &L->reply);
		return;
	}
	pkt_close_fds(fds, nfds);
	L->reply.owned_fd = -1;
	if (!session_greeted(s) && (total > 0 || (size_t)res > srv->cfg.max_message ||
			  (s->rmsg.msg_flags & (MSG_TRUNC | MSG_CTRUNC)))) {
		/* Anything but a Hello first ends the connection. */
		srv->requests++;
		srv->errors++;
		log_warn("client %llu (pid %d) sent %s before Hello; closing it", (unsigned long long)s->id,
			 (int)s->cred.pid, total > 0 ? "file descriptors" : "an oversized packet");
		srv_reply_error(&L->reply, 0, EPROTO, "the first packet must be a Hello request");
		session_close(s);
	} else if (total > 0) {
		srv->requests++;
		srv->errors++;
		if (++s->errors == 1)
			log_warn("client %llu (pid %d) sent %d file descriptor%s; closed them",
				 (unsigned long long)s->id, (int)s->cred.pid, total, total == 1 ? "" : "s");
		srv_reply_error(&L->reply, 0, EBADMSG,
				"a request comes with at most one file descriptor (%d closed)", total);
		if (s->errors > srv->cfg.max_errors)
			session_close(s);
	} else if ((size_t)res > srv->cfg.max_message) {
		srv->requests++;
		srv->errors++;
		if (++s->errors == 1)
			log_warn("client %llu (pid %d) sent a packet over %u bytes",
				 (unsigned long long)s->id, (int)s->cred.pid, srv->cfg.max_message);
		srv_reply_error(&L->reply, 0, EMSGSIZE, "packets are at most %u bytes",
				srv->cfg.max_message);
		if (s->errors > srv->cfg.max_errors)
			session_close(s);
	} else {
		srv_dispatch(srv, s, s->rbuf, (size_t)res, -1, &L->reply);
	}
	send_reply(L, s, &L->reply);
}

static void on_recv(struct loop *L, struct session *s, int res)
{
	s->recv_armed = false;
	if (res <= 0 || session_closing(s)) {
		/* 0: the peer closed (or sent an empty packet, which closes it). */
		session_close(s);
		loop_settle(L, s);
		return;
	}
	on_packet(L, s, res);
	if (!session_closing(s) && s->pending_sends < SRV_MAX_PENDING)
		arm_recv(L, s);
	loop_settle(L, s);
}

/* A send that failed for the server's own reasons (fds in flight over
 * RLIMIT_NOFILE: ETOOMANYREFS; memory) is the client's loss of one reply,
 * not of its connection: it gets an Error in its place. A peer that is
 * gone (EPIPE, ECONNRESET) is closed. */
static void send_failed(struct loop *L, struct session *s, const struct send_op *op, int res)
{
	bool peer_gone = res == -EPIPE || res == -ECONNRESET || res == -ENOTCONN;

	if (peer_gone) {
		log_debug("client %llu: send: %s", (unsigned long long)s->id, strerror(-res));
		session_close(s);
		return;
	}
	if (ratelimit_pass(&L->send_errors, mono_now()))
		log_warn("client %llu (pid %d): a reply with %d file descriptor%s could not be sent: %s",
			 (unsigned long long)s->id, (int)s->cred.pid, op->nfds, op->nfds == 1 ? "" : "s",
			 strerror(-res));
	if (op->nfds == 0 || session_closing(s)) {
		session_close(s);
		return;
	}
	srv_reply_error(&L->reply, 0, -res == ETOOMANYREFS ? EAGAIN : -res,
			"the server could not pass the reply's file descriptors (%s); try again",
			strerror(-res));
	send_reply(L, s, &L->reply);
}

static void on_send(struct loop *L, struct send_op *op, int res)
{
	struct session *s = op->op.s;

	s->pending_sends--;
	if (op->owned_fd >= 0)
		close(op->owned_fd);
	if (res < 0)
		send_failed(L, s, op, res);
	free(op);
	if (!session_closing(s) && !s->recv_armed && s->pending_sends < SRV_MAX_PENDING)
		arm_recv(L, s);
	loop_settle(L, s);
}

static void arm_signal(struct loop *L)
{
	struct io_uring_sqe *sqe = sqe_get(L);

	io_uring_prep_read(sqe, L->sigfd, &L->si, sizeof(L->si), 0);
	io_uring_sqe_set_data(sqe, &L->sig_op);
}

static void arm_tick(struct loop *L)
{
	struct io_uring_sqe *sqe = sqe_get(L);

	L->tick = (struct __kernel_timespec){ .tv_sec = 1 };
	io_uring_prep_timeout(sqe, &L->tick, 0, 0);
	io_uring_sqe_set_data(sqe, &L->tick_op);
}

static void goodbye(struct loop *L, struct session *s, const char *why)
{
	Wsrv__Response resp = WSRV__RESPONSE__INIT;
	Wsrv__Goodbye gb = WSRV__GOODBYE__INIT;

	gb.reason = (char *)why;
	resp.body_case = WSRV__RESPONSE__BODY_GOODBYE;
	resp.goodbye = &gb;
	L->reply.nfds = 0;
	L->reply.owned_fd = -1;
	srv_pack(&L->reply, &resp);
	send_reply(L, s, &L->reply);
	session_close(s);
}

static void stop(struct loop *L)
{
	struct server *srv = L->srv;
	struct session *s, *next;

	if (srv_stopping(srv))
		return;
	srv_life_to(srv, srv_handed_over(srv) ? SRV_STOPPING_HANDED : SRV_STOPPING);
	L->stop_deadline = mono_now() + SRV_STOP_GRACE;
	log_info("stopping: no new clients; saying goodbye to %u", srv->nsessions);
#ifdef HAVE_SYSTEMD
	if (!srv_handed_over(srv))
		sd_notify(0, "STOPPING=1");
#endif
	if (srv_handed_over(srv)) { /* the socket and its lock are the successor's */
		close(L->lfd);
		close(L->lock);
	} else {
		listen_release(srv->cfg.socket_path, L->lfd, L->lock);
	}
	L->lfd = L->lock = srv->lfd = srv->lock = -1;
	for (s = srv->sessions; s; s = next) {
		next = s->next;
		if (!session_closing(s))
			goodbye(L, s, srv_handed_over(srv) ? "the server was replaced; connect again"
						       : "the server is stopping");
		loop_settle(L, s);
	}
}

static void on_tick(struct loop *L)
{
	struct server *srv = L->srv;
	double now = mono_now();
	struct session *s, *next;

	for (s = srv->sessions; s; s = next) {
		next = s->next;
		if (!session_greeted(s) && !session_closing(s) && now - s->connected_at > srv->cfg.hello_timeout) {
			if (ratelimit_pass(&L->refusals, now))
				log_warn("client %llu (pid %d) sent nothing for %.0f s; closing it",
					 (unsigned long long)s->id, (int)s->cred.pid, srv->cfg.hello_timeout);
			srv_reply_error(&L->reply, 0, ETIMEDOUT, "no Hello in time");
			send_reply(L, s, &L->reply);
			session_close(s);
			loop_settle(L, s);
		}
	}
	if (now - L->refusals.start >= L->refusals.window)
		report_suppressed(&L->refusals);
	takeover_tick(srv);
	region_tick(srv, now);
	srv_metrics_tick(srv); /* once a second: what a scrape sees */
	arm_tick(L);
}

static void arm_reload(struct loop *L)
{
	struct io_uring_sqe *sqe = sqe_get(L);

	io_uring_prep_read(sqe, L->srv->reload_efd, &L->reload_count, sizeof(L->reload_count), 0);
	io_uring_sqe_set_data(sqe, &L->reload_op);
}

/* A new generation replaced entry old: its clients are told (Event). */
static void announce(struct loop *L, int old)
{
	struct server *srv = L->srv;
	Wsrv__Response resp = WSRV__RESPONSE__INIT;
	Wsrv__Event ev = WSRV__EVENT__INIT;
	unsigned told = 0;

	if (old < 0)
		return;
	ev.model = (char *)srv->models[srv->nmodels - 1].lm->model->name;
	ev.generation = srv->models[srv->nmodels - 1].generation;
	resp.body_case = WSRV__RESPONSE__BODY_EVENT;
	resp.event = &ev;
	for (struct session *s = srv->sessions; s; s = s->next)
		if (attach_has(s, (uint32_t)old) && !session_closing(s) && s->pending_sends < SRV_MAX_PENDING) {
			L->reply.nfds = 0;
			L->reply.owned_fd = -1;
			srv_pack(&L->reply, &resp);
			send_reply(L, s, &L->reply);
			told++;
		}
	log_info("told %u clients of model %s about generation %llu", told, ev.model,
		 (unsigned long long)ev.generation);
}

/* Accepting until the successor of a take-over serves: new clients are
 * served here meanwhile (in the backlog they would have no answer until
 * the take-over's deadline when the successor stalls), and told to
 * connect again when it is done, as every other client of this server
 * is. */
static void check_accept(struct loop *L)
{
	struct server *srv = L->srv;

	if (srv_handed_over(srv) && L->accept_armed && !L->accept_cancelling) {
		struct io_uring_sqe *sqe = sqe_get(L);
		io_uring_prep_cancel(sqe, &L->accept_op, 0);
		io_uring_sqe_set_data(sqe, &L->accept_cancel_op);
		L->accept_cancelling = true;
	} else if (!srv_handed_over(srv) && !srv_stopping(srv) && !L->accept_armed && L->lfd >= 0) {
		arm_accept(L);
	}
}

static void on_cqe(struct loop *L, struct io_uring_cqe *cqe)
{
	struct srv_op *op = io_uring_cqe_get_data(cqe);

	switch (op->kind) {
	case OP_ACCEPT:
		if (!(cqe->flags & IORING_CQE_F_MORE))
			L->accept_armed = false; /* re-armed on the next tick */
		if (cqe->res >= 0) {
			on_accept(L, cqe->res);
		} else if ((cqe->res == -EMFILE || cqe->res == -ENFILE) && !srv_stopping(L->srv)) {
			shed_connections(L);
			if (!L->accept_armed)
				arm_accept(L);
		} else if (cqe->res != -ECANCELED && !srv_stopping(L->srv)) {
			if (ratelimit_pass(&L->send_errors, mono_now()))
				log_warn("accept: %s", strerror(-cqe->res));
		}
		break;
	case OP_RECV: on_recv(L, op->s, cqe->res); break;
	case OP_SEND: on_send(L, (struct send_op *)op, cqe->res); break;
	case OP_SIGNAL:
		/* The loop stops once a take-over under way has ended (main
		 * loop); meanwhile the signal is not read again. */
		/* SIGHUP has no meaning here yet: said so, and not a stop. */
		if (cqe->res == sizeof(L->si) && L->si.ssi_signo == SIGHUP)
			log_info("SIGHUP ignored: `wsrvctl reload NAME` loads a new generation of a model, `systemctl reload wsrv` (wsrvctl reload --all) of every one");
		if (cqe->res == sizeof(L->si) && L->si.ssi_signo != SIGHUP)
			srv_ask_stop(L->srv);
		else
			arm_signal(L);
		break;
	case OP_TICK: on_tick(L); break;
	case OP_CANCEL:
		op->s->cancel_armed = false;
		loop_settle(L, op->s);
		break;
	case OP_ACCEPT_CANCEL: L->accept_cancelling = false; break;
	case OP_RELOAD:
		if (cqe->res == sizeof(L->reload_count)) {
			early_poll(L->srv);
			announce(L, reload_finish(L->srv));
		}
		arm_reload(L);
		break;
	}
}

static int loop_setup(struct loop *L, struct server *srv, int lfd, int lock, struct errinfo *e)
{
	sigset_t mask;
	int r;

	L->srv = srv;
	L->accept_op.kind = OP_ACCEPT;
	L->sig_op.kind = OP_SIGNAL;
	L->tick_op.kind = OP_TICK;
	L->accept_cancel_op.kind = OP_ACCEPT_CANCEL;
	L->reload_op.kind = OP_RELOAD;
	srv->reload_efd = eventfd(0, EFD_CLOEXEC);
	if (srv->reload_efd < 0)
		return err_set(e, -errno, "eventfd: %s", strerror(errno));
	L->refusals = (struct ratelimit){ .window = 10, .burst = 5 };
	L->send_errors = (struct ratelimit){ .window = 10, .burst = 5 };
	L->reserve_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
	L->reply.cap = srv->cfg.max_message;
	L->reply.owned_fd = -1;
	L->reply.buf = malloc(L->reply.cap);
	if (!L->reply.buf)
		return err_set(e, -ENOMEM, "out of memory");
	sigemptyset(&mask);
	sigaddset(&mask, SIGINT);
	sigaddset(&mask, SIGTERM);
	sigaddset(&mask, SIGHUP);
	sigprocmask(SIG_BLOCK, &mask, NULL);
	signal(SIGPIPE, SIG_IGN);
	L->sigfd = signalfd(-1, &mask, SFD_CLOEXEC);
	if (L->sigfd < 0)
		return err_set(e, -errno, "signalfd: %s", strerror(errno));
	L->lfd = srv->lfd = lfd;
	L->lock = srv->lock = lock;
	/* One thread submits and reaps: completions' task work can wait until
	 * the loop asks for events, instead of interrupting it (fewer wakeups
	 * per request). Older kernels refuse the flags; then plain setup. */
	r = io_uring_queue_init(SRV_RING, &L->ring,
				IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_DEFER_TASKRUN);
	if (r == -EINVAL)
		r = io_uring_queue_init(SRV_RING, &L->ring, 0);
	if (r < 0)
		return err_set(e, r, "io_uring_queue_init: %s", strerror(-r));
	return 0;
}

/* Ends every session: its socket is shut down so that its receive and sends
 * complete, and the loop runs until all are freed (or a second passes). */
static void close_all(struct loop *L)
{
	struct server *srv = L->srv;
	struct session *s, *next;

	for (s = srv->sessions; s; s = next) {
		next = s->next;
		session_close(s);
		shutdown(s->fd, SHUT_RDWR);
		loop_settle(L, s);
	}
	for (int i = 0; i < 20 && srv->sessions; i++) {
		struct __kernel_timespec ts = { .tv_nsec = 50000000 };
		struct io_uring_cqe *cqe;
		unsigned head, n = 0;

		io_uring_submit_and_wait_timeout(&L->ring, &cqe, 1, &ts, NULL);
		io_uring_for_each_cqe(&L->ring, head, cqe) {
			on_cqe(L, cqe);
			n++;
		}
		io_uring_cq_advance(&L->ring, n);
	}
}

static void teardown(struct loop *L)
{
	struct server *srv = L->srv;

	close_all(L);
	io_uring_queue_exit(&L->ring);
	reload_cancel(srv);
	early_stop(srv);
	if (srv->reload_efd >= 0)
		close(srv->reload_efd);
	srv->reload_efd = -1;
	if (srv->sessions)
		log_warn("%u clients did not finish closing", srv->nsessions);
	listen_release(srv->cfg.socket_path, L->lfd, L->lock);
	if (L->sigfd >= 0)
		close(L->sigfd);
	if (L->reserve_fd >= 0)
		close(L->reserve_fd);
	free(L->reply.buf);
}

int srv_run(struct server *srv, int lfd, int lock, struct errinfo *e)
{
	struct loop L = { .lfd = -1, .lock = -1, .sigfd = -1, .reserve_fd = -1 };
	int r = loop_setup(&L, srv, lfd, lock, e);

	if (r < 0) {
		listen_release(srv->cfg.socket_path, lfd, lock);
		if (L.sigfd >= 0)
			close(L.sigfd);
		if (srv->reload_efd >= 0)
			close(srv->reload_efd);
		srv->reload_efd = -1;
		free(L.reply.buf);
		return r;
	}
	srv->started = mono_now();
	arm_accept(&L);
	arm_signal(&L);
	arm_tick(&L);
	arm_reload(&L);
	if (early_start(srv) < 0) {
		log_err("cannot start the thread that loads the models");
		srv->failed = true;
		srv_ask_stop(srv);
	}
	srv_metrics_tick(srv);
	log_info("serving %zu model%s on %s", srv->nmodels, srv->nmodels == 1 ? "" : "s",
		 srv->cfg.socket_path);
#ifdef HAVE_SYSTEMD
	sd_notify(0, "READY=1");
#endif
	while (!srv_stopping(srv) || (srv->sessions && mono_now() < L.stop_deadline)) {
		struct io_uring_cqe *cqe;
		unsigned head, n = 0;

		io_uring_submit_and_wait(&L.ring, 1);
		io_uring_for_each_cqe(&L.ring, head, cqe) {
			on_cqe(&L, cqe);
			n++;
		}
		io_uring_cq_advance(&L.ring, n);
		/* A stop asked during a take-over waits for its end: the
		 * successor holds the socket and the lock by then. */
		if ((srv_handed_over(srv) || (srv_stop_asked(srv) && !takeover_pending(srv))) && !srv_stopping(srv))
			stop(&L);
		check_accept(&L);
	}
	teardown(&L);
	log_info("stopped");
	return 0;
}
