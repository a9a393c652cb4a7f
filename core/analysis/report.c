/* mpx report (report.h): the HTML page, its inline SVG panels and its sections. */
#include "report.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <jansson.h>

#include "../record/fsutil.h"
#include "matrix.h"
#include "paired.h"
#include "plot.h"
#include "plot_scales.h"
#include "sweep_read.h"

enum { MAX_POINTS = 200, PANEL_W = 560, PANEL_H = 220, ML = 64, MR = 12, MT = 22, MB = 30, MAX_IDS = 100 };

typedef struct rep_run {
    char *dir;
    json_t *rec;
    char label[256];
    double *step, *loss, *smooth, *scale, *lr;  /* metrics.csv; NULL when absent */
    size_t n;
} rep_run;

typedef struct rep_sweep {
    const char *path;
    char rows[256], cols[256];
    char *metrics;
    mpx_matrix m;
    int built;           /* m holds a matrix */
    char err[4096];      /* why not */
    size_t base;         /* the base row */
} rep_sweep;

typedef struct report {
    rep_run *r;
    size_t n, cap;
    rep_sweep *sw;
    size_t n_sw;
    const mpx_report_opts *o;
    FILE *f;
    size_t base_run;     /* the run configurations are compared against */
} report;

/* ---- text ------------------------------------------------------------------------- */

/* s as HTML text or attribute value: names come from users (run.name, folders). */
static void esc(FILE *f, const char *s)
{
    for (; s && *s; s++) {
        switch (*s) {
        case '&': fputs("&amp;", f); break;
        case '<': fputs("&lt;", f); break;
        case '>': fputs("&gt;", f); break;
        case '"': fputs("&quot;", f); break;
        case '\'': fputs("&#39;", f); break;
        default: fputc(*s, f);
        }
    }
}

static void esc_json(FILE *f, json_t *v)
{
    char buf[512];
    esc(f, mpx_json_text(v, buf, sizeof buf));
}

/* A number for a person: 4 significant digits, whole numbers whole. */
static const char *shown(double x, char *buf, size_t len)
{
    if (isnan(x)) snprintf(buf, len, "n/a");
    else if (fabs(x) < 1e15 && x == floor(x)) snprintf(buf, len, "%.0f", x);
    else snprintf(buf, len, "%.4g", x);
    return buf;
}

/* ---- runs --------------------------------------------------------------------------- */

static int add_run(report *rp, const char *dir, char *err, size_t errlen)
{
    for (size_t i = 0; i < rp->n; i++)
        if (!strcmp(rp->r[i].dir, dir)) return 0;   /* named twice */
    if (rp->n == rp->cap) {
        size_t cap = rp->cap ? 2 * rp->cap : 16;
        rep_run *g = realloc(rp->r, cap * sizeof *g);
        if (!g) { snprintf(err, errlen, "out of memory"); return -1; }
        rp->r = g;
        rp->cap = cap;
    }
    rep_run *r = &rp->r[rp->n];
    memset(r, 0, sizeof *r);
    if (!(r->rec = mpx_run_load(dir, err, errlen))) return -1;
    if (!(r->dir = strdup(dir))) { json_decref(r->rec); snprintf(err, errlen, "out of memory"); return -1; }
    mpx_run_label(dir, r->rec, r->label, sizeof r->label);
    rp->n++;
    char ignore[512];
    if (mpx_run_column(dir, "loss", &r->step, &r->loss, &r->n, ignore, sizeof ignore)) return 0; /* no curves */
    static const char *const cols[2] = { "loss_scale", "lr" };
    double **dst[2] = { &r->scale, &r->lr };
    for (int c = 0; c < 2; c++) {
        double *steps = NULL, *vals = NULL;
        size_t n = 0;
        if (mpx_run_column(dir, cols[c], &steps, &vals, &n, ignore, sizeof ignore) == 0 && n == r->n) *dst[c] = vals;
        else free(vals);
        free(steps);
    }
    if (!(r->smooth = malloc((r->n ? r->n : 1) * sizeof *r->smooth))) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    mpx_trailing_mean(r->loss, r->n, rp->o->smooth, r->smooth);
    return 0;
}

static long run_index(const report *rp, const char *dir)
{
    for (size_t i = 0; i < rp->n; i++)
        if (!strcmp(rp->r[i].dir, dir)) return (long)i;
    return -1;
}

/* ---- the matrix's keys and metrics ---------------------------------------------------- */

/* rows and cols from DIR/sweep.json's axes other than run.seed. */
static void default_keys(rep_sweep *s)
{
    char path[PATH_MAX + 16];
    snprintf(path, sizeof path, "%s/sweep.json", s->path);
    json_t *j = json_load_file(path, 0, NULL), *axis;
    size_t i, k = 0;
    json_array_foreach(json_object_get(j, "axes"), i, axis) {
        const char *key = json_string_value(json_object_get(axis, "key"));
        if (!key || !strcmp(key, "run.seed") || k == 2) continue;
        snprintf(k ? s->cols : s->rows, sizeof s->rows, "%s", key);
        k++;
    }
    json_decref(j);
    if (!k) snprintf(s->rows, sizeof s->rows, "precision.plugin");
}

static void note_number(json_t *set, const char *name, json_t *v)
{
    if (json_is_number(v)) json_object_set_new(set, name, json_true());
}

