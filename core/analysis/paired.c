#include "paired.h"

#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../datasets/splitmix64.h"

static int cmp_double(const void *x, const void *y)
{
    double a = *(const double *)x, b = *(const double *)y;
    return (a > b) - (a < b);
}

/* numpy.percentile(v, 100 q), method "linear", of sorted v. */
static double quantile_sorted(const double *v, size_t n, double q)
{
    double pos = q * (double)(n - 1);
    size_t i = (size_t)floor(pos);
    if (i + 1 >= n) return v[n - 1];
    double frac = pos - (double)i;
    return v[i] + frac * (v[i + 1] - v[i]);
}

int mpx_bootstrap_mean(const double *v, size_t n, size_t resamples, uint64_t seed, double level,
                       double *mean, double *lo, double *hi)
{
    if (n == 0 || resamples == 0 || !(level > 0 && level < 1)) return -1;
    double sum = 0;
    for (size_t i = 0; i < n; i++) sum += v[i];
    *mean = sum / (double)n;
    double *means = malloc(resamples * sizeof *means);
    if (!means) return -1;
    uint64_t state = seed;
    for (size_t r = 0; r < resamples; r++) {
        double s = 0;
        for (size_t k = 0; k < n; k++) {
            uint64_t x = mpx_splitmix64(&state);
            s += v[(size_t)(((unsigned __int128)x * n) >> 64)];
        }
        means[r] = s / (double)n;
    }
    qsort(means, resamples, sizeof *means, cmp_double);
    *lo = quantile_sorted(means, resamples, (1 - level) / 2);
    *hi = quantile_sorted(means, resamples, (1 + level) / 2);
    free(means);
    return 0;
}

int mpx_bootstrap_runs(const double *const *a, size_t n_a, const double *const *b, size_t n_b, size_t n,
                       size_t resamples, uint64_t seed, double level, double *lo, double *hi)
{
    if (!n || !n_a || !n_b || !resamples || n_a > 64 || n_b > 64 || !(level > 0 && level < 1)) return -1;
    double *means = malloc(resamples * sizeof *means), *d = malloc(n * sizeof *d);
    if (!means || !d) {
        free(means);
        free(d);
        return -1;
    }
    uint64_t state = seed;
    size_t ia[64], ib[64];
    for (size_t r = 0; r < resamples; r++) {
        for (size_t k = 0; k < n_a; k++) ia[k] = (size_t)(((unsigned __int128)mpx_splitmix64(&state) * n_a) >> 64);
        for (size_t k = 0; k < n_b; k++) ib[k] = (size_t)(((unsigned __int128)mpx_splitmix64(&state) * n_b) >> 64);
        for (size_t q = 0; q < n; q++) {
            double sa = 0, sb = 0;
            for (size_t k = 0; k < n_a; k++) sa += a[ia[k]][q];
            for (size_t k = 0; k < n_b; k++) sb += b[ib[k]][q];
            d[q] = 100.0 * (sb / (double)n_b - sa / (double)n_a);
        }
        double s = 0;
        for (size_t k = 0; k < n; k++) s += d[(size_t)(((unsigned __int128)mpx_splitmix64(&state) * n) >> 64)];
        means[r] = s / (double)n;
    }
    qsort(means, resamples, sizeof *means, cmp_double);
    *lo = quantile_sorted(means, resamples, (1 - level) / 2);
    *hi = quantile_sorted(means, resamples, (1 + level) / 2);
    free(means);
    free(d);
    return 0;
}

typedef mpx_question_scores scores;

void mpx_question_scores_free(scores *s)
{
    for (size_t i = 0; i < s->n; i++) free(s->id[i]);
    free(s->id);
    free(s->em);
    free(s->f1);
    memset(s, 0, sizeof *s);
}

static int scores_push(scores *s, const char *id, double em, double f1)
{
    if (s->n == s->cap) {
        size_t cap = s->cap ? 2 * s->cap : 1024;
        char **i2 = realloc(s->id, cap * sizeof *i2);
        if (i2) s->id = i2;
        double *e2 = realloc(s->em, cap * sizeof *e2);
        if (e2) s->em = e2;
        double *f2 = realloc(s->f1, cap * sizeof *f2);
        if (f2) s->f1 = f2;
        if (!i2 || !e2 || !f2) return -1;
        s->cap = cap;
    }
    if (!(s->id[s->n] = strdup(id))) return -1;
    s->em[s->n] = em;
    s->f1[s->n] = f1;
    s->n++;
    return 0;
}

