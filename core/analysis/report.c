/* mpx report (report.h): the HTML page, the matrix and the runs; the SVG panels, the
 * paired comparison and the curves are report_plots.c. */
#include "report.h"
#include "report_page.h"

/* ---- text ------------------------------------------------------------------------- */

/* s as HTML text or attribute value: names come from users (run.name, folders). */
void report_esc(FILE *f, const char *s)
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
    report_esc(f, mpx_json_text(v, buf, sizeof buf));
}

/* A number for a person: 4 significant digits, whole numbers whole. */
const char *report_shown(double x, char *buf, size_t len)
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

long report_run_index(const report *rp, const char *dir)
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

/* ---- the page's sections ------------------------------------------------------------------ */

void report_run_link(FILE *f, const report *rp, const char *dir)
{
    long i = report_run_index(rp, dir);
    if (i < 0) { report_esc(f, dir); return; }
    fprintf(f, "<a href=\"#run-%ld\">", i);
    report_esc(f, rp->r[i].label);
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
        report_esc(f, m->metrics[k]);
        if (!st->n || isnan(st->mean)) { fputs("\" data-value=\"\">—</td>", f); continue; }
        fprintf(f, "\" data-value=\"%.17g\" data-n=\"%zu\">%s", st->mean, st->n, report_shown(st->mean, a, sizeof a));
        if (st->n >= 2) fprintf(f, " ± %s <small>(n=%zu)</small>", report_shown(st->ci, b, sizeof b), st->n);
        fputs("</td>", f);
    }
    fprintf(f, "<td class=\"status\">%s", status);
    for (size_t i = 0; i < c->n_runs; i++) {
        const mpx_matrix_run *r = &m->runs[c->runs[i]];
        if (!strcmp(r->status, "finished")) continue;
        fprintf(f, "<div class=\"why\">%s: ", r->status);   /* why holds the step reached */
        report_esc(f, r->why[0] ? r->why : "(no reason recorded)");
        fputs("</div>", f);
    }
    fputs("</td><td>", f);
    for (size_t i = 0; i < c->n_runs; i++) {
        if (i) fputs(", ", f);
        report_run_link(f, rp, m->runs[c->runs[i]].dir);
    }
    fputs("</td></tr>\n", f);
}

