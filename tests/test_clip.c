/* Gradient clipping against torch.nn.utils.clip_grad_norm_ on the optimizer fixture's
 * gradients (tests/fixtures/optim/optim.json, made by make_fixture.py there). */
#include <criterion/criterion.h>
#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../core/engine/clip.h"

#define FIXTURE "tests/fixtures/optim/optim.json"

typedef struct case_ {
    json_t *root;
    size_t numel[3], total;
    float *g;
    double max_norm, norm;
    json_t *clipped;
} case_;

static case_ load_case(size_t which)
{
    case_ c = { 0 };
    json_error_t err;
    c.root = json_load_file(FIXTURE, 0, &err);
    cr_assert(c.root, "%s:%d:%d: %s", FIXTURE, err.line, err.column, err.text);
    for (size_t i = 0; i < 3; i++) {
        c.numel[i] = (size_t)json_integer_value(json_array_get(json_object_get(c.root, "numel"), i));
        c.total += c.numel[i];
    }
    json_t *cl = json_array_get(json_object_get(c.root, "clip"), which);
    cr_assert(cl, "fixture has no clip case %zu", which);
    size_t step = (size_t)json_integer_value(json_object_get(cl, "step"));
    json_t *g = json_array_get(json_object_get(c.root, "grads"), step);
    c.g = malloc(c.total * sizeof *c.g);
    cr_assert(c.g && json_array_size(g) == c.total);
    for (size_t i = 0; i < c.total; i++) c.g[i] = (float)json_number_value(json_array_get(g, i));
    c.max_norm = json_number_value(json_object_get(cl, "max_norm"));
    c.norm = json_number_value(json_object_get(cl, "norm"));
    c.clipped = json_object_get(cl, "clipped");
    return c;
}

static void free_case(case_ *c)
{
    json_decref(c->root);
    free(c->g);
}

/* The three tensors as separate buffers, as a sharded step might hold them. */
static size_t buffers(case_ *c, mpx_grad_buf *b)
{
    size_t off = 0;
    for (size_t i = 0; i < 3; i++) {
        b[i] = (mpx_grad_buf){ mpx_a(c->g + off, MPX_F32), c->numel[i] };
        off += c->numel[i];
    }
    return 3;
}

static void check_case(size_t which, int expect_clipped)
{
    case_ c = load_case(which);
    mpx_grad_buf b[3];
    size_t nb = buffers(&c, b);
    double norm = 0, coef = 0;
    char err[256] = "";
    cr_assert_eq(mpx_clip_grad_norm(NULL, NULL, b, nb, c.max_norm, NULL, NULL, &norm, &coef, err, sizeof err), 0, "%s", err);
    cr_assert(fabs(norm - c.norm) <= 1e-6 * c.norm, "norm %.9g, torch %.9g", norm, c.norm);
    if (expect_clipped) cr_assert(coef < 1.0 && fabs(coef / (c.max_norm / (c.norm + 1e-6)) - 1.0) < 1e-6, "coef %.9g", coef);
    else cr_assert_eq(coef, 1.0);
    double d2 = 0, r2 = 0;
    for (size_t i = 0; i < c.total; i++) {
        double r = json_number_value(json_array_get(c.clipped, i));
        d2 += (c.g[i] - r) * (c.g[i] - r);
        r2 += r * r;
    }
    cr_assert(sqrt(d2 / r2) <= 1e-6, "clipped grads: norm-relative error %.3g", sqrt(d2 / r2));
    free_case(&c);
}

Test(clip, above_max_norm_matches_torch) { check_case(0, 1); }
Test(clip, below_max_norm_unchanged) { check_case(1, 0); }

/* A reduction that stands for a second rank holding an identical shard: the norm must
 * come from the reduced sum. */
static int double_it(mpx_env *env, double *vals, size_t n)
{
    (void)env;
    for (size_t i = 0; i < n; i++) vals[i] *= 2.0;
    return 0;
}

static int failing(mpx_env *env, double *vals, size_t n)
{
    (void)env; (void)vals; (void)n;
    return -1;
}

Test(clip, norm_is_reduced_across_ranks)
{
    case_ c = load_case(0);
    mpx_grad_buf b[3];
    size_t nb = buffers(&c, b);
    double norm = 0;
    char err[256] = "";
    cr_assert_eq(mpx_grad_norm(NULL, NULL, b, nb, double_it, NULL, &norm, err, sizeof err), 0, "%s", err);
    cr_assert(fabs(norm - sqrt(2.0) * c.norm) <= 1e-6 * norm);
    cr_assert_neq(mpx_grad_norm(NULL, NULL, b, nb, failing, NULL, &norm, err, sizeof err), 0);
    cr_assert(strstr(err, "all-reduce"), "%s", err);
    free_case(&c);
}

Test(clip, non_finite_norm_left_to_the_caller)
{
    float g[4] = { 1.0f, INFINITY, 2.0f, 3.0f };
    mpx_grad_buf b = { mpx_a(g, MPX_F32), 4 };
    double norm = 0, coef = 0;
    char err[256] = "";
    cr_assert_eq(mpx_clip_grad_norm(NULL, NULL, &b, 1, 1.0, NULL, NULL, &norm, &coef, err, sizeof err), 0);
    cr_assert(isinf(norm));
    cr_assert_eq(coef, 1.0);
    cr_assert_eq(g[0], 1.0f);
    uint16_t h[2] = { 0 };
    mpx_grad_buf hb = { mpx_a(h, MPX_BF16), 2 };
    cr_assert_neq(mpx_grad_norm(NULL, NULL, &hb, 1, NULL, NULL, &norm, err, sizeof err), 0);
    cr_assert(strstr(err, "bf16"), "%s", err);
}