int mpx_question_scores_read(const char *dir, scores *s, char *err, size_t errlen)
{
    char path[4200], line[512];
    snprintf(path, sizeof path, "%s/question_scores.csv", dir);
    memset(s, 0, sizeof *s);
    FILE *f = fopen(path, "r");
    if (!f) {
        snprintf(err, errlen, "%.2000s: %s (runs evaluated on SQuAD write it; `mpx squad-eval DATA PRED "
                 "--per-question FILE` makes it from predictions.json)", path, strerror(errno));
        return -1;
    }
    int rc = 0, lineno = 1;
    if (!fgets(line, sizeof line, f) || strcmp(line, "id,exact_match,f1\n")) {
        snprintf(err, errlen, "%.2000s:1: expected the header 'id,exact_match,f1'", path);
        rc = -1;
    }
    while (!rc && fgets(line, sizeof line, f)) {
        lineno++;
        char id[256];
        double em, f1;
        char tail;
        if (sscanf(line, "%255[^,],%lf,%lf%c", id, &em, &f1, &tail) != 4 || tail != '\n' ||
            !(em == 0 || em == 1) || !(f1 >= 0 && f1 <= 1)) {
            snprintf(err, errlen, "%.2000s:%d: expected 'id,EM (0 or 1),F1 (0..1)'", path, lineno);
            rc = -1;
        } else if (scores_push(s, id, em, f1)) {
            snprintf(err, errlen, "%.2000s: out of memory", path);
            rc = -1;
        }
    }
    fclose(f);
    if (!rc && s->n == 0) {
        snprintf(err, errlen, "%.2000s: no questions", path);
        rc = -1;
    }
    if (rc) mpx_question_scores_free(s);
    return rc;
}

/* Adds the runs' scores question by question into em/f1 (sums), checking their question
 * lists against ref's. */
/* Each run's EM and F1 (percent) and its per-question scores (the first 64 runs: the
 * seed-and-question interval takes at most 64 a side). */
typedef struct run_means { size_t n; double em[64], f1[64]; double *q_em[64], *q_f1[64]; } run_means;

static int note_run(run_means *rm, const double *em, const double *f1, size_t n)
{
    if (rm->n >= 64) return 0;
    double se = 0, sf = 0;
    for (size_t i = 0; i < n; i++) se += em[i], sf += f1[i];
    double *qe = malloc(n * sizeof *qe), *qf = malloc(n * sizeof *qf);
    if (!qe || !qf) {
        free(qe);
        free(qf);
        return -1;
    }
    memcpy(qe, em, n * sizeof *qe);
    memcpy(qf, f1, n * sizeof *qf);
    rm->q_em[rm->n] = qe;
    rm->q_f1[rm->n] = qf;
    rm->em[rm->n] = 100.0 * se / (double)n;
    rm->f1[rm->n++] = 100.0 * sf / (double)n;
    return 0;
}

static void run_means_free(run_means *rm)
{
    for (size_t i = 0; i < rm->n; i++) {
        free(rm->q_em[i]);
        free(rm->q_f1[i]);
    }
    rm->n = 0;
}

static double sample_sd(const double *v, size_t n)
{
    if (n < 2) return NAN;
    double m = 0, ss = 0;
    for (size_t i = 0; i < n; i++) m += v[i] / (double)n;
    for (size_t i = 0; i < n; i++) ss += (v[i] - m) * (v[i] - m);
    return sqrt(ss / (double)(n - 1));
}

static int add_group(const char *const *dirs, size_t n, const char *ref_dir, const scores *ref, double *em,
                     double *f1, run_means *rm, char *err, size_t errlen)
{
    for (size_t r = 0; r < n; r++) {
        scores s;
        if (mpx_question_scores_read(dirs[r], &s, err, errlen)) return -1;
        size_t i = 0;
        while (i < s.n && i < ref->n && !strcmp(s.id[i], ref->id[i])) i++;
        if (i < s.n || i < ref->n) {
            snprintf(err, errlen, "%.1500s/question_scores.csv: question %zu is %s, but %.1500s has %s: paired "
                     "comparisons need the same questions in the same order", dirs[r], i + 1,
                     i < s.n ? s.id[i] : "(none)", ref_dir, i < ref->n ? ref->id[i] : "(none)");
            mpx_question_scores_free(&s);
            return -1;
        }
        for (size_t k = 0; k < ref->n; k++) {
            em[k] += s.em[k];
            f1[k] += s.f1[k];
        }
        int rc = note_run(rm, s.em, s.f1, s.n);
        mpx_question_scores_free(&s);
        if (rc) {
            snprintf(err, errlen, "out of memory");
            return -1;
        }
    }
    return 0;
}

