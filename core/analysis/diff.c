/* Comparing two run records: configuration, metrics, loss curves. */
#include "diff.h"

#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "sweep_read.h"

typedef struct printer {
    FILE *f;
    const char *heading;
    int printed;
    int show_uncounted;
} printer;

static void say(printer *p, const char *fmt, ...)
{
    if (!p->printed && p->heading) fprintf(p->f, "%s\n", p->heading);
    p->printed = 1;
    va_list ap;
    va_start(ap, fmt);
    vfprintf(p->f, fmt, ap);
    va_end(ap);
}

static double rel_diff(double a, double b)
{
    if (a == b || (isnan(a) && isnan(b))) return 0;
    double scale = fmax(fabs(a), fabs(b));
    return isnan(a) || isnan(b) || scale == 0 ? INFINITY : fabs(a - b) / scale;
}

/* " (+12.5%)", or "" when a relative change means nothing. */
static const char *change(json_t *a, json_t *b, char *buf, size_t len)
{
    buf[0] = 0;
    if (!json_is_number(a) || !json_is_number(b)) return buf;
    double x = json_number_value(a), y = json_number_value(b);
    if (x != 0) snprintf(buf, len, " (%+.3g%%)", 100.0 * (y - x) / fabs(x));
    return buf;
}

static int same_value(json_t *a, json_t *b, double tol)
{
    if (json_is_number(a) && json_is_number(b))
        return rel_diff(json_number_value(a), json_number_value(b)) <= tol;
    return a && b && json_equal(a, b);
}

static int ends_with(const char *key, const char *suffix)
{
    size_t n = strlen(key), m = strlen(suffix);
    return n >= m && !strcmp(key + n - m, suffix);
}

/* What a record measured of the process rather than computed: reported, never counted.
 * Two reruns of one configuration give the same bits but other times and another peak
 * resident set. */
enum { VIEW_COUNTED, VIEW_TIMING, VIEW_MEASURED };
static int view_of(const char *key)
{
    static const char *const timing[] = { "_seconds", "_per_s", "_s", "seconds" };
    for (size_t i = 0; i < sizeof timing / sizeof *timing; i++)
        if (ends_with(key, timing[i])) return VIEW_TIMING;
    return ends_with(key, "rss_peak_bytes") ? VIEW_MEASURED : VIEW_COUNTED;
}

static int uncounted_config(const char *key)
{
    return !strcmp(key, "run.output_dir") || !strcmp(key, "run.name");
}

/* Print every key of the union of two flat objects whose values differ; count those
 * that matter. `tol` < 0: exact comparison. */
static int diff_flat(printer *p, const char *what, json_t *fa, json_t *fb, double tol,
                     int (*uncounted)(const char *))
{
    json_t *keys = json_object();
    const char *k;
    json_t *v;
    int n = 0;
    json_object_foreach(fa, k, v) json_object_set_new(keys, k, json_true());
    json_object_foreach(fb, k, v) json_object_set_new(keys, k, json_true());
    json_object_foreach(keys, k, v) {
        json_t *a = json_object_get(fa, k), *b = json_object_get(fb, k);
        if (same_value(a, b, tol < 0 ? 0 : tol)) continue;
        char ta[256], tb[256], ch[64];
        int skip = uncounted && uncounted(k);
        if (skip && !p->show_uncounted) continue;
        say(p, "%s %s: %s -> %s%s%s\n", what, k, a ? mpx_json_text(a, ta, sizeof ta) : "(absent)",
            b ? mpx_json_text(b, tb, sizeof tb) : "(absent)", change(a, b, ch, sizeof ch),
            skip ? " (not counted)" : "");
        n += !skip;
    }
    json_decref(keys);
    return n;
}

/* Scalar metrics and memory counts of a record, flattened, of one view_of class; curves
 * left out. */
static json_t *metric_view(json_t *rec, int view)
{
    json_t *flat = json_object(), *out = json_object();
    mpx_json_flatten(json_object_get(rec, "metrics"), "", flat);
    mpx_json_flatten(json_object_get(rec, "memory"), "memory", flat);
    double tail;   /* a record from before final_loss_mean: from its losses, as mpx matrix does */
    if (!json_object_get(flat, "final_loss_mean") && !mpx_run_metric(rec, "final_loss_mean", &tail))
        json_object_set_new(flat, "final_loss_mean", json_real(tail));
    json_object_set(flat, "status", json_object_get(rec, "status"));
    const char *k;
    json_t *v;
    json_object_foreach(flat, k, v) {
        if (!strcmp(k, "losses")) continue;
        if (view_of(k) == view) json_object_set(out, k, v);
    }
    json_decref(flat);
    return out;
}

