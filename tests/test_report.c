/* mpx report over a toy sweep (two precision plugins x two seeds): the page is
 * self-contained and escapes what users name; opened in headless Chromium, its matrix
 * cells equal `mpx matrix --format json`, the loss panel has one curve per run, and no
 * script error was raised; a screenshot is saved. Without a chromium on PATH the browser
 * test skips, saying so. A toy sweep with a failed, a skipped and a killed cell: each
 * matrix line says its status and the reason sweep.json or the record holds. Runs of the
 * tiny BERT (configs/tiny_squad.cfg, two policies x two seeds): the forest plot holds
 * the numbers `mpx paired --format json` prints, the per-question lists the ids where
 * the two runs' question_scores.csv disagree on EM, and no SQuAD text. */
#include <criterion/criterion.h>
#include <jansson.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "support/shell.h"

/* mpx sweep of BASE over AXES (libconfig text) with the outputs under DIR/out and the
 * options EXTRA; asserts the exit code is RC; returns the sweep folder (static). */
static const char *sweep_in(const char *dir, const char *base, const char *axes, const char *extra, int rc)
{
    static char sweep[PATH_MAX];
    char path[PATH_MAX], text[PATH_MAX + 2048], cwd[PATH_MAX], out[8192];
    cr_assert(getcwd(cwd, sizeof cwd));
    snprintf(path, sizeof path, "%s/s.cfg", dir);
    snprintf(text, sizeof text, "name = \"s\";\nbase = \"%s/%s\";\naxes = ( %s );\n", cwd, base, axes);
    ts_write_file(path, text);
    cr_assert_eq(ts_sh(out, sizeof out, "build/bin/mpx sweep %s -s 'run.output_dir=\"%s/out\"' %s 2>&1", path, dir,
                       extra), rc, "mpx sweep: %s", out);
    snprintf(sweep, sizeof sweep, "%s/out/s", dir);
    return sweep;
}

/* A toy sweep of 4 cells under DIR/out/s; returns its folder (static). */
static const char *toy_sweep(const char *dir)
{
    return sweep_in(dir, "configs/toy.cfg", "{ key = \"precision.plugin\"; values = (\"fp32\", \"bf16-master\"); },\n"
                    "{ key = \"run.seed\"; values = (1, 2); }", "-s train.epochs=1", 0);
}

/* s as the page escapes text (report.c's esc), into buf. */
static const char *html(const char *s, char *buf, size_t len)
{
    size_t k = 0;
    for (; *s && k + 8 < len; s++) {
        const char *e = *s == '&' ? "&amp;" : *s == '<' ? "&lt;" : *s == '>' ? "&gt;" : *s == '"' ? "&quot;"
                      : *s == '\'' ? "&#39;" : NULL;
        if (e) k += (size_t)sprintf(buf + k, "%s", e);
        else buf[k++] = *s;
    }
    buf[k] = 0;
    return buf;
}

/* The first run of WORDS consecutive space-separated words of text that page holds, as
 * written or as the page escapes it, into hit (empty when none): a fragment of a question,
 * a context or an answer, not only the whole text, gives SQuAD text away. Text of fewer
 * words is looked for whole. */
static int holds_fragment(const char *page, const char *text, int words, char *hit, size_t len)
{
    const char *start[4096];
    size_t n = 0;
    for (const char *c = text; *c && n < 4096; c++)
        if (*c != ' ' && (c == text || c[-1] == ' ')) start[n++] = c;
    size_t windows = n >= (size_t)words ? n - (size_t)words + 1 : (n ? 1 : 0);
    for (size_t i = 0; i < windows; i++) {
        size_t last = n >= (size_t)words ? i + (size_t)words - 1 : n - 1;
        const char *end = start[last];
        while (*end && *end != ' ') end++;
        size_t k = (size_t)(end - start[i]);
        char frag[1024], escaped[6 * 1024 + 16];
        if (k >= sizeof frag) continue;
        memcpy(frag, start[i], k);
        frag[k] = 0;
        if (strstr(page, frag) || strstr(page, html(frag, escaped, sizeof escaped))) {
            snprintf(hit, len, "%s", frag);
            return 1;
        }
    }
    hit[0] = 0;
    return 0;
}