/* A run's build, as far as its numbers go: the name and version of each plugin its record
 * names. The core's own commit is left out: a commit that changes no plugin changes no
 * kernel (the study's records differ in commit where their bits agree). */
static const char *const build_kinds[] = { "backend", "model", "precision", "optimizer", "zero", "comm" };
#define N_BUILD_KINDS (sizeof build_kinds / sizeof *build_kinds)
typedef struct build { char v[N_BUILD_KINDS][96]; } build;

/* 1 when DIR/run.json names its plugins (then *b holds them), 0 when there is no readable
 * record: score files from `mpx squad-eval` alone have none, and are not compared. */
static int build_read(const char *dir, build *b)
{
    char path[4200];
    snprintf(path, sizeof path, "%s/run.json", dir);
    json_t *rec = json_load_file(path, 0, NULL);
    json_t *pl = json_object_get(rec, "plugins");
    int ok = json_is_object(pl);
    for (size_t k = 0; ok && k < N_BUILD_KINDS; k++) {
        json_t *p = json_object_get(pl, build_kinds[k]);
        const char *name = json_string_value(json_object_get(p, "name"));
        const char *ver = json_string_value(json_object_get(p, "version"));
        snprintf(b->v[k], sizeof b->v[k], "%s %s", name ? name : "?", ver ? ver : "?");
        if (!p) b->v[k][0] = 0;
    }
    json_decref(rec);
    return ok;
}

/* out: "" when every plugin the runs' records name has one version across them, else the
 * first difference found: a plugin of some kind and name at another version than in the
 * first record naming it ("backend cpu 1.0.0 in A, 1.4.1 in B; ..."), within a group or
 * between the groups. Plugins of other names (fp32 against bf16-master) are what is
 * compared, not a build. */
static void build_note(const char *const *a, size_t n_a, const char *const *b, size_t n_b, char *out, size_t len)
{
    enum { MAX_NAMES = 16 };
    struct { build b; const char *dir; } first[MAX_NAMES]; /* the first record naming each plugin */
    size_t n_first = 0;
    out[0] = 0;
    for (size_t i = 0; i < n_a + n_b && !out[0]; i++) {
        const char *dir = i < n_a ? a[i] : b[i - n_a];
        build x;
        if (!build_read(dir, &x)) continue;
        size_t used = 0;
        for (size_t k = 0; k < N_BUILD_KINDS && used < len; k++) {
            size_t name_len = strcspn(x.v[k], " ");
            if (!x.v[k][0]) continue;
            size_t f = 0;
            while (f < n_first && !(strcspn(first[f].b.v[k], " ") == name_len &&
                                    !strncmp(first[f].b.v[k], x.v[k], name_len)))
                f++;
            if (f == n_first) {   /* the first record naming this plugin */
                if (n_first < MAX_NAMES) {
                    first[n_first].b = x;
                    first[n_first].dir = dir;
                    for (size_t o = 0; o < N_BUILD_KINDS; o++)
                        if (o != k) first[n_first].b.v[o][0] = 0;   /* this entry stands for kind k only */
                    n_first++;
                }
                continue;
            }
            if (!strcmp(first[f].b.v[k], x.v[k])) continue;
            int w = snprintf(out + used, len - used, "%s%s %s in %s, %s in %s", used ? "; " : "", build_kinds[k],
                             first[f].b.v[k], first[f].dir, x.v[k] + name_len + 1, dir);
            used = w < 0 ? len : used + (size_t)w;
        }
    }
}

void mpx_paired_print_build_note(const mpx_paired_result *r, const char *who, FILE *f)
{
    if (!r->build_note[0]) return;
    if (f == stderr) fflush(stdout);   /* after what came before it, when both go to one file */
    fprintf(f, "%s: note: the runs differ in plugin versions (%s); in 16 bits another build redraws the rounding "
               "noise as another seed does, and the interval leaves that out (docs/STUDY.md, \"The build alone\")\n",
            who, r->build_note);
}

