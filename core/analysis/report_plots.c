/* mpx report's SVG panels, its paired comparison (forest plots, question lists) and its
 * curves (report_page.h). */
#include "report.h"
#include "report_page.h"

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
    report_esc(f, title);
    fputs("</text>\n", f);
    for (int k = 0; k <= 4; k++) {
        double vx = x->lo + (x->hi - x->lo) * k / 4, vy = y->lo + (y->hi - y->lo) * k / 4;
        fprintf(f, "<text class=\"tick\" x=\"%.1f\" y=\"%d\" text-anchor=\"middle\">%s</text>\n", px(x, vx),
                PANEL_H - MB + 14, report_shown(round(vx), buf, sizeof buf));
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
        report_esc(f, l[i].title);
        fputs("</title></polyline>\n", f);
    }
    fputs("</svg>\n", f);
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
        report_esc(f, p[i].label);
        fputs("</text>", f);
        /* the numbers at full precision too, as the matrix cells carry theirs */
        char ls[32] = "", hs[32] = "";
        if (!isnan(m->lo_seeds)) snprintf(ls, sizeof ls, "%.17g", m->lo_seeds), snprintf(hs, sizeof hs, "%.17g", m->hi_seeds);
        fprintf(f, "<line class=\"ci\" x1=\"%.1f\" x2=\"%.1f\" y1=\"%.1f\" y2=\"%.1f\"/>"
                   "<circle class=\"pt\" cx=\"%.1f\" cy=\"%.1f\" r=\"4\" data-diff=\"%.17g\" data-lo=\"%.17g\" "
                   "data-hi=\"%.17g\" data-lo-seeds=\"%s\" data-hi-seeds=\"%s\"><title>", FX(m->lo), FX(m->hi), y, y,
                FX(m->diff), y, m->diff, m->lo, m->hi, ls, hs);
        report_esc(f, p[i].label);
        fprintf(f, ": %+.2f [%+.2f, %+.2f]</title></circle>\n", m->diff, m->lo, m->hi);
    }
    char a[32], b[32];
    fprintf(f, "<text class=\"tick\" x=\"%d\" y=\"%d\">%s</text><text class=\"tick\" x=\"%d\" y=\"%d\" "
               "text-anchor=\"end\">%s</text><text class=\"tick\" x=\"%.1f\" y=\"%d\" text-anchor=\"middle\">0</text>\n",
            lm, h - 4, report_shown(lo, a, sizeof a), w - rm, h - 4, report_shown(hi, b, sizeof b), FX(0), h - 4);
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
    report_esc(f, p->label);
    fputs(": questions one run gets right and the other wrong (A ", f);
    report_run_link(f, rp, p->a_dir);
    fputs(", B ", f);
    report_run_link(f, rp, p->b_dir);
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
            report_esc(f, a.id[i]);
            fprintf(f, "</code></td><td>%.0f</td><td>%.3f</td><td>%.0f</td><td>%.3f</td></tr>\n", a.em[i], a.f1[i],
                    b.em[i], b.f1[i]);
        }
        fputs("</table>\n", f);
    }
    fputs("</details>\n", f);
    mpx_question_scores_free(&a);
    mpx_question_scores_free(&b);
}

void report_paired_section(FILE *f, const report *rp, const rep_sweep *s, size_t k)
{
    const mpx_matrix *m = &s->m;
    size_t nr = json_array_size(m->rows), nc = json_array_size(m->cols), n = 0;
    pair_row *p = calloc(nr * nc + 1, sizeof *p);
    char base[256], row[256], col[256], first_err[4096] = "";
    mpx_matrix_value_text(json_array_get(m->rows, s->base), base, sizeof base);
    fprintf(f, "<section id=\"paired-%zu\"><h2>Paired comparison against ", k);
    report_esc(f, m->row_key);
    fputs(" = ", f);
    report_esc(f, base);
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
        if (first_err[0]) { fputs(": ", f); report_esc(f, first_err); }
        fputs("</p></section>\n", f);
        free(p);
        return;
    }
    fprintf(f, "<p>A: %s = ", m->row_key);
    report_esc(f, base);
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
        report_esc(f, p[i].label);
        fprintf(f, "</th><td>%zu</td><td data-diff=\"%.17g\">%+.2f [%+.2f, %+.2f]</td><td>%+.2f [%+.2f, %+.2f]</td>"
                   "<td>%zu / %zu</td><td>%s / %s</td></tr>\n", r->n_questions, r->em.diff, r->em.diff, r->em.lo,
                r->em.hi, r->f1.diff, r->f1.lo, r->f1.hi, r->n_a, r->n_b, report_shown(r->sd_em_a, sa, sizeof sa),
                report_shown(r->sd_em_b, sb, sizeof sb));
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

int report_curves_section(FILE *f, const report *rp, char *err, size_t errlen)
{
    size_t with = 0;
    for (size_t i = 0; i < rp->n; i++) with += rp->r[i].n > 0;
    fputs("<section id=\"curves\"><h2>Curves</h2>\n", f);
    if (!with) { fputs("<p>no run has a metrics.csv</p></section>\n", f); return 0; }
    fputs("<div class=\"legend\">", f);
    for (size_t i = 0; i < rp->n; i++) {
        if (!rp->r[i].n) continue;
        fprintf(f, "<label><input type=\"checkbox\" checked data-toggle=\"%zu\"><span class=\"sw c%zu\"></span>", i, i % 10);
        report_esc(f, rp->r[i].label);
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

/* ---- the page's style and script (report_page.h) ---------------------------------------- */

const char report_css[] =
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
const char report_script_head[] =
    "<script>window.mpxErrors=0;window.addEventListener('error',function(){window.mpxErrors++;"
    "if(document.body)document.body.setAttribute('data-errors',String(window.mpxErrors));});</script>\n";
const char report_script_tail[] =
    "<script>document.querySelectorAll('input[data-toggle]').forEach(function(box){"
    "box.addEventListener('change',function(){var k=box.getAttribute('data-toggle');"
    "document.querySelectorAll('polyline[data-run=\"'+k+'\"]').forEach(function(p){"
    "p.style.display=box.checked?'':'none';});});});"
    "document.body.setAttribute('data-rendered','1');</script>\n";
