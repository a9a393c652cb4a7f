/* mpx matrix DIR --rows KEY [--cols KEY] --metric M[,M...] [--format md|csv|json]
 *            [--paired ROW [--resamples N]] */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "../analysis/matrix.h"
#include "../analysis/paired.h"
#include "../engine/session.h"

static const char matrix_usage[] =
    "usage: mpx matrix DIR --rows KEY [--cols KEY] --metric M[,M...] [--format md|csv|json]\n"
    "                  [--paired ROW [--resamples N]] [--plugin-dir DIR]...\n"
    "  a table of the run records in the sweep folder DIR (every DIR/*/run.json): one row per\n"
    "  value of the configuration key --rows, one column per value of --cols (e.g.\n"
    "  precision.plugin, zero.plugin; keys of config.effective). M is a name in run.json's\n"
    "  \"metrics\" (final_loss_mean, final_loss, exact_match, f1, skipped_steps) or a dotted path\n"
    "  into run.json or its metrics (memory.bytes_per_param); a number in the path indexes an\n"
    "  array and a last .max, .min or .mean reduces one (replica_divergence.rel_l2.max: over the\n"
    "  ranks); final_loss is the last step's loss, final_loss_mean\n"
    "  the mean over the last 200 steps (from metrics.losses for older records). Runs differing\n"
    "  only by run.seed share a cell: mean ± t(0.975, n-1)·s/√n and n (a key one record lacks,\n"
    "  written by an older mpx, counts as its schema default; train.checkpoint_every,\n"
    "  train.update_chunk, train.update_threads, backend.cpu.threads do not split cells).\n"
    "  Skipped and failed runs show as such, with their reason.\n"
    "  --paired ROW (with --format md only): then a second table, each row against the row\n"
    "  whose --rows value is ROW on the same questions (question_scores.csv; see `mpx\n"
    "  paired`): the mean difference in EM and F1 points with a 95% bootstrap interval\n"
    "  (--resamples N, default 10000; seed 1), each row's seeds averaged per question, and\n"
    "  the seed-to-seed sd beside it; after the table, a note on stderr for each row whose\n"
    "  runs name a plugin at other versions, and for each row with 1 run against several (or\n"
    "  several against a base of 1), whose interval over seeds resamples only the side with\n"
    "  several.\n"
    "  --plugin-dir DIR: search DIR first for the plugins whose option defaults a record of an\n"
    "  older mpx lacks (as for mpx run; a plugin of your own).\n"
    "  Exit 0, or 2 on errors.\n";

/* The row whose --rows value reads `base`, or -1 with an error naming the rows there are. */
static long base_row(const mpx_matrix *m, const char *base)
{
    size_t nr = json_array_size(m->rows);
    char text[256], rows[1024] = "";
    for (size_t r = 0; r < nr; r++) {
        mpx_matrix_value_text(json_array_get(m->rows, r), text, sizeof text);
        if (!strcmp(text, base)) return (long)r;
        size_t used = strlen(rows);
        snprintf(rows + used, sizeof rows - used, "%s%s", r ? ", " : "", text);
    }
    fprintf(stderr, "mpx matrix: --paired %s: no row has %s = %s (the rows: %s)\n", base, m->row_key, base, rows);
    return -1;
}

static int paired_table(const mpx_matrix *m, const char *base, size_t resamples, FILE *f)
{
    size_t nr = json_array_size(m->rows), nc = json_array_size(m->cols), b = nr;
    char text[256], col[256];
    for (size_t r = 0; r < nr && b == nr; r++) {
        mpx_matrix_value_text(json_array_get(m->rows, r), text, sizeof text);
        if (!strcmp(text, base)) b = r;
    }
    if (b == nr) {
        fprintf(stderr, "mpx matrix: --paired %s: no row has %s = %s\n", base, m->row_key, base);
        return -1;
    }
    fprintf(f, "\npaired against %s = %s on the same questions (bootstrap %zu resamples, seed 1; "
               "points, B − A)\n\n", m->row_key, base, resamples);
    fprintf(f, "| %s%s%s | questions | Δ exact_match [95%%] | Δ f1 [95%%] | EM / F1 [95%%, seeds and questions] | "
               "runs base / row | seed sd EM base / row |\n",
            m->row_key, m->col_key ? " / " : "", m->col_key ? m->col_key : "");
    fputs("|---|---|---|---|---|---|---|\n", f);
    char *note_text = NULL;   /* the build and seed notes, printed on stderr after the table */
    size_t note_len = 0;
    FILE *notes = open_memstream(&note_text, &note_len);
    for (size_t c = 0; c < nc; c++) {
        size_t na;
        const char **a = mpx_matrix_finished_dirs(m, &m->cells[b * nc + c], &na);
        mpx_matrix_value_text(json_array_get(m->cols, c), col, sizeof col);
        for (size_t r = 0; a && r < nr; r++) {
            if (r == b) continue;
            size_t nb;
            const char **bd = mpx_matrix_finished_dirs(m, &m->cells[r * nc + c], &nb);
            mpx_matrix_value_text(json_array_get(m->rows, r), text, sizeof text);
            fprintf(f, "| %s%s%s | ", text, m->col_key ? " / " : "", m->col_key ? col : "");
            mpx_paired_result pr;
            char err[4096];
            if (!na || !nb) {
                fprintf(f, "- | no finished runs to pair | | | %zu / %zu | |\n", na, nb);
            } else if (mpx_paired_compare(a, na, bd, nb, resamples, 1, &pr, err, sizeof err)) {
                fprintf(f, "- | %s | | | %zu / %zu | |\n", err, na, nb);
            } else {
                char sa[32] = "-", sb[32] = "-", seeds[96] = "-";
                if (!isnan(pr.sd_em_a)) snprintf(sa, sizeof sa, "%.2f", pr.sd_em_a);
                if (!isnan(pr.sd_em_b)) snprintf(sb, sizeof sb, "%.2f", pr.sd_em_b);
                if (!isnan(pr.em.lo_seeds))
                    snprintf(seeds, sizeof seeds, "[%+.2f, %+.2f] / [%+.2f, %+.2f]", pr.em.lo_seeds, pr.em.hi_seeds,
                             pr.f1.lo_seeds, pr.f1.hi_seeds);
                fprintf(f, "%zu | %+.2f [%+.2f, %+.2f] | %+.2f [%+.2f, %+.2f] | %s | %zu / %zu | %s / %s |\n",
                        pr.n_questions, pr.em.diff, pr.em.lo, pr.em.hi, pr.f1.diff, pr.f1.lo, pr.f1.hi, seeds, na,
                        nb, sa, sb);
                if (notes && (pr.build_note[0] || (pr.n_a == 1) != (pr.n_b == 1))) {
                    char who[600];
                    snprintf(who, sizeof who, "mpx matrix --paired: %s%s%s", text, m->col_key ? " / " : "",
                             m->col_key ? col : "");
                    mpx_paired_print_build_note(&pr, who, notes);
                    mpx_paired_print_seed_note(&pr, who, "the base row", "this row", notes);
                }
            }
            free(bd);
        }
        free(a);
    }
    if (notes && !fclose(notes) && note_len) {
        fflush(f);
        fputs(note_text, stderr);
    }
    free(note_text);
    return 0;
}