void mpx_paired_print_seed_note(const mpx_paired_result *r, const char *who, const char *a_name, const char *b_name,
                                FILE *f)
{
    if ((r->n_a == 1) == (r->n_b == 1)) return;
    const char *one = r->n_a == 1 ? a_name : b_name, *many = r->n_a == 1 ? b_name : a_name;
    if (f == stderr) fflush(stdout);
    fprintf(f, "%s: note: %s has 1 run: the interval over seeds and questions resamples %s's %zu runs and the "
               "questions only; %s's seed-to-seed spread is unknown and not in it\n",
            who, one, many, r->n_a == 1 ? r->n_b : r->n_a, one);
}

static int metric_of(const double *a, const double *b, size_t n, double na, double nb, size_t resamples,
                     uint64_t seed, mpx_paired_metric *m)
{
    double *d = malloc(n * sizeof *d);
    if (!d) return -1;
    double sa = 0, sb = 0;
    for (size_t i = 0; i < n; i++) {
        sa += a[i] / na;
        sb += b[i] / nb;
        d[i] = 100.0 * (b[i] / nb - a[i] / na);
    }
    m->a = 100.0 * sa / (double)n;
    m->b = 100.0 * sb / (double)n;
    int rc = mpx_bootstrap_mean(d, n, resamples, seed, 0.95, &m->diff, &m->lo, &m->hi);
    free(d);
    return rc;
}

int mpx_paired_compare(const char *const *a, size_t n_a, const char *const *b, size_t n_b,
                       size_t resamples, uint64_t seed, mpx_paired_result *out, char *err, size_t errlen)
{
    memset(out, 0, sizeof *out);
    if (!n_a || !n_b) {
        snprintf(err, errlen, "a paired comparison needs at least one run on each side");
        return -1;
    }
    scores ref = { 0 };
    if (mpx_question_scores_read(a[0], &ref, err, errlen)) return -1;
    size_t n = ref.n;
    double *ea = calloc(n, sizeof *ea), *fa = calloc(n, sizeof *fa);
    double *eb = calloc(n, sizeof *eb), *fb = calloc(n, sizeof *fb);
    int rc = -1;
    run_means ra = { 0 }, rb = { 0 };
    if (!ea || !fa || !eb || !fb) {
        snprintf(err, errlen, "out of memory");
        goto done;
    }
    /* ref holds a[0]'s scores: the others are added against its question list */
    for (size_t i = 0; i < n; i++) ea[i] = ref.em[i], fa[i] = ref.f1[i];
    if (note_run(&ra, ref.em, ref.f1, n)) {
        snprintf(err, errlen, "out of memory");
        goto done;
    }
    if (add_group(a + 1, n_a - 1, a[0], &ref, ea, fa, &ra, err, errlen) ||
        add_group(b, n_b, a[0], &ref, eb, fb, &rb, err, errlen))
        goto done;
    out->sd_em_a = sample_sd(ra.em, ra.n);
    out->sd_f1_a = sample_sd(ra.f1, ra.n);
    out->sd_em_b = sample_sd(rb.em, rb.n);
    out->sd_f1_b = sample_sd(rb.f1, rb.n);
    out->n_questions = n;
    out->n_a = n_a;
    out->n_b = n_b;
    if (metric_of(ea, eb, n, (double)n_a, (double)n_b, resamples, seed, &out->em) ||
        metric_of(fa, fb, n, (double)n_a, (double)n_b, resamples, seed, &out->f1)) {
        snprintf(err, errlen, "bootstrap failed (out of memory?)");
        goto done;
    }
    out->em.lo_seeds = out->em.hi_seeds = out->f1.lo_seeds = out->f1.hi_seeds = NAN;
    if (n_a + n_b > 2 &&
        (mpx_bootstrap_runs((const double *const *)ra.q_em, ra.n, (const double *const *)rb.q_em, rb.n, n, resamples,
                            seed, 0.95, &out->em.lo_seeds, &out->em.hi_seeds) ||
         mpx_bootstrap_runs((const double *const *)ra.q_f1, ra.n, (const double *const *)rb.q_f1, rb.n, n, resamples,
                            seed, 0.95, &out->f1.lo_seeds, &out->f1.hi_seeds))) {
        snprintf(err, errlen, "bootstrap over seeds failed (out of memory?)");
        goto done;
    }
    build_note(a, n_a, b, n_b, out->build_note, sizeof out->build_note);
    rc = 0;
done:
    free(ea);
    free(fa);
    free(eb);
    free(fb);
    run_means_free(&ra);
    run_means_free(&rb);
    mpx_question_scores_free(&ref);
    return rc;
}
