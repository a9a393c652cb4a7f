#include "test_ranks.h"

#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "support/shell.h"

void tr_run_mpx(tr_run *r, const char *dir, const char *name, const char *config, const char *args)
{
    memset(r, 0, sizeof *r);
    char out[16384];
    int rc = ts_sh(out, sizeof out, "MPX_DUMP_FINAL_WEIGHTS=%s/%s.w timeout 300 build/bin/mpx run %s --out %s/%s %s 2>&1",
                   dir, name, config, dir, name, args);
    cr_assert_eq(rc, 0, "mpx run %s %s failed (%d):\n%s", config, args, rc, out);
    char path[4096];
    snprintf(path, sizeof path, "%s/%s/run.json", dir, name);
    r->rec = ts_load_json(path);
    json_t *l = json_object_get(json_object_get(r->rec, "metrics"), "losses");
    size_t i;
    json_t *v;
    json_array_foreach(l, i, v) if (i < 64) r->losses[r->n_losses++] = json_real_value(v);
    tr_expect_replicas_agree(r, name);
    snprintf(path, sizeof path, "%s/%s.w", dir, name);
    size_t bytes;
    r->w = (float *)ts_slurp(path, &bytes);
    r->n_w = bytes / 4;
    cr_assert_gt(r->n_w, 0, "%s: no final weights", path);
}

size_t tr_world(const tr_run *r)
{
    return json_array_size(json_object_get(json_object_get(r->rec, "memory"), "per_rank"));
}

/* Every multi-rank run below stage 3 measures its replicas (divergence.h) at the end:
 * each rank's weights equal rank 0's, bit for bit, in a correct data-parallel run. */
void tr_expect_replicas_agree(const tr_run *r, const char *what)
{
    size_t w = tr_world(r);
    const char *zero = json_string_value(json_object_get(
        json_object_get(json_object_get(json_object_get(r->rec, "config"), "effective"), "zero"), "plugin"));
    if (w < 2 || (zero && !strcmp(zero, "stage3"))) return;
    json_t *d = json_object_get(json_object_get(r->rec, "metrics"), "replica_divergence");
    cr_assert_not_null(d, "%s: %zu ranks and no metrics.replica_divergence", what, w);
    json_t *mx = json_object_get(d, "max_abs"), *rel = json_object_get(d, "rel_l2");
    cr_assert_eq(json_array_size(mx), w, "%s: replica_divergence.max_abs has %zu values for %zu ranks", what,
                 json_array_size(mx), w);
    for (size_t k = 0; k < w; k++) {
        cr_expect(json_is_number(json_array_get(mx, k)) && json_number_value(json_array_get(mx, k)) == 0.0 &&
                  json_number_value(json_array_get(rel, k)) == 0.0,
                  "%s: rank %zu's weights differ from rank 0's: max %.3g, relative L2 %.3g", what, k,
                  json_number_value(json_array_get(mx, k)), json_number_value(json_array_get(rel, k)));
    }
}

void tr_free(tr_run *r)
{
    json_decref(r->rec);
    free(r->w);
}

int tr_bitwise_equal(const tr_run *a, const tr_run *b)
{
    return a->n_losses == b->n_losses && a->n_w == b->n_w &&
           !memcmp(a->losses, b->losses, a->n_losses * sizeof *a->losses) &&
           !memcmp(a->w, b->w, a->n_w * 4);
}

double tr_loss_diff(const tr_run *a, const tr_run *b)
{
    cr_assert_eq(a->n_losses, b->n_losses);
    double d = 0;
    for (size_t i = 0; i < a->n_losses; i++) d = fmax(d, fabs(a->losses[i] - b->losses[i]));
    return d;
}

double tr_weight_rel_diff(const tr_run *a, const tr_run *b)
{
    cr_assert_eq(a->n_w, b->n_w);
    double d = 0, m = 0;
    for (size_t i = 0; i < a->n_w; i++) {
        double x = (double)a->w[i] - (double)b->w[i];
        d += x * x;
        m += (double)b->w[i] * (double)b->w[i];
    }
    return m > 0 ? sqrt(d / m) : sqrt(d);
}

char *tr_tiny_squad_args(char *args, size_t len, const char *extra)
{
    char *dir = ts_tmpdir("ranks-data"), train[512], dev[512];
    snprintf(train, sizeof train, "%s/train.json", dir);
    snprintf(dev, sizeof dev, "%s/dev.json", dir);
    tr_first_article("datasets/data/train-v1.1.json", train);
    tr_first_article("datasets/data/dev-v1.1.json", dev);
    snprintf(args, len, "-s 'data.squad.train_file=\"%s\"' -s 'data.squad.dev_file=\"%s\"' %s", train, dev, extra);
    return dir;
}

void tr_first_article(const char *src, const char *dst)
{
    json_error_t e;
    json_t *j = json_load_file(src, 0, &e);
    cr_assert_not_null(j, "%s:%d: %s", src, e.line, e.text);
    json_t *data = json_object_get(j, "data");
    while (json_array_size(data) > 1) json_array_remove(data, json_array_size(data) - 1);
    cr_assert_eq(json_dump_file(j, dst, 0), 0, "cannot write %s", dst);
    json_decref(j);
}