int mpx_cmd_matrix(int argc, char **argv)
{
    const char *dir = NULL, *rows = NULL, *cols = NULL, *metric = NULL, *format = "md", *paired = NULL;
    const char *resamples_text = "10000";
    const char *plugin_dirs[16];
    size_t n_dirs = 0;
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--plugin-dir") && i + 1 < argc) {
            if (n_dirs == sizeof plugin_dirs / sizeof *plugin_dirs) {
                fprintf(stderr, "mpx matrix: at most %zu --plugin-dir\n", n_dirs);
                return 2;
            }
            plugin_dirs[n_dirs++] = argv[++i];
            continue;
        }
        const char **slot = !strcmp(a, "--rows") ? &rows : !strcmp(a, "--cols") ? &cols
                          : !strcmp(a, "--metric") || !strcmp(a, "--metrics") ? &metric
                          : !strcmp(a, "--format") ? &format : !strcmp(a, "--paired") ? &paired
                          : !strcmp(a, "--resamples") ? &resamples_text : NULL;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) { fputs(matrix_usage, stdout); return 0; }
        if (slot && i + 1 < argc) { *slot = argv[++i]; continue; }
        if (slot || a[0] == '-' || dir) {
            fprintf(stderr, "mpx matrix: %s '%s'\n%s", slot ? "missing value after" : a[0] == '-' ? "unknown option" :
                    "one folder only, got also", a, matrix_usage);
            return 2;
        }
        dir = a;
    }
    if (!dir || !rows || !metric) {
        fprintf(stderr, "mpx matrix: needs DIR, --rows and --metric\n%s", matrix_usage);
        return 2;
    }
    if (strcmp(format, "md") && strcmp(format, "csv") && strcmp(format, "json")) {
        fprintf(stderr, "mpx matrix: --format %s: one of md, csv, json\n", format);
        return 2;
    }
    char *end;
    unsigned long long resamples = strtoull(resamples_text, &end, 10);
    if (*end || end == resamples_text || resamples < 1 || resamples > 10000000) {
        fprintf(stderr, "mpx matrix: --resamples %s: an integer from 1 to 10000000\n", resamples_text);
        return 2;
    }
    if (paired && strcmp(format, "md")) {
        fprintf(stderr, "mpx matrix: --paired prints Markdown only (drop --format %s)\n", format);
        return 2;
    }
    /* the installed plugins, for their keys' defaults (records of an older mpx lack new keys) */
    mpx_session s;
    int have_plugins = mpx_session_open(&s, n_dirs ? plugin_dirs : NULL, n_dirs) == 0;
    mpx_matrix m;
    char err[8192];
    int built = mpx_matrix_build(&m, dir, rows, cols, metric, have_plugins ? &s.reg : NULL, err, sizeof err);
    if (have_plugins) mpx_session_close(&s);
    m.reg = NULL;
    if (built) {
        fprintf(stderr, "mpx matrix: %s\n", err);
        mpx_matrix_free(&m);
        return 2;
    }
    if (paired && base_row(&m, paired) < 0) {   /* before the table, not after it */
        mpx_matrix_free(&m);
        return 2;
    }
    int rc = mpx_matrix_render(&m, format, stdout);
    if (!rc && paired && paired_table(&m, paired, (size_t)resamples, stdout)) {
        mpx_matrix_free(&m);
        return 2;
    }
    mpx_matrix_free(&m);
    if (rc || fflush(stdout)) {
        fprintf(stderr, "mpx matrix: cannot write the table\n");
        return 2;
    }
    return 0;
}