static int by_name(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* Every number in the finished runs' metrics (diagnostics by their dotted path) and the
 * counted bytes per parameter, the headline ones first. malloc'd "a,b,c" or NULL. */
static char *default_metrics(const report *rp, const char *sweep)
{
    static const char *const first[] = { "exact_match", "f1", "accuracy", "final_loss_mean", "final_loss",
                                         "eval_loss", "skipped_steps", "overflow_count", "memory.bytes_per_param" };
    json_t *set = json_object();
    size_t plen = strlen(sweep);
    for (size_t i = 0; i < rp->n; i++) {
        const rep_run *r = &rp->r[i];
        const char *status = json_string_value(json_object_get(r->rec, "status"));
        if (strncmp(r->dir, sweep, plen) || !status || strcmp(status, "finished")) continue;
        const char *key;
        json_t *v, *g, *gv;
        json_object_foreach(json_object_get(r->rec, "metrics"), key, v) {
            if (strcmp(key, "diagnostics")) { note_number(set, key, v); continue; }
            const char *group, *field;
            json_object_foreach(v, group, g) json_object_foreach(g, field, gv) {
                char name[512];
                snprintf(name, sizeof name, "metrics.diagnostics.%s.%s", group, field);
                note_number(set, name, gv);
            }
        }
        note_number(set, "memory.bytes_per_param", mpx_json_path(r->rec, "memory.bytes_per_param"));
    }
    size_t n = json_object_size(set), k = 0, len = 1;
    const char **names = calloc(n + 1, sizeof *names);
    const char *key;
    json_t *v;
    if (!names) { json_decref(set); return NULL; }
    json_object_foreach(set, key, v) names[k++] = key, len += strlen(key) + 1;
    qsort(names, n, sizeof *names, by_name);
    char *out = calloc(1, len);
    for (size_t p = 0; out && p <= sizeof first / sizeof *first; p++)
        for (size_t i = 0; i < n; i++) {
            int headline = -1;
            for (size_t h = 0; h < sizeof first / sizeof *first; h++)
                if (!strcmp(names[i], first[h])) headline = (int)h;
            /* pass h < 9 takes headline h; the last pass the rest, sorted */
            if (p < sizeof first / sizeof *first ? headline != (int)p : headline >= 0) continue;
            if (out[0]) strcat(out, ",");
            strcat(out, names[i]);
        }
    free(names);
    json_decref(set);
    return out;
}

static int build_matrix(report *rp, rep_sweep *s, char *err, size_t errlen)
{
    if (rp->o->rows) {
        snprintf(s->rows, sizeof s->rows, "%s", rp->o->rows);
        snprintf(s->cols, sizeof s->cols, "%s", rp->o->cols ? rp->o->cols : "");
    } else {
        default_keys(s);
    }
    s->metrics = rp->o->metrics ? strdup(rp->o->metrics) : default_metrics(rp, s->path);
    if (!s->metrics) { snprintf(err, errlen, "out of memory"); return -1; }
    if (!s->metrics[0]) { snprintf(s->err, sizeof s->err, "no finished run has a metric"); return 0; }
    if (mpx_matrix_build(&s->m, s->path, s->rows, s->cols[0] ? s->cols : NULL, s->metrics, rp->o->reg, s->err,
                         sizeof s->err)) {
        mpx_matrix_free(&s->m);
        return 0;   /* shown in the page: the rest of the report still stands */
    }
    s->m.reg = NULL;
    s->built = 1;
    size_t nr = json_array_size(s->m.rows);
    for (size_t r = 0; rp->o->base && r < nr; r++) {
        char text[256];
        mpx_matrix_value_text(json_array_get(s->m.rows, r), text, sizeof text);
        if (!strcmp(text, rp->o->base)) { s->base = r; return 0; }
    }
    if (rp->o->base) {
        snprintf(err, errlen, "--base %s: no row of %s has %s = %s", rp->o->base, s->path, s->rows, rp->o->base);
        return -1;
    }
    return 0;
}

/* ---- SVG panels ------------------------------------------------------------------------ */

typedef struct line {
    size_t run;            /* colour and legend toggle */
    const char *series;    /* data-series */
    const double *x, *y;
    size_t n;
    int dashed, faint;
    const char *title;
} line;

typedef struct axis {
    double lo, hi;
    int log;
} axis;

static double ty(const axis *a, double v) { return a->log ? log10(v) : v; }

static int usable(const axis *a, double v) { return isfinite(v) && (!a->log || v > 0); }

static void range_of(const line *l, size_t nl, axis *x, axis *y)
{
    x->lo = y->lo = INFINITY;
    x->hi = y->hi = -INFINITY;
    for (size_t i = 0; i < nl; i++)
        for (size_t k = 0; k < l[i].n; k++) {
            if (!usable(y, l[i].y[k]) || !isfinite(l[i].x[k])) continue;
            x->lo = fmin(x->lo, l[i].x[k]), x->hi = fmax(x->hi, l[i].x[k]);
            y->lo = fmin(y->lo, ty(y, l[i].y[k])), y->hi = fmax(y->hi, ty(y, l[i].y[k]));
        }
    if (x->hi <= x->lo) x->hi = x->lo + 1;
    if (y->hi <= y->lo) y->lo -= 0.5, y->hi += 0.5;
}

static double px(const axis *x, double v) { return ML + (v - x->lo) / (x->hi - x->lo) * (PANEL_W - ML - MR); }
static double py(const axis *y, double v) { return PANEL_H - MB - (v - y->lo) / (y->hi - y->lo) * (PANEL_H - MT - MB); }

static void axes(FILE *f, const axis *x, const axis *y, const char *title)
{
    char buf[64];
    fprintf(f, "<rect class=\"frame\" x=\"%d\" y=\"%d\" width=\"%d\" height=\"%d\"/>\n", ML, MT, PANEL_W - ML - MR,
            PANEL_H - MT - MB);
    fprintf(f, "<text class=\"ptitle\" x=\"%d\" y=\"15\">", ML);
    esc(f, title);
    fputs("</text>\n", f);
    for (int k = 0; k <= 4; k++) {
        double vx = x->lo + (x->hi - x->lo) * k / 4, vy = y->lo + (y->hi - y->lo) * k / 4;
        fprintf(f, "<text class=\"tick\" x=\"%.1f\" y=\"%d\" text-anchor=\"middle\">%s</text>\n", px(x, vx),
                PANEL_H - MB + 14, shown(round(vx), buf, sizeof buf));
        fprintf(f, "<line class=\"grid\" x1=\"%d\" x2=\"%d\" y1=\"%.1f\" y2=\"%.1f\"/>\n", ML, PANEL_W - MR, py(y, vy),
                py(y, vy));
        snprintf(buf, sizeof buf, "%.3g", y->log ? pow(10, vy) : vy);
        fprintf(f, "<text class=\"tick\" x=\"%d\" y=\"%.1f\" text-anchor=\"end\">%s</text>\n", ML - 4, py(y, vy) + 4,
                buf);
    }
    fprintf(f, "<text class=\"tick\" x=\"%d\" y=\"%d\" text-anchor=\"end\">step</text>\n", PANEL_W - MR, PANEL_H - 2);
}

/* One panel: every line as a polyline of at most MAX_POINTS points (every k-th one). */
static void panel(FILE *f, const char *title, const line *l, size_t nl, int logy)
{
    axis x = { 0, 0, 0 }, y = { 0, 0, 0 };
    int positive = 1, any = 0;
    for (size_t i = 0; i < nl; i++)
        for (size_t k = 0; k < l[i].n; k++)
            if (isfinite(l[i].y[k])) any = 1, positive &= l[i].y[k] > 0;
    if (!any) return;
    y.log = logy && positive;
    range_of(l, nl, &x, &y);
    fprintf(f, "<svg class=\"panel\" viewBox=\"0 0 %d %d\" width=\"%d\" height=\"%d\" role=\"img\">\n", PANEL_W,
            PANEL_H, PANEL_W, PANEL_H);
    axes(f, &x, &y, title);
    for (size_t i = 0; i < nl; i++) {
        size_t stride = l[i].n > MAX_POINTS ? (l[i].n + MAX_POINTS - 1) / MAX_POINTS : 1;
        fprintf(f, "<polyline class=\"c%zu%s%s\" data-run=\"%zu\" data-series=\"%s\" points=\"", l[i].run % 10,
                l[i].dashed ? " dashed" : "", l[i].faint ? " faint" : "", l[i].run, l[i].series);
        for (size_t k = 0; k < l[i].n; k++) {
            if (k % stride && k + 1 != l[i].n) continue;
            if (!usable(&y, l[i].y[k]) || !isfinite(l[i].x[k])) continue;
            fprintf(f, "%.1f,%.1f ", px(&x, l[i].x[k]), py(&y, ty(&y, l[i].y[k])));
        }
        fputs("\"><title>", f);
        esc(f, l[i].title);
        fputs("</title></polyline>\n", f);
    }
    fputs("</svg>\n", f);
}

/* ---- the page's sections ------------------------------------------------------------------ */

static void run_link(FILE *f, const report *rp, const char *dir)
{
    long i = run_index(rp, dir);
    if (i < 0) { esc(f, dir); return; }
    fprintf(f, "<a href=\"#run-%ld\">", i);
    esc(f, rp->r[i].label);
    fputs("</a>", f);
}

/* The JSON `mpx matrix --format json` prints, where a script element may hold it. */
static int embed_matrix_json(FILE *f, const rep_sweep *s, size_t k)
{
    char *text = NULL;
    size_t len = 0;
    FILE *m = open_memstream(&text, &len);
    if (!m) return -1;
    int rc = mpx_matrix_render(&s->m, "json", m);
    if (fclose(m) || rc) { free(text); return -1; }
    fprintf(f, "<script type=\"application/json\" class=\"mpx-matrix\" id=\"matrix-json-%zu\">\n", k);
    for (size_t i = 0; i < len; i++) {
        if (text[i] == '<') fputs("\\u003c", f);   /* no "</script>" inside */
        else fputc(text[i], f);
    }
    fputs("</script>\n", f);
    free(text);
    return 0;
}

static void matrix_cell(FILE *f, const report *rp, const rep_sweep *s, size_t ci)
{
    const mpx_matrix *m = &s->m;
    const mpx_matrix_cell *c = &m->cells[ci];
    size_t nc = json_array_size(m->cols);
    json_t *row = json_array_get(m->rows, ci / nc), *col = json_array_get(m->cols, ci % nc);
    const char *status = c->n_finished ? "finished" : c->n_runs ? m->runs[c->runs[0]].status : "none";
    fprintf(f, "<tr class=\"st-%s\"><th>", status);
    esc_json(f, row);
    fputs("</th>", f);
    if (m->col_key) { fputs("<th>", f); esc_json(f, col); fputs("</th>", f); }
    char a[64], b[64];
    for (size_t k = 0; k < m->n_metrics; k++) {
        const mpx_stat *st = &c->stats[k];
        fputs("<td class=\"num\" data-row=\"", f);
        esc_json(f, row);
        fputs("\" data-col=\"", f);
        if (m->col_key) esc_json(f, col);
        fputs("\" data-metric=\"", f);
        esc(f, m->metrics[k]);
        if (!st->n || isnan(st->mean)) { fputs("\" data-value=\"\">—</td>", f); continue; }
        fprintf(f, "\" data-value=\"%.17g\" data-n=\"%zu\">%s", st->mean, st->n, shown(st->mean, a, sizeof a));
        if (st->n >= 2) fprintf(f, " ± %s <small>(n=%zu)</small>", shown(st->ci, b, sizeof b), st->n);
        fputs("</td>", f);
    }
    fprintf(f, "<td class=\"status\">%s", status);
    for (size_t i = 0; i < c->n_runs; i++) {
        const mpx_matrix_run *r = &m->runs[c->runs[i]];
        if (!strcmp(r->status, "finished")) continue;
        fprintf(f, "<div class=\"why\">%s: ", r->status);   /* why holds the step reached */
        esc(f, r->why[0] ? r->why : "(no reason recorded)");
        fputs("</div>", f);
    }
    fputs("</td><td>", f);
    for (size_t i = 0; i < c->n_runs; i++) {
        if (i) fputs(", ", f);
        run_link(f, rp, m->runs[c->runs[i]].dir);
    }
    fputs("</td></tr>\n", f);
}

static int matrix_section(FILE *f, const report *rp, const rep_sweep *s, size_t k)
{
    fprintf(f, "<section id=\"matrix-%zu\"><h2>Matrix: ", k);
    esc(f, s->path);
    fputs("</h2>\n", f);
    if (!s->built) {
        fputs("<p class=\"error\">no matrix: ", f);
        esc(f, s->err);
        fputs("</p></section>\n", f);
        return 0;
    }
    const mpx_matrix *m = &s->m;
    fputs("<p>Rows: <code>", f);
    esc(f, m->row_key);
    if (m->col_key) { fputs("</code>, columns: <code>", f); esc(f, m->col_key); }
    fputs("</code>. Each cell: mean ± t(0.975, n−1)·s/√n over runs that differ only by run.seed "
          "(n runs); the same numbers as <code>mpx matrix --format json</code>, embedded below.</p>\n"
          "<div class=\"scroll\"><table class=\"matrix\"><thead><tr><th>", f);
    esc(f, m->row_key);
    fputs("</th>", f);
    if (m->col_key) { fputs("<th>", f); esc(f, m->col_key); fputs("</th>", f); }
    for (size_t i = 0; i < m->n_metrics; i++) {
        fputs("<th>", f);
        esc(f, m->metrics[i]);
        fputs("</th>", f);
    }
    fputs("<th>status</th><th>runs</th></tr></thead><tbody>\n", f);
    size_t n = json_array_size(m->rows) * json_array_size(m->cols);
    for (size_t i = 0; i < n; i++)
        if (m->cells[i].n_runs) matrix_cell(f, rp, s, i);
    fputs("</tbody></table></div>\n", f);
    int rc = embed_matrix_json(f, s, k);
    fputs("</section>\n", f);
    return rc;
}

/* ---- paired comparison ------------------------------------------------------------------- */

typedef struct pair_row {
    char label[600];
    mpx_paired_result r;
    const char *a_dir, *b_dir;   /* the first finished run of each side, for the questions */
} pair_row;

static void forest(FILE *f, const pair_row *p, size_t n, int f1)
{
    double lo = 0, hi = 0;
    for (size_t i = 0; i < n; i++) {
        const mpx_paired_metric *m = f1 ? &p[i].r.f1 : &p[i].r.em;
        lo = fmin(lo, fmin(m->lo, isnan(m->lo_seeds) ? m->lo : m->lo_seeds));
        hi = fmax(hi, fmax(m->hi, isnan(m->hi_seeds) ? m->hi : m->hi_seeds));
    }
    if (hi - lo < 1e-9) lo -= 1, hi += 1;
    int w = 460, lm = 130, rm = 10, h = (int)n * 24 + 40;
#define FX(v) (lm + ((v) - lo) / (hi - lo) * (w - lm - rm))
    fprintf(f, "<svg class=\"forest\" viewBox=\"0 0 %d %d\" width=\"%d\" height=\"%d\" data-metric=\"%s\">\n", w, h, w, h,
            f1 ? "f1" : "exact_match");
    fprintf(f, "<text class=\"ptitle\" x=\"4\" y=\"14\">Δ %s, points (B − A)</text>\n", f1 ? "F1" : "EM");
    fprintf(f, "<line class=\"zero\" x1=\"%.1f\" x2=\"%.1f\" y1=\"20\" y2=\"%d\"/>\n", FX(0), FX(0), h - 18);
    for (size_t i = 0; i < n; i++) {
        const mpx_paired_metric *m = f1 ? &p[i].r.f1 : &p[i].r.em;
        double y = 32 + 24.0 * (double)i;
        if (!isnan(m->lo_seeds))
            fprintf(f, "<line class=\"seeds\" x1=\"%.1f\" x2=\"%.1f\" y1=\"%.1f\" y2=\"%.1f\"/>\n", FX(m->lo_seeds),
                    FX(m->hi_seeds), y, y);
        fprintf(f, "<text class=\"tick\" x=\"4\" y=\"%.1f\">", y + 4);
        esc(f, p[i].label);
        fputs("</text>", f);
        /* the numbers at full precision too, as the matrix cells carry theirs */
        char ls[32] = "", hs[32] = "";
        if (!isnan(m->lo_seeds)) snprintf(ls, sizeof ls, "%.17g", m->lo_seeds), snprintf(hs, sizeof hs, "%.17g", m->hi_seeds);
        fprintf(f, "<line class=\"ci\" x1=\"%.1f\" x2=\"%.1f\" y1=\"%.1f\" y2=\"%.1f\"/>"
                   "<circle class=\"pt\" cx=\"%.1f\" cy=\"%.1f\" r=\"4\" data-diff=\"%.17g\" data-lo=\"%.17g\" "
                   "data-hi=\"%.17g\" data-lo-seeds=\"%s\" data-hi-seeds=\"%s\"><title>", FX(m->lo), FX(m->hi), y, y,
                FX(m->diff), y, m->diff, m->lo, m->hi, ls, hs);
        esc(f, p[i].label);
        fprintf(f, ": %+.2f [%+.2f, %+.2f]</title></circle>\n", m->diff, m->lo, m->hi);
    }
    char a[32], b[32];
    fprintf(f, "<text class=\"tick\" x=\"%d\" y=\"%d\">%s</text><text class=\"tick\" x=\"%d\" y=\"%d\" "
               "text-anchor=\"end\">%s</text><text class=\"tick\" x=\"%.1f\" y=\"%d\" text-anchor=\"middle\">0</text>\n",
            lm, h - 4, shown(lo, a, sizeof a), w - rm, h - 4, shown(hi, b, sizeof b), FX(0), h - 4);
#undef FX
    fputs("</svg>\n", f);
}

/* The questions one run of the pair gets right (EM) and the other wrong: ids and scores. */
static void question_lists(FILE *f, const report *rp, const pair_row *p)
{
    mpx_question_scores a, b;
    char err[4096];
    if (mpx_question_scores_read(p->a_dir, &a, err, sizeof err)) return;
    if (mpx_question_scores_read(p->b_dir, &b, err, sizeof err)) { mpx_question_scores_free(&a); return; }
    fputs("<details><summary>", f);
    esc(f, p->label);
    fputs(": questions one run gets right and the other wrong (A ", f);
    run_link(f, rp, p->a_dir);
    fputs(", B ", f);
    run_link(f, rp, p->b_dir);
    fputs(")</summary>\n", f);
    if (a.n != b.n) {
        fprintf(f, "<p class=\"error\">not the same questions (%zu and %zu)</p></details>\n", a.n, b.n);
        mpx_question_scores_free(&a);
        mpx_question_scores_free(&b);
        return;
    }
    for (int side = 0; side < 2; side++) {
        size_t count = 0;
        for (size_t i = 0; i < a.n; i++) count += side ? (a.em[i] < b.em[i]) : (a.em[i] > b.em[i]);
        fprintf(f, "<p>%s right, %s wrong: %zu questions%s</p><table class=\"qs\"><tr><th>id</th><th>EM A</th>"
                   "<th>F1 A</th><th>EM B</th><th>F1 B</th></tr>\n", side ? "B" : "A", side ? "A" : "B", count,
                count > MAX_IDS ? " (the first 100 shown)" : "");
        size_t shown_n = 0;
        for (size_t i = 0; i < a.n && shown_n < MAX_IDS; i++) {
            if (side ? !(a.em[i] < b.em[i]) : !(a.em[i] > b.em[i])) continue;
            if (strcmp(a.id[i], b.id[i])) continue;
            shown_n++;
            fputs("<tr><td><code>", f);
            esc(f, a.id[i]);
            fprintf(f, "</code></td><td>%.0f</td><td>%.3f</td><td>%.0f</td><td>%.3f</td></tr>\n", a.em[i], a.f1[i],
                    b.em[i], b.f1[i]);
        }
        fputs("</table>\n", f);
    }
    fputs("</details>\n", f);
    mpx_question_scores_free(&a);
    mpx_question_scores_free(&b);
}

static void paired_section(FILE *f, const report *rp, const rep_sweep *s, size_t k)
{
    const mpx_matrix *m = &s->m;
    size_t nr = json_array_size(m->rows), nc = json_array_size(m->cols), n = 0;
    pair_row *p = calloc(nr * nc + 1, sizeof *p);
    char base[256], row[256], col[256], first_err[4096] = "";
    mpx_matrix_value_text(json_array_get(m->rows, s->base), base, sizeof base);
    fprintf(f, "<section id=\"paired-%zu\"><h2>Paired comparison against ", k);
    esc(f, m->row_key);
    fputs(" = ", f);
    esc(f, base);
    fputs("</h2>\n", f);
    for (size_t c = 0; p && c < nc; c++) {
        size_t na;
        const char **a = mpx_matrix_finished_dirs(m, &m->cells[s->base * nc + c], &na);
        mpx_matrix_value_text(json_array_get(m->cols, c), col, sizeof col);
        for (size_t r = 0; a && na && r < nr; r++) {
            size_t nb;
            if (r == s->base) continue;
            const char **b = mpx_matrix_finished_dirs(m, &m->cells[r * nc + c], &nb);
            char err[4096];
            if (b && nb && !mpx_paired_compare(a, na, b, nb, rp->o->resamples, 1, &p[n].r, err, sizeof err)) {
                mpx_matrix_value_text(json_array_get(m->rows, r), row, sizeof row);
                snprintf(p[n].label, sizeof p[n].label, "%s%s%s", row, m->col_key ? " / " : "", m->col_key ? col : "");
                p[n].a_dir = a[0], p[n].b_dir = b[0];
                n++;
            } else if (b && nb && !first_err[0]) {
                snprintf(first_err, sizeof first_err, "%s", err);
            }
            free(b);
        }
        free(a);
    }
    if (!n) {
        fputs("<p>no pair of finished cells to compare on the same questions", f);
        if (first_err[0]) { fputs(": ", f); esc(f, first_err); }
        fputs("</p></section>\n", f);
        free(p);
        return;
    }
    fprintf(f, "<p>A: %s = ", m->row_key);
    esc(f, base);
    fprintf(f, "; B: each other row. Bootstrap over questions (%zu resamples, seed 1): thick line and dot; over seeds "
               "and questions: thin grey line (two or more runs a side).</p>\n<div class=\"forests\">", rp->o->resamples);
    forest(f, p, n, 0);
    forest(f, p, n, 1);
    fputs("</div>\n<table class=\"paired\"><tr><th>B</th><th>questions</th><th>Δ EM [95%]</th><th>Δ F1 [95%]</th>"
          "<th>runs A / B</th><th>seed sd EM A / B</th></tr>\n", f);
    for (size_t i = 0; i < n; i++) {
        const mpx_paired_result *r = &p[i].r;
        char sa[32], sb[32];
        fputs("<tr><th>", f);
        esc(f, p[i].label);
        fprintf(f, "</th><td>%zu</td><td data-diff=\"%.17g\">%+.2f [%+.2f, %+.2f]</td><td>%+.2f [%+.2f, %+.2f]</td>"
                   "<td>%zu / %zu</td><td>%s / %s</td></tr>\n", r->n_questions, r->em.diff, r->em.diff, r->em.lo,
                r->em.hi, r->f1.diff, r->f1.lo, r->f1.hi, r->n_a, r->n_b, shown(r->sd_em_a, sa, sizeof sa),
                shown(r->sd_em_b, sb, sizeof sb));
    }
    fputs("</table>\n<h3>Per question</h3>\n<p>A is the base row's first finished run, B the other row's "
          "(question ids and scores only).</p>\n", f);
    for (size_t i = 0; i < n; i++) question_lists(f, rp, &p[i]);
    fputs("</section>\n", f);
    free(p);
}

/* ---- curves -------------------------------------------------------------------------- */

typedef struct group_lines {
    mpx_plot_scales ps;
    size_t *run;          /* the run of each line */
} group_lines;

/* Reads one pair of per-group columns of every run's diagnostics.csv. */
static int read_groups(const report *rp, group_lines *g, const char *a, const char *b, char *err, size_t errlen)
{
    memset(g, 0, sizeof *g);
    for (size_t i = 0; i < rp->n; i++) {
        size_t before = g->ps.n;
        if (mpx_plot_group_columns_add(&g->ps, rp->r[i].dir, rp->r[i].label, a, b, err, errlen)) return -1;
        size_t *grown = realloc(g->run, (g->ps.n + 1) * sizeof *grown);
        if (!grown) { snprintf(err, errlen, "out of memory"); return -1; }
        g->run = grown;
        for (size_t k = before; k < g->ps.n; k++) g->run[k] = i;
    }
    return 0;
}

static const char *group_of(const report *rp, const group_lines *g, size_t k)
{
    const char *t = g->ps.l[k].title;
    size_t n = strlen(rp->r[g->run[k]].label);
    return strlen(t) > n + 2 ? t + n + 2 : t;
}

/* One panel per group (in order of first appearance): the `max` column, and the `min`
 * one dashed when both_dashed, else the `min` column alone. */
static int group_panels(FILE *f, const report *rp, const group_lines *g, const char *what, int which, int logy)
{
    line *l = calloc(2 * g->ps.n + 1, sizeof *l);
    if (!l) return -1;
    for (size_t k = 0; k < g->ps.n; k++) {
        const char *group = group_of(rp, g, k);
        int seen = 0;
        for (size_t j = 0; j < k && !seen; j++) seen = !strcmp(group_of(rp, g, j), group);
        if (seen) continue;
        size_t nl = 0;
        for (size_t j = k; j < g->ps.n; j++) {
            if (strcmp(group_of(rp, g, j), group)) continue;
            const mpx_scale_line *s = &g->ps.l[j];
            line base = { g->run[j], "", s->step, NULL, s->n, 0, 0, s->title };
            if (which == 2) {   /* the scales: max solid, min dashed */
                l[nl] = base, l[nl].y = s->max, l[nl].series = "scale-max", nl++;
                l[nl] = base, l[nl].y = s->min, l[nl].series = "scale-min", l[nl].dashed = 1, nl++;
            } else {
                l[nl] = base, l[nl].y = which ? s->max : s->min, l[nl].series = what, nl++;
            }
        }
        char title[400];
        snprintf(title, sizeof title, "%s: %s", what, group);
        panel(f, title, l, nl, logy);
    }
    free(l);
    return 0;
}

static int curves_section(FILE *f, const report *rp, char *err, size_t errlen)
{
    size_t with = 0;
    for (size_t i = 0; i < rp->n; i++) with += rp->r[i].n > 0;
    fputs("<section id=\"curves\"><h2>Curves</h2>\n", f);
    if (!with) { fputs("<p>no run has a metrics.csv</p></section>\n", f); return 0; }
    fputs("<div class=\"legend\">", f);
    for (size_t i = 0; i < rp->n; i++) {
        if (!rp->r[i].n) continue;
        fprintf(f, "<label><input type=\"checkbox\" checked data-toggle=\"%zu\"><span class=\"sw c%zu\"></span>", i, i % 10);
        esc(f, rp->r[i].label);
        fputs("</label> ", f);
    }
    fputs("</div>\n<div class=\"panels\">\n", f);
    line *l = calloc(2 * rp->n + 1, sizeof *l);
    if (!l) { snprintf(err, errlen, "out of memory"); return -1; }
    static const char *const titles[4] = { "loss (faint: per step; solid: mean of the last %zu steps)", "loss scale",
                                           "learning rate", "" };
    for (int s = 0; s < 3; s++) {
        size_t nl = 0;
        for (size_t i = 0; i < rp->n; i++) {
            const rep_run *r = &rp->r[i];
            const double *y = s == 0 ? r->loss : s == 1 ? r->scale : r->lr;
            if (!r->n || !y) continue;
            l[nl++] = (line){ i, s == 0 ? "loss" : s == 1 ? "loss_scale" : "lr", r->step, y, r->n, 0, s == 0, r->label };
            if (s == 0) l[nl++] = (line){ i, "loss-smoothed", r->step, r->smooth, r->n, 0, 0, r->label };
        }
        char title[128];
        snprintf(title, sizeof title, titles[s], rp->o->smooth);
        panel(f, title, l, nl, s == 1);
    }
    free(l);
    group_lines g;
    int rc = read_groups(rp, &g, "stalled_frac", "underflow_frac", err, errlen);
    if (!rc) rc = group_panels(f, rp, &g, "stalled fraction", 0, 0);
    if (!rc) rc = group_panels(f, rp, &g, "gradient underflow fraction", 1, 0);
    mpx_plot_scales_free(&g.ps);
    free(g.run);
    if (!rc) rc = read_groups(rp, &g, "scale_min", "scale_max", err, errlen);
    if (!rc) rc = group_panels(f, rp, &g, "8-bit GEMM-input scale (max solid, min dashed)", 2, 1);
    mpx_plot_scales_free(&g.ps);
    free(g.run);
    fputs("</div></section>\n", f);
    if (rc && !err[0]) snprintf(err, errlen, "out of memory");
    return rc;
}

/* ---- one run ------------------------------------------------------------------------------ */

static void kv_table(FILE *f, json_t *flat, const char *cls)
{
    const char *key;
    json_t *v;
    fprintf(f, "<table class=\"%s\">", cls);
    json_object_foreach(flat, key, v) {
        fputs("<tr><th>", f);
        esc(f, key);
        fputs("</th><td>", f);
        if (json_is_array(v) || json_is_object(v)) {
            char *t = json_dumps(v, JSON_COMPACT);
            esc(f, t ? t : "?");
            free(t);
        } else {
            esc_json(f, v);
        }
        fputs("</td></tr>", f);
    }
    fputs("</table>\n", f);
}

static void config_diff(FILE *f, const report *rp, size_t i)
{
    if (i == rp->base_run) { fputs("<p>this is the base run the others are compared against</p>\n", f); return; }
    json_t *a = json_object(), *b = json_object(), *d = json_object(), *v;
    const char *key;
    mpx_json_flatten(mpx_json_path(rp->r[rp->base_run].rec, "config.effective"), "", a);
    mpx_json_flatten(mpx_json_path(rp->r[i].rec, "config.effective"), "", b);
    json_object_foreach(b, key, v) {
        json_t *w = json_object_get(a, key);
        if (!strcmp(key, "run.name") || !strcmp(key, "run.output_dir")) continue;
        if (!w || !json_equal(v, w))
            json_object_set_new(d, key, json_pack("[O?O]", w, v));
    }
    json_object_foreach(a, key, v)
        if (!json_object_get(b, key)) json_object_set_new(d, key, json_pack("[On]", v));
    fputs("<p>against the base run ", f);
    run_link(f, rp, rp->r[rp->base_run].dir);
    fputs(" (base → this run):</p>", f);
    if (!json_object_size(d)) fputs("<p>the same configuration</p>\n", f);
    else {
        fputs("<table class=\"kv\">", f);
        json_object_foreach(d, key, v) {
            fputs("<tr><th>", f);
            esc(f, key);
            fputs("</th><td>", f);
            json_t *x = json_array_get(v, 0), *y = json_array_get(v, 1);
            if (x && !json_is_null(x)) esc_json(f, x); else fputs("(absent)", f);
            fputs(" → ", f);
            if (y && !json_is_null(y)) esc_json(f, y); else fputs("(absent)", f);
            fputs("</td></tr>", f);
        }
        fputs("</table>\n", f);
    }
    json_decref(a);
    json_decref(b);
    json_decref(d);
}

static void memory_table(FILE *f, json_t *mem)
{
    json_t *by = json_object_get(mem, "bytes_by_role"), *peak = json_object_get(mem, "peak_by_role"), *v;
    const char *role;
    if (!json_is_object(mem)) { fputs("<p>no memory record</p>\n", f); return; }
    fputs("<table class=\"mem\"><tr><th>role</th><th>bytes</th><th>peak bytes</th></tr>", f);
    json_object_foreach(by, role, v) {
        fputs("<tr><th>", f);
        esc(f, role);
        fputs("</th><td class=\"num\">", f);
        esc_json(f, v);
        fputs("</td><td class=\"num\">", f);
        esc_json(f, json_object_get(peak, role));
        fputs("</td></tr>", f);
    }
    fputs("</table>\n<p>", f);
    static const char *const keys[] = { "bytes_per_param", "n_params", "persistent_bytes", "transient_peak_bytes",
                                        "update_buffers_bytes", "rss_peak_bytes" };
    for (size_t k = 0; k < sizeof keys / sizeof *keys; k++) {
        json_t *x = json_object_get(mem, keys[k]);
        if (!x) continue;
        fprintf(f, "%s: ", keys[k]);
        esc_json(f, x);
        fputs("; ", f);
    }
    fputs("</p>\n", f);
}

static void provenance(FILE *f, json_t *rec)
{
    const char *kind;
    json_t *p, *v;
    fputs("<table class=\"kv\"><tr><th>git commit</th><td><code>", f);
    esc_json(f, json_object_get(rec, "git_commit"));
    fputs("</code></td></tr>", f);
    json_object_foreach(json_object_get(rec, "plugins"), kind, p) {
        fputs("<tr><th>plugin ", f);
        esc(f, kind);
        fputs("</th><td>", f);
        esc_json(f, json_object_get(p, "name"));
        fputs(" ", f);
        esc_json(f, json_object_get(p, "version"));
        fputs("</td></tr>", f);
    }
    const char *key;
    json_object_foreach(json_object_get(rec, "machine"), key, v) {
        fputs("<tr><th>", f);
        esc(f, key);
        fputs("</th><td>", f);
        esc_json(f, v);
        fputs("</td></tr>", f);
    }
    fputs("</table>\n", f);
}

static void wall_times(FILE *f, json_t *rec)
{
    fputs("<p>started ", f);
    esc_json(f, json_object_get(rec, "started"));
    fputs(", finished ", f);
    json_t *fin = json_object_get(rec, "finished");
    if (fin && !json_is_null(fin)) esc_json(f, fin); else fputs("—", f);
    const char *key;
    json_t *v;
    char buf[64];
    json_object_foreach(json_object_get(rec, "metrics"), key, v) {
        size_t n = strlen(key);
        if (!json_is_number(v) || n < 8 || strcmp(key + n - 8, "_seconds")) continue;
        fputs("; ", f);
        esc(f, key);
        fprintf(f, " %s s", shown(json_number_value(v), buf, sizeof buf));
    }
    fputs("</p>\n", f);
}

static void run_section(FILE *f, const report *rp, size_t i)
{
    const rep_run *r = &rp->r[i];
    const char *status = json_string_value(json_object_get(r->rec, "status"));
    fprintf(f, "<section class=\"run\" id=\"run-%zu\"><h3><span class=\"sw c%zu\"></span>", i, i % 10);
    esc(f, r->label);
    fputs(" <small>", f);
    esc(f, status ? status : "?");
    fputs("</small></h3>\n<p><code>", f);
    esc(f, r->dir);
    fputs("</code></p>\n", f);
    json_t *why = json_object_get(r->rec, "reason");
    if (!json_is_string(why)) why = json_object_get(r->rec, "error");
    if (json_is_string(why)) {
        fputs("<p class=\"error\">", f);
        esc(f, json_string_value(why));
        fputs("</p>\n", f);
    }
    fputs("<h4>Wall times</h4>\n", f);
    wall_times(f, r->rec);
    fputs("<h4>Effective precision</h4>\n", f);
    json_t *flat = json_object();
    mpx_json_flatten(json_object_get(r->rec, "precision"), "", flat);
    kv_table(f, flat, "kv");
    json_decref(flat);
    fputs("<h4>Configuration</h4>\n", f);
    config_diff(f, rp, i);
    fputs("<h4>Notes</h4>\n", f);
    json_t *notes = json_object_get(r->rec, "notes"), *n;
    size_t k;
    if (!json_array_size(notes)) fputs("<p>none</p>\n", f);
    else {
        fputs("<ul>", f);
        json_array_foreach(notes, k, n) {
            fputs("<li>", f);
            if (json_is_string(n)) esc(f, json_string_value(n));
            else esc_json(f, n);
            fputs("</li>", f);
        }
        fputs("</ul>\n", f);
    }
    fputs("<h4>Memory by role</h4>\n", f);
    memory_table(f, json_object_get(r->rec, "memory"));
    fputs("<h4>Provenance</h4>\n", f);
    provenance(f, r->rec);
    fputs("</section>\n", f);
}

/* ---- the page ------------------------------------------------------------------------------ */

static const char css[] =
    "body{font:14px/1.4 sans-serif;margin:1.5em;color:#222;max-width:1400px}h2{border-bottom:1px solid #ccc}"
    "table{border-collapse:collapse;margin:.5em 0}th,td{border:1px solid #ddd;padding:2px 6px;text-align:left;"
    "vertical-align:top}td.num{text-align:right;white-space:nowrap}.scroll{overflow-x:auto}"
    "tr.st-skipped,tr.st-failed,tr.st-killed,tr.st-running{background:#fff3e0}.why{font-size:12px;color:#a33}"
    ".error{color:#a33}.panel{border:1px solid #eee;margin:4px}.panels{display:flex;flex-wrap:wrap}"
    "polyline{fill:none;stroke-width:1.5}polyline.faint{stroke-width:1;opacity:.3}polyline.dashed{stroke-dasharray:4 3}"
    ".frame{fill:none;stroke:#999}.grid{stroke:#eee}.tick{font-size:10px;fill:#555}.ptitle{font-size:12px}"
    ".zero{stroke:#999;stroke-dasharray:3 3}.seeds{stroke:#bbb;stroke-width:6}.ci{stroke:#333;stroke-width:2}"
    ".pt{fill:#1f77b4}.forests{display:flex;gap:1em}.legend label{margin-right:1em;white-space:nowrap}"
    ".sw{display:inline-block;width:14px;height:4px;margin:0 4px 3px;background:currentColor}"
    ".c0{stroke:#1f77b4;color:#1f77b4}.c1{stroke:#d62728;color:#d62728}.c2{stroke:#2ca02c;color:#2ca02c}"
    ".c3{stroke:#9467bd;color:#9467bd}.c4{stroke:#ff7f0e;color:#ff7f0e}.c5{stroke:#8c564b;color:#8c564b}"
    ".c6{stroke:#e377c2;color:#e377c2}.c7{stroke:#7f7f7f;color:#7f7f7f}.c8{stroke:#bcbd22;color:#bcbd22}"
    ".c9{stroke:#17becf;color:#17becf}table.kv th{font-weight:normal;color:#555}section.run{margin-bottom:2em}";

/* The legend's toggles, and a count of script errors the browser test reads back. */
static const char script_head[] =
    "<script>window.mpxErrors=0;window.addEventListener('error',function(){window.mpxErrors++;"
    "if(document.body)document.body.setAttribute('data-errors',String(window.mpxErrors));});</script>\n";
static const char script_tail[] =
    "<script>document.querySelectorAll('input[data-toggle]').forEach(function(box){"
    "box.addEventListener('change',function(){var k=box.getAttribute('data-toggle');"
    "document.querySelectorAll('polyline[data-run=\"'+k+'\"]').forEach(function(p){"
    "p.style.display=box.checked?'':'none';});});});"
    "document.body.setAttribute('data-rendered','1');</script>\n";

static int page(report *rp, FILE *f, const char *const *paths, size_t n_paths, char *err, size_t errlen)
{
    fprintf(f, "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>mpx report</title>\n"
               "<style>%s</style>\n%s</head>\n<body data-errors=\"0\">\n<h1>mpx report</h1>\n<p>", css, script_head);
    for (size_t i = 0; i < n_paths; i++) {
        if (i) fputs(", ", f);
        fputs("<code>", f);
        esc(f, paths[i]);
        fputs("</code>", f);
    }
    fprintf(f, ": %zu run%s.</p>\n<nav><a href=\"#curves\">curves</a>", rp->n, rp->n == 1 ? "" : "s");
    for (size_t k = 0; k < rp->n_sw; k++) fprintf(f, " · <a href=\"#matrix-%zu\">matrix %zu</a>", k, k + 1);
    fputs(" · <a href=\"#runs\">runs</a></nav>\n", f);
    for (size_t k = 0; k < rp->n_sw; k++) {
        if (matrix_section(f, rp, &rp->sw[k], k)) { snprintf(err, errlen, "cannot render the matrix of %s", rp->sw[k].path); return -1; }
        if (rp->sw[k].built) paired_section(f, rp, &rp->sw[k], k);
    }
    if (curves_section(f, rp, err, errlen)) return -1;
    fputs("<section id=\"runs\"><h2>Runs</h2>\n", f);
    for (size_t i = 0; i < rp->n; i++) run_section(f, rp, i);
    fprintf(f, "</section>\n%s</body></html>\n", script_tail);
    return 0;
}

/* text to `out` through a fresh temporary file beside it (never a link), then renamed. */
static int write_atomic(const char *out, const char *text, size_t len, char *err, size_t errlen)
{
    char tmp[PATH_MAX + 32];
    snprintf(tmp, sizeof tmp, "%s.tmp.%ld", out, (long)getpid());
    unlink(tmp);
    FILE *f = mpx_fopen_nofollow(tmp, 0);
    if (!f) { snprintf(err, errlen, "cannot write %s: %s", tmp, strerror(errno)); return -1; }
    size_t w = fwrite(text, 1, len, f);
    int saved = errno;
    if (fclose(f) != 0 || w != len) {
        snprintf(err, errlen, "cannot write %s: %s", tmp, strerror(w != len ? saved : errno));
        unlink(tmp);
        return -1;
    }
    if (rename(tmp, out) != 0) {
        snprintf(err, errlen, "cannot rename %s to %s: %s", tmp, out, strerror(errno));
        unlink(tmp);
        return -1;
    }
    return 0;
}

static void report_free(report *rp)
{
    for (size_t i = 0; i < rp->n; i++) {
        rep_run *r = &rp->r[i];
        free(r->dir);
        json_decref(r->rec);
        free(r->step), free(r->loss), free(r->smooth), free(r->scale), free(r->lr);
    }
    for (size_t k = 0; k < rp->n_sw; k++) {
        if (rp->sw[k].built) mpx_matrix_free(&rp->sw[k].m);
        free(rp->sw[k].metrics);
    }
    free(rp->r);
    free(rp->sw);
}

int mpx_report_write(const char *const *paths, size_t n_paths, const char *out, const mpx_report_opts *o,
                     char *err, size_t errlen)
{
    report rp = { .o = o };
    int rc = 0;
    err[0] = 0;
    if (!(rp.sw = calloc(n_paths + 1, sizeof *rp.sw))) { snprintf(err, errlen, "out of memory"); return -1; }
    for (size_t i = 0; i < n_paths && !rc; i++) {
        if (mpx_is_run_dir(paths[i])) { rc = add_run(&rp, paths[i], err, errlen); continue; }
        char **dirs;
        size_t n;
        if (mpx_list_runs(paths[i], &dirs, &n, err, errlen)) { rc = -1; break; }
        for (size_t k = 0; k < n && !rc; k++) rc = add_run(&rp, dirs[k], err, errlen);
        mpx_free_list(dirs, n);
        if (!rc && !n) {
            snprintf(err, errlen, "%s: neither a run folder (run.json) nor a sweep folder with runs", paths[i]);
            rc = -1;
        }
        rp.sw[rp.n_sw++].path = paths[i];
    }
    for (size_t k = 0; k < rp.n_sw && !rc; k++) rc = build_matrix(&rp, &rp.sw[k], err, errlen);
    if (!rc && rp.n_sw && rp.sw[0].built) {   /* the base run: the base row's first run */
        const mpx_matrix *m = &rp.sw[0].m;
        const mpx_matrix_cell *c = &m->cells[rp.sw[0].base * json_array_size(m->cols)];
        long b = c->n_runs ? run_index(&rp, m->runs[c->runs[0]].dir) : -1;
        if (b >= 0) rp.base_run = (size_t)b;
    }
    char *text = NULL;
    size_t len = 0;
    FILE *f = rc ? NULL : open_memstream(&text, &len);
    if (!rc && !f) { snprintf(err, errlen, "open_memstream: %s", strerror(errno)); rc = -1; }
    if (f) {
        rc = page(&rp, f, paths, n_paths, err, errlen);
        if (fclose(f) && !rc) { snprintf(err, errlen, "out of memory writing the page"); rc = -1; }
    }
    if (!rc) rc = write_atomic(out, text, len, err, errlen);
    free(text);
    report_free(&rp);
    return rc;
}
