/* Number formats (ABI 1.2) on the CPU: the host gives each format's parameters; decoding
 * goes through a table built once per format (256 or 65536 entries), encoding through
 * mpx/formats.h's one round-to-nearest-even conversion, so the backend converts exactly
 * as the header (tested against ml_dtypes) does. */
#include "cpu_internal.h"

#include <stdlib.h>

const char *cpu_dtype_name(const cpu_be *be, mpx_dtype t)
{
    const mpx_format *f = cpu_fmt(be, t);
    if (f) return f->name;
    if (mpx_dtype_is_format(t) && be->env->host->size >= offsetof(mpx_host, format) + sizeof(void *) &&
        be->env->host->format) {
        f = be->env->host->format(be->env, t);
        if (f) return f->name;
    }
    return mpx_dtype_name(t);
}

int cpu_prepare_format(cpu_be *be, mpx_dtype t)
{
    if (!mpx_dtype_is_format(t)) return -1;
    int slot = t - MPX_FORMAT_FIRST;
    if (be->fmt[slot]) return 0;
    const mpx_host *h = be->env->host;
    if (h->size < offsetof(mpx_host, format) + sizeof(void *) || !h->format) return -1;  /* an ABI 1.0 host */
    const mpx_format *f = h->format(be->env, t);
    if (!f || (size_t)f->storage_bytes != mpx_dtype_size(t)) return -1;
    size_t n = (size_t)1 << (8 * f->storage_bytes);
    float *lut = malloc(n * sizeof *lut);
    if (!lut) return -1;
    for (size_t c = 0; c < n; c++) lut[c] = mpx_fmt_decode(f, (uint32_t)c);
    be->lut[slot] = lut;
    be->fmt[slot] = f;
    return 0;
}

void cpu_fmt_load(const cpu_be *be, mpx_arg a, size_t off, size_t n, float *dst)
{
    const float *lut = be->lut[a.t - MPX_FORMAT_FIRST];
    if (mpx_dtype_size(a.t) == 1) {
        const uint8_t *s = (const uint8_t *)a.p + off;
        for (size_t j = 0; j < n; j++) dst[j] = lut[s[j]];
    } else {
        const uint16_t *s = (const uint16_t *)a.p + off;
        for (size_t j = 0; j < n; j++) dst[j] = lut[s[j]];
    }
}

void cpu_fmt_store(const cpu_be *be, const float *src, mpx_arg a, size_t off, size_t n)
{
    const mpx_format *f = cpu_fmt(be, a.t);
    if (mpx_dtype_size(a.t) == 1) {
        uint8_t *d = (uint8_t *)a.p + off;
        for (size_t j = 0; j < n; j++) d[j] = (uint8_t)mpx_fmt_encode(f, src[j]);
    } else {
        uint16_t *d = (uint16_t *)a.p + off;
        for (size_t j = 0; j < n; j++) d[j] = (uint16_t)mpx_fmt_encode(f, src[j]);
    }
}

void cpu_fmt_round(const cpu_be *be, float *x, size_t n, mpx_dtype t)
{
    const mpx_format *f = cpu_fmt(be, t);
    const float *lut = be->lut[t - MPX_FORMAT_FIRST];
    for (size_t j = 0; j < n; j++) x[j] = lut[mpx_fmt_encode(f, x[j])];
}
