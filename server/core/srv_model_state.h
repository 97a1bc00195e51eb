// SPDX-License-Identifier: MIT
/* srv_model_state.h - the life of one generation of a model in wsrvd's
 * table (struct srv_model), as a state machine with its moves in one
 * table (srv_model_state.c), after the disk tier's (tier_state.c): issue
 * 62 item 2. It was three loose bools (retired, loading, failed) and a
 * NULL loaded model, written in six files.
 *
 *   SM_LOADING  laid out, served while the early thread loads it
 *               -> SM_READY, SM_FAILED
 *   SM_READY    loaded; serves attaches                 -> SM_RETIRED
 *   SM_FAILED   its load failed: listed with why, attaches get EIO
 *               -> SM_RETIRED (a reload from elsewhere)
 *   SM_RETIRED  replaced by a newer generation (reload, publish); kept
 *               while attached                          -> SM_FREED
 *   SM_FREED    its memory gone with its last client (lm NULL); final
 *
 * A generation is created LOADING or READY. The loop's thread only. */
#ifndef WSRV_SRV_MODEL_STATE_H
#define WSRV_SRV_MODEL_STATE_H

/* SM_READY first: a zeroed entry (a fuzzer's, a test's) is a loaded one, as it was
 * with the bools. */
enum srv_model_state { SM_READY, SM_LOADING, SM_FAILED, SM_RETIRED, SM_FREED, SRV_MODEL_STATE_MAX };

struct srv_model;

/* The one place a generation's state changes: a move its table refuses is
 * logged and asserted, and not made (lifecycle.h); each move is logged at
 * debug level; then the generation's invariant is checked
 * (srv_model_check). */
void srv_model_to(struct srv_model *sm, enum srv_model_state to);

/* What holds between the loop's calls (debug and sanitizer builds): a
 * known state, and the loaded model present in every state but FREED. */
#ifdef NDEBUG
static inline void srv_model_check(const struct srv_model *sm)
{
	(void)sm;
}
#else
void srv_model_check(const struct srv_model *sm);
#endif

#endif
