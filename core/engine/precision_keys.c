/* The `precision` group's core keys override the policy's defaults one at a time, so an
 * ablation changes one thing (DESIGN, Precision policies). "policy" keeps the default. */
#include <stdio.h>
#include <string.h>

#include "precision_keys.h"

static const struct { const char *name; uint32_t bit; } island_names[] = {
    { "layernorm", MPX_ISLAND_LAYERNORM }, { "softmax", MPX_ISLAND_SOFTMAX },
    { "loss", MPX_ISLAND_LOSS }, { "residual", MPX_ISLAND_RESIDUAL },
};

/* "all", "none", or a comma-separated list of island names. */
static int parse_islands(const char *text, uint32_t *out, char *err, size_t errlen)
{
    if (strcmp(text, "all") == 0) { *out = MPX_ISLAND_ALL; return 0; }
    if (strcmp(text, "none") == 0) { *out = 0; return 0; }
    uint32_t bits = 0;
    const char *p = text;
    while (*p) {
        size_t len = strcspn(p, ",");
        int found = 0;
        for (size_t i = 0; i < MPX_COUNT(island_names); i++)
            if (strlen(island_names[i].name) == len && strncmp(p, island_names[i].name, len) == 0) {
                bits |= island_names[i].bit;
                found = 1;
            }
        if (!found) {
            snprintf(err, errlen, "precision.islands: unknown island '%.*s' in \"%s\" (allowed: policy, "
                     "all, none, or a comma list of layernorm, softmax, loss, residual)", (int)len, p, text);
            return -1;
        }
        p += len;
        if (*p == ',') p++;
    }
    *out = bits;
    return 0;
}


/* "FILE:LINE: " of a setting, or "-s " for one an override made. */
static void where(const mpx_config *cfg, const char *key, char *buf, size_t len)
{
    config_setting_t *s = mpx_config_lookup(cfg, key);
    const char *file = s ? config_setting_source_file(s) : NULL;
    if (file && config_setting_source_line(s) > 0)
        snprintf(buf, len, "%s:%d: ", file, config_setting_source_line(s));
    else
        snprintf(buf, len, "-s ");
}

/* A key choosing between the upstream detail `bit` (value `on`) and mpx's plain
 * behaviour (value `off`); "policy" keeps the policy's choice. */
static int upstream_key(const mpx_config *cfg, const char *key, const char *on, const char *off,
                        uint32_t bit, uint32_t *bits, char *err, size_t errlen)
{
    const char *v;
    if (mpx_config_get_string(cfg, key, &v) || strcmp(v, "policy") == 0) return 0;
    if (strcmp(v, on) == 0) *bits |= bit;
    else if (strcmp(v, off) == 0) *bits &= ~bit;
    else {
        snprintf(err, errlen, "%s: \"%s\" is not one of policy, %s, %s", key, v, on, off);
        return -1;
    }
    return 0;
}

static int dtype_key(const mpx_config *cfg, const mpx_format_table *fmts, const char *key, mpx_dtype *field,
                     char *err, size_t errlen)
{
    const char *v;
    if (mpx_config_get_string(cfg, key, &v) || strcmp(v, "policy") == 0) return 0;
    if (mpx_dtype_parse(fmts, v, field)) {
        char choices[1024], at[512];
        mpx_dtype_choices(fmts, choices, sizeof choices);
        where(cfg, key, at, sizeof at);
        snprintf(err, errlen, "%s%s: \"%s\" is not one of policy, %s", at, key, v, choices);
        return -1;
    }
    return 0;
}

/* The scaling recipe keys (ABI 1.2). */
static void scaling_keys(const mpx_config *cfg, mpx_precision_desc *d)
{
    const char *v;
    int64_t n;
    if (!mpx_config_get_string(cfg, "precision.scaling", &v) && strcmp(v, "policy") != 0)
        d->scaling = !strcmp(v, "delayed") ? MPX_SCALING_DELAYED : !strcmp(v, "current") ? MPX_SCALING_CURRENT
                   : !strcmp(v, "mx") ? MPX_SCALING_MX : MPX_SCALING_NONE;
    if (!mpx_config_get_int(cfg, "precision.amax_history_len", &n) && n > 0) d->amax_history_len = (int32_t)n;
    if (!mpx_config_get_string(cfg, "precision.amax_compute_algo", &v) && strcmp(v, "policy") != 0)
        d->amax_algo = !strcmp(v, "most_recent") ? MPX_AMAX_MOST_RECENT : MPX_AMAX_MAX;
    if (!mpx_config_get_int(cfg, "precision.margin", &n) && n >= 0) d->margin = (int32_t)n;
}

int mpx_precision_apply_overrides(const mpx_config *cfg, const mpx_format_table *fmts, mpx_precision_desc *d,
                                  char *err, size_t errlen)
{
    const char *v;
    if (!mpx_config_get_string(cfg, "precision.islands", &v) && strcmp(v, "policy") != 0) {
        char at[512], msg[1024];
        if (parse_islands(v, &d->islands, msg, sizeof msg)) {
            where(cfg, "precision.islands", at, sizeof at);
            snprintf(err, errlen, "%s%s", at, msg);
            return -1;
        }
    }
    if (dtype_key(cfg, fmts, "precision.eval_logits", &d->eval_logits, err, errlen)) return -1;
    if (dtype_key(cfg, fmts, "precision.comm_dtype", &d->comm, err, errlen)) return -1;
    if (dtype_key(cfg, fmts, "precision.opt_state", &d->opt_state, err, errlen)) return -1;
    /* the policy's "as opt_state" resolved after opt_state's own key (ABI 1.8) */
    if (d->opt_state_sq == MPX_F32 || d->opt_state_sq == MPX_DTYPE_NONE) d->opt_state_sq = d->opt_state;
    if (dtype_key(cfg, fmts, "precision.opt_state_sq", &d->opt_state_sq, err, errlen)) return -1;
    scaling_keys(cfg, d);
    if (!mpx_config_get_string(cfg, "precision.loss_scale", &v) && strcmp(v, "policy") != 0)
        d->loss_scale = v;
    if (!mpx_config_get_string(cfg, "precision.rounding", &v) && strcmp(v, "policy") != 0) {
        if (strcmp(v, "nearest") == 0) d->rounding = MPX_ROUND_NEAREST;
        else if (strcmp(v, "stochastic") == 0) d->rounding = MPX_ROUND_STOCHASTIC;
        else if (strcmp(v, "kahan") == 0) d->rounding = MPX_ROUND_KAHAN;
        else {
            snprintf(err, errlen, "precision.rounding: \"%s\" is not one of policy, nearest, stochastic, kahan", v);
            return -1;
        }
    }
    if (upstream_key(cfg, "precision.master_init", "weights", "checkpoint", MPX_UPSTREAM_MASTER_FROM_WEIGHTS,
                     &d->upstream, err, errlen) ||
        upstream_key(cfg, "precision.optimizer_init_step", "on", "off", MPX_UPSTREAM_OPT_INIT_STEP,
                     &d->upstream, err, errlen) ||
        upstream_key(cfg, "precision.unscale_with", "updated", "used", MPX_UPSTREAM_UNSCALE_UPDATED,
                     &d->upstream, err, errlen))
        return -1;
    return 0;
}
