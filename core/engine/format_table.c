/* The run's number formats (format_table.h). */
#include "format_table.h"

#include <stdio.h>
#include <string.h>

static const mpx_format builtin[] = {
    MPX_FORMAT_FP8_E4M3, MPX_FORMAT_FP8_E5M2, MPX_FORMAT_FP6_E3M2, MPX_FORMAT_FP6_E2M3,
    MPX_FORMAT_FP4_E2M1,
};

void mpx_format_table_init(mpx_format_table *t)
{
    memset(t, 0, sizeof *t);
    for (size_t i = 0; i < MPX_COUNT(builtin); i++) {
        t->f[i] = builtin[i];
        t->used[i] = 1;
    }
}

static int same_params(const mpx_format *a, const mpx_format *b)
{
    return a->exp_bits == b->exp_bits && a->man_bits == b->man_bits && a->bias == b->bias &&
           a->subnormals == b->subnormals && a->special == b->special && a->saturate == b->saturate &&
           a->storage_bytes == b->storage_bytes && a->encode == b->encode && a->decode == b->decode;
}

int mpx_format_table_declare(mpx_format_table *t, const mpx_format *fmts, size_t n, const char *who,
                             char *err, size_t errlen)
{
    for (size_t i = 0; i < n; i++) {
        mpx_format f;
        memset(&f, 0, sizeof f);
        size_t sz = fmts[i].size < sizeof f ? fmts[i].size : sizeof f;
        if (sz < offsetof(mpx_format, encode)) {
            snprintf(err, errlen, "%s: format %zu declares size %u, too small", who, i, (unsigned)fmts[i].size);
            return -1;
        }
        memcpy(&f, &fmts[i], sz);
        const char *bad = mpx_fmt_invalid(&f);
        if (bad) {
            snprintf(err, errlen, "%s: format '%s': %s", who, f.name ? f.name : "?", bad);
            return -1;
        }
        if (!strcmp(f.name, "fp32") || !strcmp(f.name, "fp16") || !strcmp(f.name, "bf16") ||
            !strcmp(f.name, "policy") || !strcmp(f.name, "none")) {
            snprintf(err, errlen, "%s: format name '%s' is reserved", who, f.name);
            return -1;
        }
        mpx_dtype old;
        if (mpx_dtype_parse(t, f.name, &old) == 0) {
            if (same_params(mpx_format_of(t, old), &f)) continue;
            snprintf(err, errlen, "%s: format '%s' is already declared with other parameters", who, f.name);
            return -1;
        }
        int lo = f.storage_bytes == 1 ? 0 : MPX_FORMAT_FIRST_2B - MPX_FORMAT_FIRST;
        int hi = f.storage_bytes == 1 ? MPX_FORMAT_FIRST_2B - MPX_FORMAT_FIRST : MPX_N_FORMAT_SLOTS;
        int slot = -1;
        for (int s = lo; s < hi && slot < 0; s++)
            if (!t->used[s]) slot = s;
        if (slot < 0) {
            snprintf(err, errlen, "%s: too many %d-byte formats (format '%s')", who, f.storage_bytes, f.name);
            return -1;
        }
        f.size = sizeof f;
        t->f[slot] = f;
        t->used[slot] = 1;
    }
    return 0;
}

const mpx_format *mpx_format_of(const mpx_format_table *t, mpx_dtype d)
{
    if (!mpx_dtype_is_format(d) || !t->used[d - MPX_FORMAT_FIRST]) return NULL;
    return &t->f[d - MPX_FORMAT_FIRST];
}

int mpx_dtype_parse(const mpx_format_table *t, const char *name, mpx_dtype *out)
{
    static const struct { const char *n; mpx_dtype d; } plain[] = {
        { "fp32", MPX_F32 }, { "fp16", MPX_F16 }, { "bf16", MPX_BF16 },
    };
    for (size_t i = 0; i < MPX_COUNT(plain); i++)
        if (!strcmp(name, plain[i].n)) { *out = plain[i].d; return 0; }
    for (int s = 0; s < MPX_N_FORMAT_SLOTS; s++)
        if (t->used[s] && !strcmp(t->f[s].name, name)) { *out = (mpx_dtype)(MPX_FORMAT_FIRST + s); return 0; }
    return -1;
}

const char *mpx_dtype_label(const mpx_format_table *t, mpx_dtype d)
{
    const mpx_format *f = mpx_format_of(t, d);
    return f ? f->name : mpx_dtype_name(d);
}

void mpx_format_describe(const mpx_format *f, char *buf, size_t len)
{
    static const char *specials[] = { "IEEE inf/NaN", "NaN only (fn)", "one NaN, no -0 (fnuz)", "finite only" };
    if (f->encode) {
        snprintf(buf, len, "its own encode/decode, %u byte%s", f->storage_bytes, f->storage_bytes > 1 ? "s" : "");
        return;
    }
    snprintf(buf, len, "E%uM%u, bias %d, %s, %s%s, max %g, %u byte%s", f->exp_bits, f->man_bits, f->bias,
             f->subnormals ? "subnormals" : "no subnormals", f->special <= MPX_FMT_FINITE ? specials[f->special] : "?",
             f->saturate ? ", saturating" : "", (double)mpx_fmt_max(f), f->storage_bytes, f->storage_bytes > 1 ? "s" : "");
}

void mpx_scaling_describe(const mpx_precision_desc *d, char *buf, size_t len)
{
    switch (d->scaling) {
    case MPX_SCALING_DELAYED:
        snprintf(buf, len, "delayed (amax_history_len %d, amax_compute_algo %s, margin %d)", d->amax_history_len,
                 d->amax_algo == MPX_AMAX_MOST_RECENT ? "most_recent" : "max", d->margin);
        return;
    case MPX_SCALING_CURRENT: snprintf(buf, len, "current (margin %d)", d->margin); return;
    case MPX_SCALING_MX: snprintf(buf, len, "mx (blocks of %d along K, E8M0 scales)", MPX_MX_BLOCK); return;
    default: snprintf(buf, len, "none"); return;
    }
}

void mpx_opt_state_describe(const mpx_format_table *t, const mpx_precision_desc *d, char *buf, size_t len)
{
    mpx_dtype a = mpx_opt_state_dtype(d, 0), b = mpx_opt_state_dtype(d, 1);
    int scaled = mpx_opt_state_scaled(a) || mpx_opt_state_scaled(b);
    if (a == b) snprintf(buf, len, "%s%s", mpx_dtype_label(t, a), scaled ? " (per-tensor scaled)" : "");
    else snprintf(buf, len, "%s, second moment %s%s", mpx_dtype_label(t, a), mpx_dtype_label(t, b),
                  scaled ? " (per-tensor scaled)" : "");
}

void mpx_dtype_choices(const mpx_format_table *t, char *buf, size_t len)
{
    size_t n = (size_t)snprintf(buf, len, "fp32, fp16, bf16");
    for (int s = 0; s < MPX_N_FORMAT_SLOTS && n < len; s++)
        if (t->used[s]) n += (size_t)snprintf(buf + n, len - n, ", %s", t->f[s].name);
}
