/* `make install PREFIX=...` and an out-of-tree plugin (issue 9): the installed tree in a
 * temporary prefix holds the binary, the plugins, the ABI headers and mpx.pc; a plugin
 * built against them by tests/out_of_tree/build.sh (pkg-config, installed headers only)
 * exports only mpx_plugin_entry, appears in the installed `mpx plugins`, and runs the
 * toy model as the precision policy of a finished run. Runs from the repository root
 * after `make all` (make test builds it first), so the install only copies files. */
#include <criterion/criterion.h>
#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "support/shell.h"

#define PLUGIN_NAME "oot-bf16-kahan"

static char tmp[256];     /* the test's temporary folder */
static char prefix[300];  /* tmp/prefix: where mpx is installed */
static char outdir[300];  /* tmp/plugins: where build.sh puts the out-of-tree plugin */
static char so_path[400]; /* outdir/precision-oot-bf16-kahan.so */

/* Runs a shell command made from fmt, with stdout and stderr into tmp/NAME.log; returns
 * its exit status (-1 when it did not exit normally). The make, mpx and compiler it runs
 * see no MAKEFLAGS of an enclosing `make test` and no MPX_PLUGIN_PATH of the caller. */
static int sh(const char *log, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int sh(const char *log, const char *fmt, ...)
{
    char cmd[2048], full[2600];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(cmd, sizeof cmd, fmt, ap);
    va_end(ap);
    cr_assert(n > 0 && (size_t)n < sizeof cmd, "command too long");
    snprintf(full, sizeof full, "env -u MAKEFLAGS -u MFLAGS -u MAKELEVEL -u MPX_PLUGIN_PATH %s >%s/%s.log 2>&1",
             cmd, tmp, log);
    int st = system(full);
    return st != -1 && WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* The whole of tmp/NAME.log (caller frees), NUL-terminated. */
static char *slurp_log(const char *log)
{
    char path[512];
    snprintf(path, sizeof path, "%s/%s.log", tmp, log);
    FILE *f = fopen(path, "rb");
    cr_assert_not_null(f, "cannot open %s", path);
    char *buf = NULL;
    size_t len = 0, cap = 0, got;
    char chunk[4096];
    while ((got = fread(chunk, 1, sizeof chunk, f)) > 0) {
        if (len + got + 1 > cap) {
            cap = (len + got + 1) * 2;
            buf = realloc(buf, cap);
            cr_assert_not_null(buf);
        }
        memcpy(buf + len, chunk, got);
        len += got;
    }
    fclose(f);
    if (!buf) buf = calloc(1, 1);
    buf[len] = 0;
    return buf;
}

static int is_file(const char *fmt, const char *a, const char *b)
{
    char path[600];
    struct stat st;
    snprintf(path, sizeof path, fmt, a, b);
    return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

/* Install into a fresh prefix and build the out-of-tree plugin against it. */
static void setup(void)
{
    const char *base = getenv("TMPDIR");
    snprintf(tmp, sizeof tmp, "%s/mpx-install-XXXXXX", base && *base ? base : "/tmp");
    cr_assert_not_null(mkdtemp(tmp), "mkdtemp %s failed", tmp);
    snprintf(prefix, sizeof prefix, "%s/prefix", tmp);
    snprintf(outdir, sizeof outdir, "%s/plugins", tmp);
    snprintf(so_path, sizeof so_path, "%s/precision-" PLUGIN_NAME ".so", outdir);
    int rc = sh("install", "make -s install PREFIX=%s", prefix);
    char *log = slurp_log("install");
    cr_assert_eq(rc, 0, "make install PREFIX=%s failed (exit %d):\n%s", prefix, rc, log);
    free(log);
    rc = sh("build", "bash tests/out_of_tree/build.sh %s %s", prefix, outdir);
    log = slurp_log("build");
    cr_assert_eq(rc, 0, "tests/out_of_tree/build.sh failed (exit %d):\n%s", rc, log);
    free(log);
    cr_assert(is_file("%s%s", so_path, ""), "build.sh did not write %s", so_path);
}

static void teardown(void)
{
    if (!tmp[0] || strncmp(tmp + strlen(tmp) - 19, "/mpx-install-", 13) != 0) return;
    char cmd[400];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmp);
    if (system(cmd) != 0) fprintf(stderr, "test_install: could not remove %s\n", tmp);
}

TestSuite(install, .init = setup, .fini = teardown, .timeout = 120);

Test(install, the_prefix_holds_binary_plugins_headers_and_pkgconfig)
{
    cr_expect(is_file("%s%s", prefix, "/bin/mpx"), "no %s/bin/mpx", prefix);
    cr_expect(is_file("%s%s", prefix, "/include/mpx/mpx.h"), "no %s/include/mpx/mpx.h", prefix);
    cr_expect(is_file("%s%s", prefix, "/lib/mpx/model-toy.so"), "no %s/lib/mpx/model-toy.so", prefix);
    cr_expect(is_file("%s%s", prefix, "/lib/mpx/precision-pure-bf16.so"), "no precision-pure-bf16.so");
    /* mpx.pc names this prefix, so pkg-config points a plugin build at these headers */
    int rc = sh("pc", "env PKG_CONFIG_PATH=%s/lib/pkgconfig pkg-config --variable=includedir mpx", prefix);
    char *out = slurp_log("pc");
    char want[400];
    snprintf(want, sizeof want, "%s/include\n", prefix);
    cr_expect_eq(rc, 0, "pkg-config mpx failed: %s", out);
    cr_expect_str_eq(out, want);
    free(out);
}

Test(install, the_out_of_tree_plugin_exports_only_the_entry_symbol)
{
    int rc = sh("nm", "nm -D --defined-only %s", so_path);
    char *out = slurp_log("nm");
    cr_assert_eq(rc, 0, "nm failed: %s", out);
    int n_symbols = 0, n_entry = 0;
    for (char *line = strtok(out, "\n"); line; line = strtok(NULL, "\n")) {
        char addr[64], type[8], name[256];
        if (sscanf(line, "%63s %7s %255s", addr, type, name) != 3) continue;
        n_symbols++;
        if (strcmp(name, "mpx_plugin_entry") == 0) n_entry++;
        else cr_expect_fail("%s exports %s besides mpx_plugin_entry", so_path, name);
    }
    cr_expect_eq(n_entry, 1, "mpx_plugin_entry exported %d times", n_entry);
    cr_expect_eq(n_symbols, 1, "%d defined dynamic symbols, expected only mpx_plugin_entry", n_symbols);
    free(out);
}

Test(install, the_installed_mpx_lists_the_plugin_from_plugin_dir_and_env)
{
    int rc = sh("plugins", "%s/bin/mpx plugins --plugin-dir %s", prefix, outdir);
    char *out = slurp_log("plugins");
    cr_assert_eq(rc, 0, "mpx plugins failed (exit %d):\n%s", rc, out);
    int listed = 0;
    for (char *line = strtok(out, "\n"); line; line = strtok(NULL, "\n")) {
        char kind[32], name[128], version[32];
        if (sscanf(line, "%31s %127s %31s", kind, name, version) == 3 &&
            strcmp(kind, "precision") == 0 && strcmp(name, PLUGIN_NAME) == 0 && strcmp(version, "1.0.0") == 0)
            listed = 1;
        cr_expect(!strstr(line, "load errors"), "mpx plugins reports load errors: %s", line);
    }
    cr_expect(listed, "precision " PLUGIN_NAME " 1.0.0 not listed by %s/bin/mpx plugins --plugin-dir %s",
              prefix, outdir);
    free(out);

    /* $MPX_PLUGIN_PATH finds it too; its option schema is read from the .so */
    rc = sh("plugins_env", "env MPX_PLUGIN_PATH=%s %s/bin/mpx plugins precision/" PLUGIN_NAME, outdir, prefix);
    out = slurp_log("plugins_env");
    char want[500];
    snprintf(want, sizeof want, "file: %s\n", so_path);
    cr_expect_eq(rc, 0, "mpx plugins precision/" PLUGIN_NAME " with MPX_PLUGIN_PATH failed:\n%s", out);
    cr_expect(strstr(out, want) != NULL, "expected '%s' in:\n%s", want, out);
    cr_expect(strstr(out, "default \"kahan\"") != NULL, "option 'rounding' (default \"kahan\") missing:\n%s", out);
    free(out);

    /* without the folder the installed mpx does not find it: discovery is what found it */
    rc = sh("plugins_none", "%s/bin/mpx plugins precision/" PLUGIN_NAME, prefix);
    out = slurp_log("plugins_none");
    cr_expect_neq(rc, 0, "found " PLUGIN_NAME " without --plugin-dir:\n%s", out);
    free(out);
}

static json_t *load_run(const char *dir)
{
    char path[512];
    snprintf(path, sizeof path, "%s/run.json", dir);
    return ts_load_json(path);
}

static const char *jstr(json_t *root, const char *a, const char *b)
{
    const char *s = json_string_value(json_object_get(json_object_get(root, a), b));
    return s ? s : "(missing)";
}

Test(install, the_installed_mpx_runs_the_toy_model_under_the_plugin)
{
    char run_dir[400];
    snprintf(run_dir, sizeof run_dir, "%s/run", tmp);
    int rc = sh("run", "%s/bin/mpx run configs/toy.cfg --plugin-dir %s -s 'precision.plugin=\"" PLUGIN_NAME "\"' "
                "--out %s", prefix, outdir, run_dir);
    char *log = slurp_log("run");
    cr_assert_eq(rc, 0, "mpx run under " PLUGIN_NAME " failed (exit %d):\n%s", rc, log);
    free(log);
    json_t *r = load_run(run_dir);
    cr_expect_str_eq(json_string_value(json_object_get(r, "status")), "finished");
    json_t *plugins = json_object_get(r, "plugins");
    cr_expect_str_eq(jstr(plugins, "precision", "name"), PLUGIN_NAME);
    cr_expect_str_eq(jstr(plugins, "precision", "path"), so_path);
    /* the other plugins came from the installed tree, not from build/ */
    char lib[400];
    snprintf(lib, sizeof lib, "%s/bin/../lib/mpx/model-toy.so", prefix);
    cr_expect_str_eq(jstr(plugins, "model", "path"), lib);
    /* the plugin's defaults are the run's policy: bf16 everywhere, Kahan rounding with
     * its compensation buffer counted */
    cr_expect_str_eq(jstr(r, "precision", "weights"), "bf16");
    cr_expect_str_eq(jstr(r, "precision", "master"), "none");
    cr_expect_str_eq(jstr(r, "precision", "rounding"), "kahan");
    json_t *roles = json_object_get(json_object_get(r, "memory"), "bytes_by_role");
    json_int_t n_params = json_integer_value(json_object_get(json_object_get(r, "memory"), "n_params"));
    cr_expect_gt(n_params, 0);
    cr_expect_eq(json_integer_value(json_object_get(roles, "compensation")), 2 * n_params,
                 "a bf16 Kahan buffer is 2 bytes per parameter");
    cr_expect_eq(json_integer_value(json_object_get(roles, "master")), 0);
    /* and it trains */
    json_t *m = json_object_get(r, "metrics");
    double first = json_number_value(json_object_get(m, "first_loss"));
    double last = json_number_value(json_object_get(m, "final_loss"));
    cr_expect_lt(last, 0.5 * first, "loss %g -> %g: the toy model did not train", first, last);
    json_decref(r);
}

/* The worked example of docs/PRECISION-POLICIES.md ("Writing a format and a recipe"): an
 * ExMy policy declaring its own formats, built out of tree with pkg-config against the
 * installed headers (no file of mpx changed), listed with its formats and recipe, and
 * run in a sweep beside fp32 by the installed mpx. */
Test(install, an_out_of_tree_exmy_policy_runs_in_a_sweep)
{
    char dir[400];
    snprintf(dir, sizeof dir, "%s/exmy", tmp);
    int rc = sh("build_exmy", "bash tests/out_of_tree/build.sh %s %s tests/out_of_tree/oot_e3m4.c oot-e3m4", prefix, dir);
    char *out = slurp_log("build_exmy");
    cr_assert_eq(rc, 0, "build.sh oot_e3m4.c failed (exit %d):\n%s", rc, out);
    free(out);
    rc = sh("plugins_exmy", "%s/bin/mpx plugins --plugin-dir %s precision/oot-e3m4", prefix, dir);
    out = slurp_log("plugins_exmy");
    cr_expect_eq(rc, 0, "%s", out);
    cr_expect(strstr(out, "e3m4           E3M4, bias 3, subnormals, IEEE inf/NaN, max 15.5, 1 byte"), "%s", out);
    cr_expect(strstr(out, "GEMM inputs e3m4 (backward e3m4)") && strstr(out, "current (margin 0)"), "%s", out);
    free(out);
    char sweep[500], cwd[300];
    cr_assert_not_null(getcwd(cwd, sizeof cwd));
    snprintf(sweep, sizeof sweep, "%s/exmy.cfg", tmp);
    FILE *f = fopen(sweep, "w");
    cr_assert_not_null(f);
    fprintf(f, "name = \"exmy\";\nbase = \"%s/configs/toy.cfg\";\n"
               "set = (\"run.output_dir=\\\"%s/runs\\\"\");\n"
               "axes = ( { key = \"precision.plugin\"; values = (\"fp32\", \"oot-e3m4\"); } );\n", cwd, tmp);
    fclose(f);
    rc = sh("sweep_exmy", "%s/bin/mpx sweep %s --plugin-dir %s", prefix, sweep, dir);
    out = slurp_log("sweep_exmy");
    cr_assert_eq(rc, 0, "the sweep failed (exit %d):\n%s", rc, out);
    free(out);
    rc = sh("matrix_exmy", "%s/bin/mpx matrix %s/runs/exmy --rows precision.plugin --metric final_loss --format json",
            prefix, tmp);
    out = slurp_log("matrix_exmy");
    cr_expect_eq(rc, 0, "%s", out);
    json_error_t e;
    json_t *m = json_loads(out, 0, &e);
    cr_assert_not_null(m, "matrix JSON: %s\n%s", e.text, out);
    free(out);
    char *text = json_dumps(m, JSON_COMPACT);
    cr_expect(strstr(text, "oot-e3m4") && strstr(text, "fp32"), "both cells in the matrix: %s", text);
    free(text);
    json_decref(m);
}