/* chromium (Debian) or chromium-browser on PATH, else NULL. */
static const char *browser(void)
{
    static const char *const names[] = { "chromium", "chromium-browser" };
    for (size_t i = 0; i < 2; i++)
        if (ts_sh(NULL, 0, "command -v %s >/dev/null 2>&1", names[i]) == 0) return names[i];
    return NULL;
}

/* The attribute NAME's value in the tag that starts at tag (up to its '>'), into buf. */
static int attr(const char *tag, const char *name, char *buf, size_t len)
{
    char key[64];
    snprintf(key, sizeof key, " %s=\"", name);
    const char *end = strchr(tag, '>'), *p = strstr(tag, key);
    if (!p || (end && p > end)) return -1;
    p += strlen(key);
    size_t n = strcspn(p, "\"");
    if (n >= len) return -1;
    memcpy(buf, p, n);
    buf[n] = 0;
    return 0;
}

Test(report, self_contained_and_escaped, .timeout = 60)
{
    char *dir = ts_tmpdir("report");
    const char *sweep = toy_sweep(dir);
    char out[4096], html[PATH_MAX], odd[PATH_MAX];
    /* a run whose name holds markup: it must show as text */
    snprintf(odd, sizeof odd, "%s/odd", dir);
    cr_assert_eq(ts_sh(NULL, 0, "build/bin/mpx run configs/toy.cfg -s train.epochs=1 -s "
                       "'run.name=\"<b id=x>\\\"&amp;\"' --out %s >/dev/null 2>&1", odd), 0);
    snprintf(html, sizeof html, "%s/report.html", dir);
    cr_assert_eq(ts_sh(out, sizeof out, "build/bin/mpx report %s %s -o %s 2>&1", sweep, odd, html), 0, "%s", out);
    cr_expect(strstr(out, html), "the path is not printed: %s", out);
    char *text = ts_slurp(html, NULL);
    cr_expect(!strstr(text, "src=\"http") && !strstr(text, "href=\"http") && !strstr(text, "<script src"),
              "the page loads something from elsewhere");
    cr_expect(!strstr(text, "<b id=x>"), "a run name went into the page as markup");
    cr_expect(strstr(text, "&lt;b id=x&gt;&quot;&amp;amp;"), "the run name is not shown escaped");
    cr_expect(strstr(text, "<svg") && strstr(text, "class=\"mpx-matrix\""), "no curves or no embedded matrix");
    free(text);
    /* a link where the report goes is replaced, not written through */
    char target[PATH_MAX], link[PATH_MAX];
    snprintf(target, sizeof target, "%s/target", dir);
    snprintf(link, sizeof link, "%s/link.html", dir);
    ts_write_file(target, "keep");
    cr_assert_eq(symlink(target, link), 0);
    cr_assert_eq(ts_sh(out, sizeof out, "build/bin/mpx report %s -o %s 2>&1", sweep, link), 0, "%s", out);
    text = ts_slurp(target, NULL);
    cr_expect_str_eq(text, "keep");
    free(text);
    cr_expect_eq(ts_sh(out, sizeof out, "build/bin/mpx report %s/nowhere -o %s 2>&1", dir, html), 2);
    cr_expect(strstr(out, "nowhere"), "the error does not name the folder: %s", out);
}

