/* ZeRO-3's just-in-time weights (zero/stage3): the host side of the model's
 * set_weight_gather hook (ABI 1.7, mpx/model.h).
 *
 * At stage 3 s->weights holds this rank's slice of the padded flat weights only
 * (s->weights_base is where it starts, s->weights_len its length). A gather of a run of
 * parameters copies each rank's part of it into one reused buffer (role scratch, sized
 * to the largest run the model gathered) and broadcasts it from that rank: pure copies,
 * so the gathered values are bit for bit the weights a stage-0 rank holds. For rank 0's
 * evaluation, which the other ranks do not run, the whole weights are all-gathered once
 * beforehand and the gathers then serve from that copy without communicating. */
#ifndef MPX_WEIGHT_GATHER_H
#define MPX_WEIGHT_GATHER_H

#include "session_types.h"

/* After the model is bound at stage 3: hand it the gather hook. Fails, naming the
 * model, when it has none (a model built before ABI 1.7). */
int mpx_wgather_bind(mpx_session *s, char *err, size_t errlen);

/* Empty when the model can run under zero/stage3, else why not (in why). */
int mpx_wgather_model_refuses(const mpx_session *s, char *why, size_t len);

/* Collective: every rank calls it before rank 0 alone runs forward (evaluation); at
 * stage 3 with several ranks the whole weights are all-gathered into a scratch copy
 * that the gathers serve from until mpx_wgather_end_whole. Elsewhere a no-op. */
int mpx_wgather_begin_whole(mpx_session *s, char *err, size_t errlen);
void mpx_wgather_end_whole(mpx_session *s);

#endif
