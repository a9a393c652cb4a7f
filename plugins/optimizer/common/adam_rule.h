/* The Adam update shared by optimizer/adam and optimizer/adamw: DeepSpeed FusedAdam's
 * arithmetic (multi_tensor_adam.cu), all in fp32:
 *   L2 mode (adam_w_mode false):  g += wd * p
 *   m = b1 m + (1 - b1) g;  v = b2 v + (1 - b2) g²
 *   u = (m / bc1) / (sqrt(v / bc2) + eps)      bc = 1 - beta^step, or 1 without correction
 *   decoupled mode (adam_w_mode true):  u += wd * p
 *   update = -lr * u
 * Mathematically torch.optim.Adam (L2) and torch.optim.AdamW (decoupled). */
#ifndef MPX_ADAM_RULE_H
#define MPX_ADAM_RULE_H

#include "opt_common.h"

typedef struct adam_rule {
    double beta1, beta2;   /* as configured: bias corrections are taken in double */
    float b1, b2, one_minus_b1, one_minus_b2, eps; /* 1 - beta rounded once from double, as torch does */
    int adam_w_mode;       /* 1: decoupled weight decay; 0: L2 added to the gradient */
    int bias_correction;
    int anyprecision;      /* AnyPrecisionAdamW's arithmetic (anyprecision.c) */
} adam_rule;

/* Reads betas and eps (and, when the schema has them, adam_w_mode and
 * bias_correction; pass has_modes = 0 to keep the AdamW defaults). */
int adam_rule_read(mpx_env *env, int has_modes, adam_rule *r);

/* Two state buffers: exp_avg, exp_avg_sq. */
const char *adam_rule_state_name(int i);

/* Computes every piece's update and hands it to host->apply_update. */
int adam_rule_step(const adam_rule *r, mpx_env *env, const mpx_opt_step *s);

/* The same with AnyPrecisionAdamW's op-by-op rounding (anyprecision.c). */
int adam_rule_step_anyprecision(const adam_rule *r, mpx_env *env, const mpx_opt_step *s);

#endif