Test(report, browser_renders_the_matrix_and_curves, .timeout = 120)
{
    const char *chromium = browser();
    if (!chromium) cr_skip_test("no chromium on PATH (Debian: apt-get install chromium; .ci/run installs it)");
    char *dir = ts_tmpdir("report");
    const char *sweep = toy_sweep(dir);
    char out[4096], html[PATH_MAX], dom[PATH_MAX], log[PATH_MAX], png[PATH_MAX];
    snprintf(html, sizeof html, "%s/report.html", dir);
    snprintf(dom, sizeof dom, "%s/dom.html", dir);
    snprintf(log, sizeof log, "%s/chromium.log", dir);
    snprintf(png, sizeof png, "%s/report.png", dir);
    cr_assert_eq(ts_sh(out, sizeof out, "build/bin/mpx report %s -o %s --rows precision.plugin 2>&1", sweep, html), 0,
                 "%s", out);
    const char *flags = "--headless=new --no-sandbox --disable-gpu --no-first-run --user-data-dir";
    cr_assert_eq(ts_sh(NULL, 0, "HOME=%s timeout 50 %s %s=%s/profile --enable-logging=stderr --v=0 --dump-dom "
                       "file://%s >%s 2>%s", dir, chromium, flags, dir, html, dom, log), 0, "chromium --dump-dom failed (%s)", log);
    cr_assert_eq(ts_sh(NULL, 0, "HOME=%s timeout 50 %s %s=%s/profile --screenshot=%s --window-size=1200,2000 "
                       "file://%s >/dev/null 2>&1", dir, chromium, flags, dir, png, html), 0, "chromium --screenshot failed");
    char *shot = ts_slurp(png, NULL);
    cr_expect(!memcmp(shot, "\x89PNG", 4), "%s is not a PNG", png);
    free(shot);
    fprintf(stderr, "test_report: screenshot %s\n", png);

    char *d = ts_slurp(dom, NULL), *l = ts_slurp(log, NULL);
    cr_expect(strstr(d, "data-rendered=\"1\""), "the page's script did not run to its end");
    cr_expect(strstr(d, "data-errors=\"0\""), "script errors in the page");
    cr_expect(!strstr(l, "Uncaught") && !strstr(l, ":CONSOLE"), "console messages: %s", l);

    /* the cells, against mpx matrix --format json for the same metrics */
    char metrics[4096] = "";
    size_t cells = 0;
    for (const char *p = strstr(d, "<td class=\"num\" data-row="); p; p = strstr(p + 1, "<td class=\"num\" data-row=")) {
        char m[256], row[256];
        cr_assert_eq(attr(p, "data-metric", m, sizeof m), 0);
        cr_assert_eq(attr(p, "data-row", row, sizeof row), 0);
        if (!strcmp(row, "fp32")) snprintf(metrics + strlen(metrics), sizeof metrics - strlen(metrics), "%s%s",
                                           metrics[0] ? "," : "", m);
    }
    cr_assert(strstr(metrics, "final_loss") && strstr(metrics, "accuracy"), "metrics in the page: %s", metrics);
    char *json = malloc(1 << 20);
    cr_assert_eq(ts_sh(json, 1 << 20, "build/bin/mpx matrix %s --rows precision.plugin --metric %s --format json",
                       sweep, metrics), 0);
    json_error_t e;
    json_t *mj = json_loads(json, 0, &e);
    cr_assert(mj, "mpx matrix json: %s", e.text);
    for (const char *p = strstr(d, "<td class=\"num\" data-row="); p; p = strstr(p + 1, "<td class=\"num\" data-row=")) {
        char m[256], row[256], value[64];
        attr(p, "data-metric", m, sizeof m);
        attr(p, "data-row", row, sizeof row);
        cr_assert_eq(attr(p, "data-value", value, sizeof value), 0);
        size_t i;
        json_t *c, *want = NULL;
        json_array_foreach(json_object_get(mj, "cells"), i, c)
            if (!strcmp(json_string_value(json_object_get(c, "row")), row))
                want = json_object_get(json_object_get(json_object_get(c, "metrics"), m), "mean");
        cr_assert(want, "no cell %s / %s in mpx matrix", row, m);
        if (json_is_null(want)) cr_expect_str_empty(value, "%s / %s", row, m);
        else cr_expect_eq(strtod(value, NULL), json_number_value(want), "%s / %s: %s in the page", row, m, value);
        cells++;
    }
    size_t n_metrics = 1;
    for (const char *c = metrics; *c; c++) n_metrics += *c == ',';
    cr_expect_eq(cells, 2 * n_metrics, "%zu cells for 2 rows x %zu metrics", cells, n_metrics);
    json_decref(mj);
    free(json);

    /* one raw loss curve per run, each run once */
    int seen[4] = { 0 }, curves = 0;
    for (const char *p = strstr(d, "<polyline"); p; p = strstr(p + 1, "<polyline")) {
        char series[64], run[16];
        if (attr(p, "data-series", series, sizeof series) || strcmp(series, "loss")) continue;
        cr_assert_eq(attr(p, "data-run", run, sizeof run), 0);
        int k = atoi(run);
        cr_assert(k >= 0 && k < 4, "data-run %s", run);
        seen[k]++, curves++;
    }
    cr_expect_eq(curves, 4, "%d loss curves for 4 runs", curves);
    for (int k = 0; k < 4; k++) cr_expect_eq(seen[k], 1, "run %d has %d loss curves", k, seen[k]);
    free(d);
    free(l);
}

