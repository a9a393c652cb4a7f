/* Writing a matrix: Markdown (reasons of skipped/failed runs in a footnote list), CSV
 * (one line per cell and metric) or JSON (everything, full precision). */
#include "matrix.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "sweep_read.h"

/* Short, readable numbers: integers whole, large values without decimals, else 4 digits. */
static const char *num(double x, char *buf, size_t len)
{
    if (isnan(x)) snprintf(buf, len, "n/a");
    else if (fabs(x) < 1e15 && x == floor(x)) snprintf(buf, len, "%.0f", x);
    else if (fabs(x) >= 1e4) snprintf(buf, len, "%.0f", x);
    else snprintf(buf, len, "%.4g", x);
    return buf;
}

static size_t n_cells(const mpx_matrix *m)
{
    return json_array_size(m->rows) * json_array_size(m->cols);
}

/* Status of a cell: finished when any run finished, else its first run's. */
static const char *cell_status(const mpx_matrix *m, const mpx_matrix_cell *c)
{
    if (c->n_finished) return "finished";
    return c->n_runs ? m->runs[c->runs[0]].status : "none";
}

/* ---- Markdown ----------------------------------------------------------------------- */

typedef struct notes {
    char **text;
    size_t n;
} notes;

/* The footnote number of "status: reason", added when new. */
static size_t note_of(notes *fn, const mpx_matrix_run *r)
{
    char buf[4600];
    snprintf(buf, sizeof buf, "%s: %s", r->status, r->why[0] ? r->why : "(no reason recorded)");
    for (size_t i = 0; i < fn->n; i++)
        if (!strcmp(fn->text[i], buf)) return i + 1;
    char **grown = realloc(fn->text, (fn->n + 1) * sizeof *grown);
    if (!grown) return 0;
    fn->text = grown;
    fn->text[fn->n++] = strdup(buf);
    return fn->n;
}

static void md_cell(const mpx_matrix *m, const mpx_matrix_cell *c, notes *fn, FILE *f)
{
    char a[64], b[64];
    size_t max_n = 0;
    if (!c->n_runs) { fputs(" — |", f); return; }
    fputc(' ', f);
    if (c->n_finished) {
        for (size_t k = 0; k < m->n_metrics; k++) {
            const mpx_stat *s = &c->stats[k];
            if (k) fputs(" / ", f);
            if (s->n >= 2) fprintf(f, "%s ± %s", num(s->mean, a, sizeof a), num(s->ci, b, sizeof b));
            else fputs(num(s->mean, a, sizeof a), f);
            if (s->n > max_n) max_n = s->n;
        }
        if (max_n > 1) fprintf(f, " (n=%zu)", max_n);
    } else {
        fputs(cell_status(m, c), f);
    }
    /* footnotes for every run that did not finish, once per distinct reason */
    size_t marks[64], n_marks = 0;
    for (size_t i = 0; i < c->n_runs; i++) {
        const mpx_matrix_run *r = &m->runs[c->runs[i]];
        if (!strcmp(r->status, "finished")) continue;
        size_t k = note_of(fn, r), j = 0;
        while (j < n_marks && marks[j] != k) j++;
        if (j == n_marks && n_marks < 64) marks[n_marks++] = k;
    }
    for (size_t j = 0; j < n_marks; j++) fprintf(f, "%s%zu%s", j ? "," : " [", marks[j], j + 1 == n_marks ? "]" : "");
    fputs(" |", f);
}

/* A value as a Markdown cell: '|' would end the cell. */
static void md_text(json_t *v, FILE *f)
{
    char buf[512];
    for (const char *p = mpx_json_text(v, buf, sizeof buf); *p; p++) {
        if (*p == '|') fputc('\\', f);
        fputc(*p, f);
    }
}

static void render_md(const mpx_matrix *m, FILE *f)
{
    size_t nr = json_array_size(m->rows), nc = json_array_size(m->cols);
    notes fn = { NULL, 0 };
    fprintf(f, "| %s%s%s |", m->row_key, m->col_key ? " \\ " : "", m->col_key ? m->col_key : "");
    for (size_t j = 0; j < nc; j++) {
        fputc(' ', f);
        if (m->col_key) md_text(json_array_get(m->cols, j), f);
        else for (size_t k = 0; k < m->n_metrics; k++) fprintf(f, "%s%s", k ? " / " : "", m->metrics[k]);
        fputs(" |", f);
    }
    fputs("\n|---|", f);
    for (size_t j = 0; j < nc; j++) fputs("---|", f);
    fputc('\n', f);
    for (size_t i = 0; i < nr; i++) {
        fputs("| ", f);
        md_text(json_array_get(m->rows, i), f);
        fputs(" |", f);
        for (size_t j = 0; j < nc; j++) md_cell(m, &m->cells[i * nc + j], &fn, f);
        fputc('\n', f);
    }
    fputs("\n", f);
    for (size_t k = 0; k < m->n_metrics; k++) fprintf(f, "%s%s", k ? " / " : "", m->metrics[k]);
    fputs(": mean ± t(0.975, n−1)·s/√n over runs that differ only by run.seed (n runs); "
          "a single run shows its value.\n", f);
    for (size_t i = 0; i < fn.n; i++) {
        fprintf(f, "[%zu] %s\n", i + 1, fn.text[i]);
        free(fn.text[i]);
    }
    free(fn.text);
}

