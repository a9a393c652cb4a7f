/* mpx report over a toy sweep (two precision plugins x two seeds): the page is
 * self-contained and escapes what users name; opened in headless Chromium, its matrix
 * cells equal `mpx matrix --format json`, the loss panel has one curve per run, and no
 * script error was raised; a screenshot is saved. Without a chromium on PATH the browser
 * test skips, saying so. */
#include <criterion/criterion.h>
#include <jansson.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "support/shell.h"

/* A toy sweep of 4 cells under DIR/out/s; returns its folder (static). */
static const char *toy_sweep(const char *dir)
{
    static char sweep[PATH_MAX];
    char path[PATH_MAX], text[PATH_MAX + 1024], cwd[PATH_MAX];
    cr_assert(getcwd(cwd, sizeof cwd));
    snprintf(path, sizeof path, "%s/s.cfg", dir);
    snprintf(text, sizeof text, "name = \"s\";\nbase = \"%s/configs/toy.cfg\";\n"
             "axes = ( { key = \"precision.plugin\"; values = (\"fp32\", \"bf16-master\"); },\n"
             "         { key = \"run.seed\"; values = (1, 2); } );\n", cwd);
    ts_write_file(path, text);
    cr_assert_eq(ts_sh(NULL, 0, "build/bin/mpx sweep %s -s 'run.output_dir=\"%s/out\"' -s train.epochs=1 "
                       ">/dev/null 2>&1", path, dir), 0);
    snprintf(sweep, sizeof sweep, "%s/out/s", dir);
    return sweep;
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