/* The matrix line (<tr>...</tr>) of the cell ROW / COL, malloc'd, or NULL. */
static char *matrix_line(const char *page, const char *row, const char *col)
{
    for (const char *p = strstr(page, "<tr class=\"st-"); p; p = strstr(p + 1, "<tr class=\"st-")) {
        const char *end = strstr(p, "</tr>"), *td = strstr(p, "<td class=\"num\" data-row=");
        char r[256], c[256];
        if (!end || !td || td > end || attr(td, "data-row", r, sizeof r) || attr(td, "data-col", c, sizeof c)) continue;
        if (strcmp(r, row) || strcmp(c, col)) continue;
        return strndup(p, (size_t)(end - p) + 5);
    }
    return NULL;
}

static size_t count_of(const char *s, const char *what)
{
    size_t n = 0;
    for (const char *p = strstr(s, what); p; p = strstr(p + 1, what)) n++;
    return n;
}

/* fp32 / incompat-test x batch 32, 16, 600: fp32_32 finishes, fp32_600 fails (the toy
 * takes at most 512 rows), the incompat-test cells are skipped (the test plugin refuses
 * SGD), and fp32_16 is run again and killed by the fault hook (unfinished). */
Test(report, unfinished_skipped_and_failed_cells_say_why, .timeout = 90)
{
    char *dir = ts_tmpdir("report");
    char plugins[PATH_MAX], extra[PATH_MAX + 64], out[8192], page_path[PATH_MAX], index_path[PATH_MAX];
    snprintf(plugins, sizeof plugins, "%s/plugins", dir);
    cr_assert_eq(ts_sh(NULL, 0, "mkdir -p %s && cp build/test-plugins/incompat_precision.so %s/", plugins, plugins), 0);
    snprintf(extra, sizeof extra, "-s train.epochs=1 --plugin-dir %s", plugins);
    const char *sweep = sweep_in(dir, "configs/toy.cfg",
                                 "{ key = \"precision.plugin\"; values = (\"fp32\", \"incompat-test\"); },\n"
                                 "{ key = \"train.batch_size\"; values = (32, 16, 600); }", extra, 1);
    snprintf(index_path, sizeof index_path, "%s/sweep.json", sweep);
    json_t *index = ts_load_json(index_path);
    const char *killed = json_string_value(json_object_get(ts_sweep_cell(index, "fp32_16"), "dir"));
    ts_sh(NULL, 0, "MPX_FAULT_AT_STEP=3 build/bin/mpx run configs/toy.cfg -s 'run.output_dir=\"%s/out\"' -s train.epochs=1 "
                   "-s train.batch_size=16 --out %s >/dev/null 2>&1", dir, killed);

    snprintf(page_path, sizeof page_path, "%s/report.html", dir);
    cr_assert_eq(ts_sh(out, sizeof out, "build/bin/mpx report %s -o %s --rows precision.plugin --cols train.batch_size "
                       "--metric final_loss,accuracy --plugin-dir %s 2>&1", sweep, page_path, plugins), 0, "%s", out);
    char *page = ts_slurp(page_path, NULL);
    char *json = malloc(1 << 20);
    cr_assert_eq(ts_sh(json, 1 << 20, "build/bin/mpx matrix %s --rows precision.plugin --cols train.batch_size "
                       "--metric final_loss,accuracy --plugin-dir %s --format json", sweep, plugins), 0);
    json_t *matrix = json_loads(json, 0, NULL);
    cr_assert(matrix, "mpx matrix --format json: %s", json);

    static const char *const want_status[6] = { "finished", "killed", "failed", "skipped", "skipped", "skipped" };
    static const char *const names[6] = { "fp32_32", "fp32_16", "fp32_600", "incompat-test_32", "incompat-test_16",
                                          "incompat-test_600" };
    size_t i;
    json_t *cell;
    json_array_foreach(json_object_get(index, "cells"), i, cell) {
        const char *name = json_string_value(json_object_get(cell, "name"));
        size_t k = 0;
        while (k < 6 && strcmp(names[k], name)) k++;
        cr_assert(k < 6, "unexpected cell %s", name);
        json_t *axes = json_object_get(cell, "axes");
        const char *row = json_string_value(json_object_get(axes, "precision.plugin"));
        char col[32], path[PATH_MAX], want[8192 + 64], esc[8192];
        snprintf(col, sizeof col, "%lld", (long long)json_integer_value(json_object_get(axes, "train.batch_size")));
        snprintf(path, sizeof path, "%s/run.json", json_string_value(json_object_get(cell, "dir")));
        json_t *rec = ts_load_json(path);
        const char *status = json_string_value(json_object_get(rec, "status"));
        cr_assert_str_eq(status, want_status[k], "%s: the sweep did not leave the cell %s", name, want_status[k]);
        /* the reason: sweep.json's for failed and skipped cells, the record's for the killed one */
        const char *why = json_string_value(json_object_get(cell, "reason"));
        if (!strcmp(status, "killed")) why = json_string_value(json_object_get(rec, "error"));
        if (strcmp(status, "finished")) cr_assert(why && why[0], "%s: no reason in sweep.json or run.json", name);
        /* and, for a run that trained part way, the step it reached, from its record's progress */
        char why_step[8192];
        json_t *pg = json_object_get(rec, "progress");
        if (why && strcmp(status, "finished") && json_is_integer(json_object_get(pg, "step"))) {
            snprintf(why_step, sizeof why_step, "%s (at step %lld of %lld)", why,
                     (long long)json_integer_value(json_object_get(pg, "step")),
                     (long long)json_integer_value(json_object_get(pg, "total_steps")));
            why = why_step;
        }
        if (!strcmp(status, "killed")) cr_expect(why == why_step, "%s: the killed run's record has no progress", name);

        /* ... the same one mpx matrix gives */
        size_t j;
        json_t *mc, *found = NULL;
        json_array_foreach(json_object_get(matrix, "cells"), j, mc)
            if (!strcmp(json_string_value(json_object_get(mc, "row")), row) &&
                json_integer_value(json_object_get(mc, "col")) == atoll(col)) found = mc;
        cr_assert(found, "mpx matrix has no cell %s / %s", row, col);
        cr_expect_str_eq(json_string_value(json_object_get(found, "status")), status, "%s", name);
        json_t *mrun = json_array_get(json_object_get(found, "runs"), 0);
        if (why) cr_expect_str_eq(json_string_value(json_object_get(mrun, "reason")), why, "%s", name);

        /* the page's line for the cell: its status as a class and as text, the reason */
        char *line = matrix_line(page, row, col);
        cr_assert(line, "no matrix line for %s / %s in the page", row, col);
        snprintf(want, sizeof want, "<tr class=\"st-%s\">", status);
        cr_expect(!strncmp(line, want, strlen(want)), "%s: %s", name, line);
        snprintf(want, sizeof want, "<td class=\"status\">%s", status);
        cr_expect(strstr(line, want), "%s: no status %s in %s", name, status, line);
        if (why) {
            snprintf(want, sizeof want, "<div class=\"why\">%s: %s</div>", status, html(why, esc, sizeof esc));
            cr_expect(strstr(line, want), "%s: the reason is not shown:\nwant %s\nin   %s", name, want, line);
        } else {
            cr_expect(!strstr(line, "class=\"why\""), "%s finished but has a reason: %s", name, line);
        }
        /* one number per metric: the finished cell's, a dash for the others */
        cr_expect_eq(count_of(line, "<td class=\"num\""), 2, "%s: %s", name, line);
        cr_expect_eq(count_of(line, "data-value=\"\""), strcmp(status, "finished") ? 2 : 0, "%s: %s", name, line);
        free(line);
        json_decref(rec);
    }
    cr_expect_eq(i, 6, "%zu cells in sweep.json", i);
    /* every cell of rows x columns has its line, once */
    cr_expect_eq(count_of(page, "<tr class=\"st-"), 6, "the matrix does not show the 6 cells once each");
    json_decref(matrix);
    json_decref(index);
    free(json);
    free(page);
}

