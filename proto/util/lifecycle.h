// SPDX-License-Identifier: MIT
/* lifecycle.h - one pattern for every lifecycle in wsrv (the server's,
 * a session's, a generation's, a piece's in libwsrv, a disk tier piece's,
 * a peer connection's, the copy service's):
 *
 *   enum x_state { X_A, X_B, ..., X_STATE_MAX };   the enum's name, _MAX
 *   static const char *const x_names[X_STATE_MAX];  a name for each
 *   static const unsigned x_moves[X_STATE_MAX];     moves[from]: LIFE_BIT(to)
 *   static const struct lifecycle x_life = { "x", X_STATE_MAX, x_names, x_moves };
 *   void x_to(struct x *o, enum x_state to)         the one setter:
 *   { if (life_check(&x_life, o->id, o->state, to) == 0) o->state = to; }
 *
 * life_check refuses a state out of range or a move the table does not
 * allow (an error in the log, and an assert in a build with asserts), and
 * logs every move it allows at debug level ("session 12: greeting ->
 * serving"), so that a lifecycle can be read in the log, as sd-bus logs
 * its bus's state changes. (lifecycle.c) */
#ifndef WSRV_LIFECYCLE_H
#define WSRV_LIFECYCLE_H

#include <stdint.h>

struct lifecycle {
	const char *what;            /* what lives it, for the log: "session" */
	unsigned max;                /* the enum's _MAX */
	const char *const *names;    /* [max] */
	const unsigned *moves;       /* [max]: LIFE_BIT(to) set when from -> to is allowed */
};

#define LIFE_BIT(s) (1u << (s))

/* Whether lc allows from -> to for the one numbered who: 0 (the move
 * logged at debug level), or -EINVAL (logged as an error; asserted). */
int life_check(const struct lifecycle *lc, uint64_t who, unsigned from, unsigned to);

/* State s's name, or "(unknown)" past the table. */
const char *life_name(const struct lifecycle *lc, unsigned s);

#endif