/* ---- CSV ----------------------------------------------------------------------------- */

static void csv_field(const char *s, FILE *f)
{
    if (!strpbrk(s, ",\"\n")) { fputs(s, f); return; }
    fputc('"', f);
    for (; *s; s++) {
        if (*s == '"') fputc('"', f);
        fputc(*s, f);
    }
    fputc('"', f);
}

static void csv_num(double x, FILE *f)
{
    if (!isnan(x)) fprintf(f, "%.10g", x);
}

/* The reasons of a cell's runs that did not finish, joined with "; ". */
static void reasons(const mpx_matrix *m, const mpx_matrix_cell *c, char *buf, size_t len)
{
    buf[0] = 0;
    for (size_t i = 0; i < c->n_runs; i++) {
        const mpx_matrix_run *r = &m->runs[c->runs[i]];
        char item[4600];
        snprintf(item, sizeof item, "%s: %s", r->status, r->why[0] ? r->why : "(no reason recorded)");
        if (!strcmp(r->status, "finished") || strstr(buf, item)) continue;
        size_t used = strlen(buf);
        snprintf(buf + used, len - used, "%s%s", used ? "; " : "", item);
    }
}

static void render_csv(const mpx_matrix *m, FILE *f)
{
    size_t nc = json_array_size(m->cols);
    char buf[512], why[8192];
    csv_field(m->row_key, f);
    fputc(',', f);
    csv_field(m->col_key ? m->col_key : "column", f);
    fputs(",metric,status,n,mean,ci95,sd,reason\n", f);
    for (size_t i = 0; i < n_cells(m); i++) {
        const mpx_matrix_cell *c = &m->cells[i];
        if (!c->n_runs) continue;
        reasons(m, c, why, sizeof why);
        for (size_t k = 0; k < m->n_metrics; k++) {
            csv_field(mpx_json_text(json_array_get(m->rows, i / nc), buf, sizeof buf), f);
            fputc(',', f);
            csv_field(m->col_key ? mpx_json_text(json_array_get(m->cols, i % nc), buf, sizeof buf) : "", f);
            fputc(',', f);
            csv_field(m->metrics[k], f);
            fprintf(f, ",%s,%zu,", cell_status(m, c), c->stats[k].n);
            csv_num(c->stats[k].mean, f);
            fputc(',', f);
            csv_num(c->stats[k].ci, f);
            fputc(',', f);
            csv_num(c->stats[k].sd, f);
            fputc(',', f);
            csv_field(why, f);
            fputc('\n', f);
        }
    }
}

/* ---- JSON ---------------------------------------------------------------------------- */

static json_t *real_or_null(double x)
{
    return isnan(x) ? json_null() : json_real(x);
}

static json_t *cell_json(const mpx_matrix *m, size_t i)
{
    const mpx_matrix_cell *c = &m->cells[i];
    size_t nc = json_array_size(m->cols);
    char why[8192];
    json_t *runs = json_array(), *metrics = json_object();
    for (size_t r = 0; r < c->n_runs; r++) {
        const mpx_matrix_run *run = &m->runs[c->runs[r]];
        json_array_append_new(runs, json_pack("{s:s, s:s, s:s}", "dir", run->dir, "status", run->status,
                                              "reason", run->why));
    }
    for (size_t k = 0; k < m->n_metrics; k++) {
        const mpx_stat *s = &c->stats[k];
        json_t *vals = json_array();
        for (size_t v = 0; v < c->n_finished; v++) json_array_append_new(vals, real_or_null(c->values[k][v]));
        json_object_set_new(metrics, m->metrics[k],
                            json_pack("{s:I, s:o, s:o, s:o, s:o}", "n", (json_int_t)s->n, "mean", real_or_null(s->mean),
                                      "ci95", real_or_null(s->ci), "sd", real_or_null(s->sd), "values", vals));
    }
    reasons(m, c, why, sizeof why);
    return json_pack("{s:O, s:O, s:s, s:s, s:o, s:o}", "row", json_array_get(m->rows, i / nc),
                     "col", json_array_get(m->cols, i % nc), "status", cell_status(m, c), "reason", why,
                     "runs", runs, "metrics", metrics);
}

static int render_json(const mpx_matrix *m, FILE *f)
{
    json_t *cells = json_array(), *metrics = json_array();
    for (size_t k = 0; k < m->n_metrics; k++) json_array_append_new(metrics, json_string(m->metrics[k]));
    for (size_t i = 0; i < n_cells(m); i++)
        if (m->cells[i].n_runs) json_array_append_new(cells, cell_json(m, i));
    json_t *j = json_pack("{s:s, s:s?, s:o, s:O, s:O, s:o}", "rows", m->row_key, "cols", m->col_key,
                          "metrics", metrics, "row_values", m->rows, "col_values", m->cols, "cells", cells);
    int rc = j ? json_dumpf(j, f, JSON_INDENT(2)) : -1;
    fputc('\n', f);
    json_decref(j);
    return rc;
}

int mpx_matrix_render(const mpx_matrix *m, const char *format, FILE *f)
{
    if (!strcmp(format, "md")) render_md(m, f);
    else if (!strcmp(format, "csv")) render_csv(m, f);
    else if (!strcmp(format, "json")) return render_json(m, f);
    else return -1;
    return 0;
}