/* A run's question_scores.csv: ids and EM, in the file's order; returns the count. */
static size_t question_em(const char *dir, char ids[][64], int *em, size_t max)
{
    char path[PATH_MAX], line[256];
    snprintf(path, sizeof path, "%s/question_scores.csv", dir);
    FILE *f = fopen(path, "r");
    cr_assert(f, "cannot open %s", path);
    size_t n = 0;
    cr_assert(fgets(line, sizeof line, f) && !strncmp(line, "id,exact_match,", 15), "%s: header %s", path, line);
    while (n < max && fgets(line, sizeof line, f)) {
        char *comma = strchr(line, ',');
        cr_assert(comma && (size_t)(comma - line) < 64, "%s: %s", path, line);
        memcpy(ids[n], line, (size_t)(comma - line));
        ids[n][comma - line] = 0;
        em[n++] = atoi(comma + 1);
    }
    fclose(f);
    return n;
}

/* The ids in the page's table that follows the paragraph starting with HEAD, joined by
 * ','; its stated count in *count. */
static void listed_ids(const char *details, const char *head, char *buf, size_t len, int *count)
{
    const char *p = strstr(details, head);
    cr_assert(p, "no \"%s\" in %s", head, details);
    *count = atoi(p + strlen(head));
    const char *end = strstr(p, "</table>");
    cr_assert(end);
    buf[0] = 0;
    for (const char *c = strstr(p, "<code>"); c && c < end; c = strstr(c + 1, "<code>")) {
        size_t n = strcspn(c + 6, "<"), used = strlen(buf);
        snprintf(buf + used, len - used, "%s%.*s", used ? "," : "", (int)n, c + 6);
    }
}

