/* mpx paired A... --vs B... : the paired comparison of two groups of runs (paired.h). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "cli.h"
#include "../analysis/paired.h"

static const char paired_usage[] =
    "usage: mpx paired RUN... --vs RUN... [--resamples N] [--seed S] [--format md|json]\n"
    "  compares two groups of runs on the same questions: each group's question_scores.csv\n"
    "  averaged over its runs (e.g. seeds) question by question, then the mean of B - A (the\n"
    "  runs after --vs minus those before it) in EM and F1 points with a 95% percentile\n"
    "  bootstrap interval over questions (N resamples, default 10000; seed S, default 1); when\n"
    "  a group has several runs, also a two-level interval that resamples the runs (seeds) of\n"
    "  each group and the questions, the level a claim about the policies holds at (with one\n"
    "  run on a side, only the other side's runs are resampled, and a note on stderr says\n"
    "  so); and each group's seed-to-seed sd of EM/F1. When the runs' records (run.json) name\n"
    "  different plugin versions, a note on stderr says which. Exit 0, or 2 on errors.\n";

static void fmt(double v, char *buf, size_t n)
{
    if (isnan(v)) snprintf(buf, n, "-");
    else snprintf(buf, n, "%.2f", v);
}

/* "[lo, hi]" of the seed-and-question interval, or "-" with one run a side. */
static void fmt_seeds(const mpx_paired_metric *m, char *buf, size_t n)
{
    if (isnan(m->lo_seeds)) snprintf(buf, n, "-");
    else snprintf(buf, n, "[%+.2f, %+.2f]", m->lo_seeds, m->hi_seeds);
}

void mpx_paired_print_md(const mpx_paired_result *r, const char *a_label, const char *b_label, FILE *f)
{
    char sa[32], sb[32], iv[64];
    fprintf(f, "| metric | A: %s (%zu runs) | B: %s (%zu runs) | B − A | 95%% interval, questions | 95%% interval, "
               "seeds and questions | seed sd A / B |\n", a_label, r->n_a, b_label, r->n_b);
    fputs("|---|---|---|---|---|---|---|\n", f);
    fmt(r->sd_em_a, sa, sizeof sa), fmt(r->sd_em_b, sb, sizeof sb), fmt_seeds(&r->em, iv, sizeof iv);
    fprintf(f, "| exact_match | %.2f | %.2f | %+.2f | [%+.2f, %+.2f] | %s | %s / %s |\n", r->em.a, r->em.b, r->em.diff,
            r->em.lo, r->em.hi, iv, sa, sb);
    fmt(r->sd_f1_a, sa, sizeof sa), fmt(r->sd_f1_b, sb, sizeof sb), fmt_seeds(&r->f1, iv, sizeof iv);
    fprintf(f, "| f1 | %.2f | %.2f | %+.2f | [%+.2f, %+.2f] | %s | %s / %s |\n", r->f1.a, r->f1.b, r->f1.diff, r->f1.lo,
            r->f1.hi, iv, sa, sb);
}

static void json_metric(const char *name, const mpx_paired_metric *m, double sda, double sdb, int last, FILE *f)
{
    char lo[32] = "null", hi[32] = "null";   /* JSON has no NaN: null with one run a side */
    if (!isnan(m->lo_seeds)) snprintf(lo, sizeof lo, "%.17g", m->lo_seeds), snprintf(hi, sizeof hi, "%.17g", m->hi_seeds);
    fprintf(f, "  \"%s\": {\"a\": %.17g, \"b\": %.17g, \"diff\": %.17g, \"lo\": %.17g, \"hi\": %.17g, "
               "\"lo_seeds\": %s, \"hi_seeds\": %s, \"seed_sd_a\": %.17g, \"seed_sd_b\": %.17g}%s\n",
            name, m->a, m->b, m->diff, m->lo, m->hi, lo, hi, isnan(sda) ? -1.0 : sda, isnan(sdb) ? -1.0 : sdb,
            last ? "" : ",");
}

int mpx_cmd_paired(int argc, char **argv)
{
    const char **a = calloc((size_t)argc + 1, sizeof *a), **b = calloc((size_t)argc + 1, sizeof *b);
    size_t na = 0, nb = 0, resamples = 10000;
    unsigned long long seed = 1;
    const char *format = "md";
    int vs = 0, rc = 2;
    if (!a || !b) goto out;
    for (int i = 0; i < argc; i++) {
        const char *x = argv[i];
        if (!strcmp(x, "--help") || !strcmp(x, "-h")) { fputs(paired_usage, stdout); rc = 0; goto out; }
        if (!strcmp(x, "--vs")) { vs = 1; continue; }
        if ((!strcmp(x, "--resamples") || !strcmp(x, "--seed") || !strcmp(x, "--format")) && i + 1 < argc) {
            const char *v = argv[++i];
            char *end;
            if (!strcmp(x, "--format")) { format = v; continue; }
            unsigned long long n = strtoull(v, &end, 10);
            if (*end || end == v || (!strcmp(x, "--resamples") && (n < 1 || n > 10000000))) {
                fprintf(stderr, "mpx paired: %s %s: expected %s\n", x, v,
                        !strcmp(x, "--seed") ? "an unsigned integer" : "an integer from 1 to 10000000");
                goto out;
            }
            if (!strcmp(x, "--seed")) seed = n;
            else resamples = (size_t)n;
            continue;
        }
        if (x[0] == '-') { fprintf(stderr, "mpx paired: unknown option '%s'\n%s", x, paired_usage); goto out; }
        if (vs) b[nb++] = x;
        else a[na++] = x;
    }
    if (!na || !nb) { fprintf(stderr, "mpx paired: needs runs on both sides of --vs\n%s", paired_usage); goto out; }
    if (strcmp(format, "md") && strcmp(format, "json")) {
        fprintf(stderr, "mpx paired: --format %s: one of md, json\n", format);
        goto out;
    }
    mpx_paired_result r;
    char err[4096];
    if (mpx_paired_compare(a, na, b, nb, resamples, seed, &r, err, sizeof err)) {
        fprintf(stderr, "mpx paired: %s\n", err);
        goto out;
    }
    if (!strcmp(format, "md")) {
        printf("paired on %zu questions; bootstrap %zu resamples, seed %llu\n\n", r.n_questions, resamples, seed);
        mpx_paired_print_md(&r, a[0], b[0], stdout);
    } else {
        printf("{\n  \"questions\": %zu, \"runs_a\": %zu, \"runs_b\": %zu, \"resamples\": %zu, \"seed\": %llu,\n",
               r.n_questions, r.n_a, r.n_b, resamples, seed);
        json_metric("exact_match", &r.em, r.sd_em_a, r.sd_em_b, 0, stdout);
        json_metric("f1", &r.f1, r.sd_f1_a, r.sd_f1_b, 0, stdout);
        json_t *note = json_string(r.build_note);   /* escaped as JSON; "" when the builds agree */
        char *nt = note ? json_dumps(note, JSON_ENCODE_ANY) : NULL;
        printf("  \"builds_differ\": %s, \"build_note\": %s\n", r.build_note[0] ? "true" : "false", nt ? nt : "\"\"");
        free(nt);
        json_decref(note);
        printf("}\n");
    }
    rc = fflush(stdout) ? 2 : 0;
    mpx_paired_print_build_note(&r, "mpx paired", stderr);
    mpx_paired_print_seed_note(&r, "mpx paired", "A", "B", stderr);
out:
    free(a);
    free(b);
    return rc;
}
