#include "clip.h"

#include <math.h>
#include <stdio.h>

/* fp32 partial sums per block of 1024 (as a GPU reduction would), double total. */
static double host_sum_squares(const float *g, size_t n)
{
    double total = 0.0;
    for (size_t start = 0; start < n; start += 1024) {
        size_t end = n - start < 1024 ? n : start + 1024;
        float part = 0.0f;
        for (size_t i = start; i < end; i++) part += g[i] * g[i];
        total += part;
    }
    return total;
}

int mpx_grad_norm(const mpx_ops *ops, void *be, const mpx_grad_buf *bufs, size_t n_bufs,
                  mpx_reduce_sum_fn reduce, mpx_env *env, double *norm, char *err, size_t n)
{
    double sq = 0.0;
    for (size_t b = 0; b < n_bufs; b++) {
        double part = 0.0;
        if (ops) {
            if (ops->sum_squares(be, bufs[b].g, bufs[b].n, &part) != 0) {
                snprintf(err, n, "gradient norm: sum_squares failed on buffer %zu (%zu %s elements)",
                         b, bufs[b].n, mpx_dtype_name(bufs[b].g.t));
                return -1;
            }
        } else if (bufs[b].g.t == MPX_F32) {
            part = host_sum_squares(bufs[b].g.p, bufs[b].n);
        } else {
            snprintf(err, n, "gradient norm: buffer %zu is %s; without a backend only fp32 is read",
                     b, mpx_dtype_name(bufs[b].g.t));
            return -1;
        }
        sq += part;
    }
    if (reduce && reduce(env, &sq, 1) != 0) {
        snprintf(err, n, "gradient norm: the all-reduce of the squared norm failed");
        return -1;
    }
    *norm = sqrt(sq);
    return 0;
}

int mpx_clip_grad_norm(const mpx_ops *ops, void *be, const mpx_grad_buf *bufs, size_t n_bufs,
                       double max_norm, mpx_reduce_sum_fn reduce, mpx_env *env,
                       double *norm, double *coef, char *err, size_t n)
{
    if (coef) *coef = 1.0;
    if (mpx_grad_norm(ops, be, bufs, n_bufs, reduce, env, norm, err, n) != 0) return -1;
    return mpx_clip_by_norm(ops, be, bufs, n_bufs, max_norm, *norm, coef, err, n);
}

int mpx_clip_coef(double max_norm, double norm, double *coef)
{
    *coef = 1.0;
    if (!(max_norm > 0.0) || !isfinite(norm)) return 0;
    double c = max_norm / (norm + MPX_CLIP_EPS);
    if (c >= 1.0) return 0;
    *coef = c;
    return 1;
}

int mpx_clip_by_norm(const mpx_ops *ops, void *be, const mpx_grad_buf *bufs, size_t n_bufs,
                     double max_norm, double norm, double *coef, char *err, size_t n)
{
    double c;
    if (coef) *coef = 1.0;
    if (!mpx_clip_coef(max_norm, norm, &c)) return 0;
    for (size_t b = 0; b < n_bufs; b++) {
        if (ops) {
            if (ops->scale(be, bufs[b].g, (float)c, bufs[b].n) != 0) {
                snprintf(err, n, "gradient clipping: scale failed on buffer %zu", b);
                return -1;
            }
        } else {
            float *g = bufs[b].g.p, fc = (float)c;
            for (size_t i = 0; i < bufs[b].n; i++) g[i] *= fc;
        }
    }
    if (coef) *coef = c;
    return 0;
}