/* The cell folder of sweep.json whose cell name is the link text after "HEAD<a href=...>". */
static const char *linked_dir(const char *summary, const char *head, json_t *index)
{
    const char *p = strstr(summary, head);
    cr_assert(p, "no \"%s\" in %s", head, summary);
    p = strchr(p, '>');
    cr_assert(p);
    char name[256];
    snprintf(name, sizeof name, "%.*s", (int)strcspn(p + 1, "<"), p + 1);
    return json_string_value(json_object_get(ts_sweep_cell(index, name), "dir"));
}

/* The tiny BERT, trained on its 8 dev questions (dropout off, 200 steps), learns to get
 * one or two of them right depending on seed and policy: bf16-master x fp32 x seeds 4, 7,
 * with fp32 as --base although it is not the first row. */
Test(report, paired_forest_and_question_lists_from_real_question_scores, .timeout = 180)
{
    char *dir = ts_tmpdir("report");
    const char *sweep = sweep_in(dir, "configs/tiny_squad.cfg",
                                 "{ key = \"precision.plugin\"; values = (\"bf16-master\", \"fp32\"); },\n"
                                 "{ key = \"run.seed\"; values = (4, 7); }",
                                 "-s 'data.squad.train_file=\"datasets/data/dev-v1.1.json\"' -s data.squad.train_questions=8 "
                                 "-s train.max_steps=200 -s optimizer.lr=3e-3 -s model.bert-qa.hidden_dropout=0 "
                                 "-s model.bert-qa.attention_dropout=0", 0);
    char page_path[PATH_MAX], index_path[PATH_MAX], out[8192];
    snprintf(page_path, sizeof page_path, "%s/report.html", dir);
    cr_assert_eq(ts_sh(out, sizeof out, "build/bin/mpx report %s --base fp32 -o %s 2>&1", sweep, page_path), 0, "%s", out);
    char *page = ts_slurp(page_path, NULL);
    snprintf(index_path, sizeof index_path, "%s/sweep.json", sweep);
    json_t *index = ts_load_json(index_path);

    /* mpx paired over the same runs, each side in the folders' order (the matrix's) */
    char sides[2][2 * PATH_MAX + 8] = { "", "" };
    static const char *const policy[2] = { "fp32", "bf16-master" };
    for (int side = 0; side < 2; side++)
        for (int seed = 4; seed <= 7; seed += 3) {
            char name[64];
            snprintf(name, sizeof name, "%s_%d", policy[side], seed);
            size_t used = strlen(sides[side]);
            snprintf(sides[side] + used, sizeof sides[side] - used, " %s",
                     json_string_value(json_object_get(ts_sweep_cell(index, name), "dir")));
        }
    char *json = malloc(1 << 16);
    cr_assert_eq(ts_sh(json, 1 << 16, "build/bin/mpx paired%s --vs%s --format json", sides[0], sides[1]), 0, "%s", json);
    json_error_t e;
    json_t *paired = json_loads(json, 0, &e);
    cr_assert(paired, "mpx paired --format json: %s", e.text);
    cr_assert_eq(json_integer_value(json_object_get(paired, "questions")), 8);
    char md[8192];
    cr_assert_eq(ts_sh(md, sizeof md, "build/bin/mpx matrix %s --rows precision.plugin --metric exact_match --paired fp32 "
                       "2>&1", sweep), 0, "%s", md);

    /* the forest plots: one point, bf16-master against fp32, at mpx paired's numbers */
    static const char *const metric[2] = { "exact_match", "f1" };
    static const char *const field[5] = { "diff", "lo", "hi", "lo_seeds", "hi_seeds" };
    static const char *const data[5] = { "data-diff", "data-lo", "data-hi", "data-lo-seeds", "data-hi-seeds" };
    for (int k = 0; k < 2; k++) {
        char tag[128];
        snprintf(tag, sizeof tag, "<svg class=\"forest\" ");
        const char *svg = NULL;
        for (const char *p = strstr(page, tag); p && !svg; p = strstr(p + 1, tag)) {
            char m[32];
            if (!attr(p, "data-metric", m, sizeof m) && !strcmp(m, metric[k])) svg = p;
        }
        cr_assert(svg, "no forest plot of %s", metric[k]);
        const char *end = strstr(svg, "</svg>"), *pt = strstr(svg, "<circle");
        cr_assert(pt && pt < end, "the %s forest plot has no point", metric[k]);
        cr_expect(!strstr(pt + 1, "<circle") || strstr(pt + 1, "<circle") > end, "more than one pair in %s", metric[k]);
        json_t *want = json_object_get(paired, metric[k]);
        double v[5];
        for (int f = 0; f < 5; f++) {
            char got[64];
            cr_assert_eq(attr(pt, data[f], got, sizeof got), 0, "%s: no %s", metric[k], data[f]);
            v[f] = json_number_value(json_object_get(want, field[f]));
            cr_assert(json_is_number(json_object_get(want, field[f])), "mpx paired: no %s.%s", metric[k], field[f]);
            cr_expect_eq(strtod(got, NULL), v[f], "%s %s: %s in the page, %.17g from mpx paired", metric[k], field[f],
                         got, v[f]);
        }
        char shown[256];
        snprintf(shown, sizeof shown, "<title>bf16-master: %+.2f [%+.2f, %+.2f]</title>", v[0], v[1], v[2]);
        cr_expect(strstr(pt, shown) && strstr(pt, shown) < end, "%s: no %s in the forest plot", metric[k], shown);
        /* and mpx matrix --paired prints the same interval */
        snprintf(shown, sizeof shown, "%+.2f [%+.2f, %+.2f]", v[0], v[1], v[2]);
        cr_expect(strstr(md, shown), "%s: no %s in mpx matrix --paired:\n%s", metric[k], shown, md);
    }

    /* the question lists: A fp32's first run, B bf16-master's, the ids where EM differs */
    const char *details = strstr(page, "<details><summary>");
    cr_assert(details, "no per-question lists");
    const char *a_dir = linked_dir(details, "(A ", index), *b_dir = linked_dir(details, ", B ", index);
    cr_expect(strstr(a_dir, "/fp32_"), "A is %s, not an fp32 run", a_dir);
    cr_expect(strstr(b_dir, "/bf16-master_"), "B is %s, not a bf16-master run", b_dir);
    char a_ids[16][64], b_ids[16][64], want[2][1024] = { "", "" }, got[1024];
    int a_em[16], b_em[16];
    size_t na = question_em(a_dir, a_ids, a_em, 16), nb = question_em(b_dir, b_ids, b_em, 16);
    cr_assert_eq(na, 8);
    cr_assert_eq(nb, 8);
    size_t differ = 0;
    for (size_t i = 0; i < na; i++) {
        cr_assert_str_eq(a_ids[i], b_ids[i]);
        if (a_em[i] == b_em[i]) continue;
        char *w = want[a_em[i] < b_em[i]];
        snprintf(w + strlen(w), sizeof want[0] - strlen(w), "%s%s", w[0] ? "," : "", a_ids[i]);
        differ++;
    }
    cr_assert(differ, "the two runs agree on every question: the lists are not tested (other seeds, steps or lr?)");
    static const char *const heads[2] = { "A right, B wrong: ", "B right, A wrong: " };
    for (int side = 0; side < 2; side++) {
        int count;
        listed_ids(details, heads[side], got, sizeof got, &count);
        cr_expect_str_eq(got, want[side], "%s", heads[side]);
        size_t n = want[side][0] ? 1 : 0;
        for (const char *c = want[side]; *c; c++) n += *c == ',';
        cr_expect_eq((size_t)count, n, "%s%d questions, %zu wanted", heads[side], count, n);
    }

    /* no SQuAD text: no five consecutive words of the questions, contexts or gold answers
     * of these ids are in the page, as written or escaped (answers of one or two words,
     * such as a year, are too common to tell; three words or more are looked for whole) */
    json_t *squad = json_load_file("datasets/data/dev-v1.1.json", 0, &e);
    cr_assert(squad, "datasets/data/dev-v1.1.json: %s (make data)", e.text);
    size_t i, j, q, checked = 0, answers = 0;
    json_t *article, *para, *qa, *ans;
    json_array_foreach(json_object_get(squad, "data"), i, article)
        json_array_foreach(json_object_get(article, "paragraphs"), j, para)
            json_array_foreach(json_object_get(para, "qas"), q, qa) {
                const char *id = json_string_value(json_object_get(qa, "id"));
                size_t k = 0;
                while (k < na && strcmp(a_ids[k], id)) k++;
                if (k == na) continue;
                const char *text[2] = { json_string_value(json_object_get(qa, "question")),
                                        json_string_value(json_object_get(para, "context")) };
                char hit[1024];
                for (int t = 0; t < 2; t++)
                    cr_expect(!holds_fragment(page, text[t], 5, hit, sizeof hit), "the page holds \"%s\", from the %s of %s",
                              hit, t ? "context" : "question", id);
                size_t a;
                json_array_foreach(json_object_get(qa, "answers"), a, ans) {
                    const char *t = json_string_value(json_object_get(ans, "text"));
                    int words = 0;
                    for (const char *c = t; *c; c++) words += *c != ' ' && (c == t || c[-1] == ' ');
                    if (words < 3) continue;
                    answers++;
                    cr_expect(!holds_fragment(page, t, 5, hit, sizeof hit), "the page holds \"%s\", an answer of %s", hit, id);
                }
                checked++;
            }
    cr_expect_eq(checked, na, "%zu of the %zu ids found in dev-v1.1.json", checked, na);
    cr_expect_gt(answers, 0, "no answer of three words or more among the ids: the answers are not tested");
    json_decref(squad);
    json_decref(paired);
    json_decref(index);
    free(json);
    free(page);
}