static int matrix_section(FILE *f, const report *rp, const rep_sweep *s, size_t k)
{
    fprintf(f, "<section id=\"matrix-%zu\"><h2>Matrix: ", k);
    report_esc(f, s->path);
    fputs("</h2>\n", f);
    if (!s->built) {
        fputs("<p class=\"error\">no matrix: ", f);
        report_esc(f, s->err);
        fputs("</p></section>\n", f);
        return 0;
    }
    const mpx_matrix *m = &s->m;
    fputs("<p>Rows: <code>", f);
    report_esc(f, m->row_key);
    if (m->col_key) { fputs("</code>, columns: <code>", f); report_esc(f, m->col_key); }
    fputs("</code>. Each cell: mean ± t(0.975, n−1)·s/√n over runs that differ only by run.seed "
          "(n runs); the same numbers as <code>mpx matrix --format json</code>, embedded below.</p>\n"
          "<div class=\"scroll\"><table class=\"matrix\"><thead><tr><th>", f);
    report_esc(f, m->row_key);
    fputs("</th>", f);
    if (m->col_key) { fputs("<th>", f); report_esc(f, m->col_key); fputs("</th>", f); }
    for (size_t i = 0; i < m->n_metrics; i++) {
        fputs("<th>", f);
        report_esc(f, m->metrics[i]);
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

/* ---- one run ------------------------------------------------------------------------------ */

static void kv_table(FILE *f, json_t *flat, const char *cls)
{
    const char *key;
    json_t *v;
    fprintf(f, "<table class=\"%s\">", cls);
    json_object_foreach(flat, key, v) {
        fputs("<tr><th>", f);
        report_esc(f, key);
        fputs("</th><td>", f);
        if (json_is_array(v) || json_is_object(v)) {
            char *t = json_dumps(v, JSON_COMPACT);
            report_esc(f, t ? t : "?");
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
    report_run_link(f, rp, rp->r[rp->base_run].dir);
    fputs(" (base → this run):</p>", f);
    if (!json_object_size(d)) fputs("<p>the same configuration</p>\n", f);
    else {
        fputs("<table class=\"kv\">", f);
        json_object_foreach(d, key, v) {
            fputs("<tr><th>", f);
            report_esc(f, key);
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
        report_esc(f, role);
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
        report_esc(f, kind);
        fputs("</th><td>", f);
        esc_json(f, json_object_get(p, "name"));
        fputs(" ", f);
        esc_json(f, json_object_get(p, "version"));
        fputs("</td></tr>", f);
    }
    const char *key;
    json_object_foreach(json_object_get(rec, "machine"), key, v) {
        fputs("<tr><th>", f);
        report_esc(f, key);
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
        report_esc(f, key);
        fprintf(f, " %s s", report_shown(json_number_value(v), buf, sizeof buf));
    }
    fputs("</p>\n", f);
}

static void run_section(FILE *f, const report *rp, size_t i)
{
    const rep_run *r = &rp->r[i];
    const char *status = json_string_value(json_object_get(r->rec, "status"));
    fprintf(f, "<section class=\"run\" id=\"run-%zu\"><h3><span class=\"sw c%zu\"></span>", i, i % 10);
    report_esc(f, r->label);
    fputs(" <small>", f);
    report_esc(f, status ? status : "?");
    fputs("</small></h3>\n<p><code>", f);
    report_esc(f, r->dir);
    fputs("</code></p>\n", f);
    json_t *why = json_object_get(r->rec, "reason");
    if (!json_is_string(why)) why = json_object_get(r->rec, "error");
    if (json_is_string(why)) {
        fputs("<p class=\"error\">", f);
        report_esc(f, json_string_value(why));
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
            if (json_is_string(n)) report_esc(f, json_string_value(n));
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

static int page(report *rp, FILE *f, const char *const *paths, size_t n_paths, char *err, size_t errlen)
{
    fprintf(f, "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>mpx report</title>\n"
               "<style>%s</style>\n%s</head>\n<body data-errors=\"0\">\n<h1>mpx report</h1>\n<p>", report_css, report_script_head);
    for (size_t i = 0; i < n_paths; i++) {
        if (i) fputs(", ", f);
        fputs("<code>", f);
        report_esc(f, paths[i]);
        fputs("</code>", f);
    }
    fprintf(f, ": %zu run%s.</p>\n<nav><a href=\"#curves\">curves</a>", rp->n, rp->n == 1 ? "" : "s");
    for (size_t k = 0; k < rp->n_sw; k++) fprintf(f, " · <a href=\"#matrix-%zu\">matrix %zu</a>", k, k + 1);
    fputs(" · <a href=\"#runs\">runs</a></nav>\n", f);
    for (size_t k = 0; k < rp->n_sw; k++) {
        if (matrix_section(f, rp, &rp->sw[k], k)) { snprintf(err, errlen, "cannot render the matrix of %s", rp->sw[k].path); return -1; }
        if (rp->sw[k].built) report_paired_section(f, rp, &rp->sw[k], k);
    }
    if (report_curves_section(f, rp, err, errlen)) return -1;
    fputs("<section id=\"runs\"><h2>Runs</h2>\n", f);
    for (size_t i = 0; i < rp->n; i++) run_section(f, rp, i);
    fprintf(f, "</section>\n%s</body></html>\n", report_script_tail);
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
    /* runs of several sweeps that share a cell name: their folders in front */
    if (!rc && mpx_run_labels_distinct(rp.r, rp.n, sizeof *rp.r, offsetof(rep_run, label), offsetof(rep_run, dir),
                                       sizeof rp.r[0].label)) {
        snprintf(err, errlen, "out of memory");
        rc = -1;
    }
    for (size_t k = 0; k < rp.n_sw && !rc; k++) rc = build_matrix(&rp, &rp.sw[k], err, errlen);
    if (!rc && rp.n_sw && rp.sw[0].built) {   /* the base run: the base row's first run */
        const mpx_matrix *m = &rp.sw[0].m;
        const mpx_matrix_cell *c = &m->cells[rp.sw[0].base * json_array_size(m->cols)];
        long b = c->n_runs ? report_run_index(&rp, m->runs[c->runs[0]].dir) : -1;
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