/* The loss curve: metrics.csv's loss column, else metrics.losses. */
static int loss_curve(const char *dir, json_t *rec, double **steps, double **vals, size_t *n)
{
    char err[512];
    if (mpx_run_column(dir, "loss", steps, vals, n, err, sizeof err) == 0) return 0;
    json_t *l = json_object_get(json_object_get(rec, "metrics"), "losses");
    *n = json_array_size(l);
    *steps = calloc(*n ? *n : 1, sizeof **steps);
    *vals = calloc(*n ? *n : 1, sizeof **vals);
    if (!*steps || !*vals) return -1;
    for (size_t i = 0; i < *n; i++) {
        (*steps)[i] = (double)i;
        (*vals)[i] = json_is_number(json_array_get(l, i)) ? json_number_value(json_array_get(l, i)) : NAN;
    }
    return *n ? 0 : -1;
}

static int diff_curves(printer *p, const char *a, json_t *ra, const char *b, json_t *rb, double tol)
{
    double *sa = NULL, *va = NULL, *sb = NULL, *vb = NULL;
    size_t na = 0, nb = 0;
    int ha = loss_curve(a, ra, &sa, &va, &na) == 0, hb = loss_curve(b, rb, &sb, &vb, &nb) == 0, n = 0;
    if (ha && hb) {
        size_t len = na < nb ? na : nb, first = (size_t)-1, worst = 0;
        double gap = 0;
        for (size_t i = 0; i < len; i++) {
            if (first == (size_t)-1 && rel_diff(va[i], vb[i]) > tol) first = i;
            double g = fabs(va[i] - vb[i]);
            if (g > gap || (isnan(g) && !isnan(gap))) { gap = g; worst = i; }
        }
        if (first != (size_t)-1) {
            say(p, "loss: first parts at step %.0f (%.9g vs %.9g, relative %.3g > %g); largest gap %.6g at step %.0f\n",
                sa[first], va[first], vb[first], rel_diff(va[first], vb[first]), tol, gap, sa[worst]);
            n++;
        }
        if (na != nb) {
            say(p, "loss: %zu steps -> %zu steps\n", na, nb);
            n++;
        }
    } else if (ha != hb) {
        say(p, "loss: only %s has a loss curve\n", ha ? a : b);
        n++;
    }
    free(sa); free(va); free(sb); free(vb);
    return n;
}

int mpx_diff_runs(const char *a, const char *b, const mpx_diff_opts *o, const char *heading,
                  char *err, size_t errlen)
{
    json_t *ra = mpx_run_load(a, err, errlen), *rb = ra ? mpx_run_load(b, err, errlen) : NULL;
    if (!ra || !rb) { json_decref(ra); return -1; }
    printer p = { o->out, heading, 0, o->show_timing };
    json_t *ca = json_object(), *cb = json_object();
    mpx_json_flatten(json_object_get(json_object_get(ra, "config"), "effective"), "", ca);
    mpx_json_flatten(json_object_get(json_object_get(rb, "config"), "effective"), "", cb);
    int n = diff_flat(&p, "config", ca, cb, -1, uncounted_config);
    /* the effective precision descriptor: what the policy and the precision.* keys made of
     * the run (a policy rebuilt with other dtypes and the same version shows here) */
    json_t *pa = json_object(), *pb = json_object();
    mpx_json_flatten(json_object_get(ra, "precision"), "", pa);
    mpx_json_flatten(json_object_get(rb, "precision"), "", pb);
    n += diff_flat(&p, "precision", pa, pb, -1, NULL);
    json_decref(pa);
    json_decref(pb);
    json_t *ma = metric_view(ra, VIEW_COUNTED), *mb = metric_view(rb, VIEW_COUNTED);
    n += diff_flat(&p, "metric", ma, mb, o->tol, NULL);
    n += diff_curves(&p, a, ra, b, rb, o->tol);
    json_t *ta = metric_view(ra, VIEW_TIMING), *tb = metric_view(rb, VIEW_TIMING);
    json_t *xa = metric_view(ra, VIEW_MEASURED), *xb = metric_view(rb, VIEW_MEASURED);
    /* timing and the peak resident set: shown with a relative change, never counted */
    if (o->show_timing) {
        diff_flat(&p, "timing", ta, tb, 0, NULL);
        diff_flat(&p, "measured", xa, xb, 0, NULL);
    }
    json_t *plugins[2] = { json_object(), json_object() };
    const char *k;
    json_t *v;
    json_object_foreach(json_object_get(ra, "plugins"), k, v) json_object_set(plugins[0], k, json_object_get(v, "version"));
    json_object_foreach(json_object_get(rb, "plugins"), k, v) json_object_set(plugins[1], k, json_object_get(v, "version"));
    n += diff_flat(&p, "plugin version", plugins[0], plugins[1], -1, NULL);
    for (int i = 0; i < 2; i++) json_decref(plugins[i]);
    json_decref(ca); json_decref(cb); json_decref(ma); json_decref(mb); json_decref(ta); json_decref(tb);
    json_decref(xa); json_decref(xb);
    json_decref(ra); json_decref(rb);
    return n ? 1 : 0;
}
