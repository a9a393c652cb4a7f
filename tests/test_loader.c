/* Plugin discovery and loading: ABI version checks, missing entry symbol, same-folder
 * duplicates, shadowing across folders, search order, and what `mpx plugins` prints. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../core/engine/registry.h"
#include "support/keep.h"
#include "../core/engine/session.h"

/* A fresh folder holding copies of the named test plugins. */
static char *folder_with(const char *const *plugins, size_t n)
{
    char *dir = ts_keep(strdup("/tmp/mpx-loader-XXXXXX"));
    cr_assert_not_null(mkdtemp(dir));
    for (size_t i = 0; i < n; i++) {
        char cmd[1024];
        snprintf(cmd, sizeof cmd, "cp build/test-plugins/%s.so %s/", plugins[i], dir);
        cr_assert_eq(system(cmd), 0, "%s", cmd);
    }
    return dir;
}

static void scan(mpx_registry *r, char *const *dirs, size_t n)
{
    char **copy = malloc(n * sizeof *copy);
    for (size_t i = 0; i < n; i++) copy[i] = strdup(dirs[i]);
    cr_assert_eq(mpx_registry_scan(r, copy, n, &mpx_core_host), 0);
}

static const mpx_plugin_rec *by_file(const mpx_registry *r, const char *file)
{
    for (size_t i = 0; i < r->n; i++)
        if (strstr(r->recs[i].path, file)) return &r->recs[i];
    return NULL;
}

Test(loader, refuses_another_major_naming_file_and_both_versions)
{
    const char *p[] = { "bad_major" };
    char *d = folder_with(p, 1);
    mpx_registry r;
    scan(&r, &d, 1);
    const mpx_plugin_rec *rec = by_file(&r, "bad_major.so");
    cr_assert_not_null(rec);
    cr_assert_not(rec->loaded);
    cr_assert_not_null(rec->error);
    char theirs[16], ours[16];
    snprintf(theirs, sizeof theirs, "ABI %d.%d", MPX_ABI_MAJOR + 1, MPX_ABI_MINOR);
    snprintf(ours, sizeof ours, "ABI %d.%d", MPX_ABI_MAJOR, MPX_ABI_MINOR);
    cr_expect(strstr(rec->error, theirs), "error lacks the plugin's version: %s", rec->error);
    cr_expect(strstr(rec->error, ours), "error lacks mpx's version: %s", rec->error);
    cr_expect_null(mpx_registry_find(&r, MPX_KIND_PRECISION, "fakemajor"));
    mpx_registry_free(&r);
}

Test(loader, refuses_a_newer_minor)
{
    const char *p[] = { "newer_minor" };
    char *d = folder_with(p, 1);
    mpx_registry r;
    scan(&r, &d, 1);
    const mpx_plugin_rec *rec = by_file(&r, "newer_minor.so");
    cr_assert_not_null(rec);
    cr_assert_not(rec->loaded);
    char theirs[16];
    snprintf(theirs, sizeof theirs, "ABI %d.%d", MPX_ABI_MAJOR, MPX_ABI_MINOR + 1);
    cr_expect(strstr(rec->error, theirs) && strstr(rec->error, "newer"), "%s", rec->error);
    cr_expect_null(mpx_registry_find(&r, MPX_KIND_PRECISION, "fakeminor"));
    mpx_registry_free(&r);
}

Test(loader, refuses_a_library_without_the_entry_symbol)
{
    const char *p[] = { "no_entry" };
    char *d = folder_with(p, 1);
    mpx_registry r;
    scan(&r, &d, 1);
    const mpx_plugin_rec *rec = by_file(&r, "no_entry.so");
    cr_assert_not_null(rec);
    cr_assert_not(rec->loaded);
    cr_expect(strstr(rec->error, "mpx_plugin_entry"), "%s", rec->error);
    mpx_registry_free(&r);
}

Test(loader, same_folder_duplicates_are_both_refused)
{
    const char *p[] = { "dup_a", "dup_b" };
    char *d = folder_with(p, 2);
    mpx_registry r;
    scan(&r, &d, 1);
    const mpx_plugin_rec *a = by_file(&r, "dup_a.so"), *b = by_file(&r, "dup_b.so");
    cr_assert(a && b);
    cr_expect(a->error && strstr(a->error, "duplicate") && strstr(a->error, "dup_b.so"), "%s", a->error);
    cr_expect(b->error && strstr(b->error, "duplicate") && strstr(b->error, "dup_a.so"), "%s", b->error);
    cr_expect_null(mpx_registry_find(&r, MPX_KIND_PRECISION, "twin"));
    mpx_registry_free(&r);
}

Test(loader, an_earlier_folder_shadows_a_later_one)
{
    const char *v2[] = { "shadow_v2" }, *v1[] = { "shadow_v1" };
    char *dirs[2] = { folder_with(v2, 1), folder_with(v1, 1) };
    mpx_registry r;
    scan(&r, dirs, 2);
    const mpx_plugin_rec *win = mpx_registry_find(&r, MPX_KIND_PRECISION, "shadowme");
    cr_assert_not_null(win);
    cr_expect_str_eq(win->desc.version, "2.0.0");
    const mpx_plugin_rec *lose = by_file(&r, "shadow_v1.so");
    cr_assert_not_null(lose);
    cr_expect_geq(lose->shadowed_by, 0);
    cr_expect_eq(&r.recs[lose->shadowed_by], win);
    mpx_registry_free(&r);

    /* the other order: the other one wins */
    char *swapped[2] = { dirs[1], dirs[0] };
    scan(&r, swapped, 2);
    cr_expect_str_eq(mpx_registry_find(&r, MPX_KIND_PRECISION, "shadowme")->desc.version, "1.0.0");
    mpx_registry_free(&r);
}

Test(loader, search_order_is_cli_then_env_then_bindir)
{
    setenv("MPX_PLUGIN_PATH", "/env/one:/env/two", 1);
    const char *cli[] = { "/cli/a" };
    char **dirs;
    size_t n;
    cr_assert_eq(mpx_registry_default_dirs(cli, 1, &dirs, &n), 0);
    cr_assert_geq(n, 5);
    cr_expect_str_eq(dirs[0], "/cli/a");
    cr_expect_str_eq(dirs[1], "/env/one");
    cr_expect_str_eq(dirs[2], "/env/two");
    cr_expect(strstr(dirs[3], "/../plugins"), "%s", dirs[3]);
    cr_expect(strstr(dirs[4], "/../lib/mpx"), "%s", dirs[4]);
    for (size_t i = 0; i < n; i++) free(dirs[i]);
    free(dirs);
}

static char *run_capture(const char *cmd)
{
    FILE *f = popen(cmd, "r");
    cr_assert_not_null(f);
    static char buf[65536];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    buf[n] = 0;
    pclose(f);
    return buf;
}

Test(loader, mpx_plugins_lists_builtins_errors_and_shadowing)
{
    const char *bad[] = { "bad_major", "no_entry", "shadow_v2" };
    char *d = folder_with(bad, 3);
    char cmd[512];
    /* a second copy of fp32 in an earlier folder shadows the built-in one */
    snprintf(cmd, sizeof cmd, "cp build/plugins/precision-fp32.so %s/ && MPX_PLUGIN_PATH= build/bin/mpx plugins --plugin-dir %s 2>&1", d, d);
    const char *out = run_capture(cmd);
    static const char *builtins[] = { "backend    cpu", "comm       local", "model      toy",
                                      "precision  fp32", "optimizer  sgd", "zero       stage0" };
    for (size_t i = 0; i < sizeof builtins / sizeof *builtins; i++)
        cr_expect(strstr(out, builtins[i]), "missing '%s' in:\n%s", builtins[i], out);
    cr_expect(strstr(out, "load errors:"), "%s", out);
    cr_expect(strstr(out, "bad_major.so"), "%s", out);
    cr_expect(strstr(out, "no_entry.so"), "%s", out);
    cr_expect(strstr(out, "shadowed:") && strstr(out, "precision/fp32"), "%s", out);
}

/* A required entry left NULL would crash its first call: the loader refuses the plugin and
 * names exactly the entries missing (an optimizer without step; a backend whose op table
 * lacks two of its ABI 1.0 ops), mpx plugins lists why, and a run naming it stops before
 * any record exists. */
Test(loader, refuses_null_required_entries_by_name)
{
    const char *p[] = { "null_step", "null_ops" };
    char *d = folder_with(p, 2);
    mpx_registry r;
    scan(&r, &d, 1);
    const mpx_plugin_rec *opt = by_file(&r, "null_step.so"), *be = by_file(&r, "null_ops.so");
    cr_assert(opt && be);
    cr_assert_not(opt->loaded);
    cr_assert_not(be->loaded);
    cr_expect(opt->error && strstr(opt->error, "optimizer/nullstep: its optimizer vtable") &&
              strstr(opt->error, "has no step: every ABI 1.0 entry is required"), "%s", opt->error);
    cr_expect(be->error && strstr(be->error, "backend/nullops: its op table") &&
              strstr(be->error, "has no layernorm_bwd, gelu_bwd: every ABI 1.0 op is required"), "%s", be->error);
    cr_expect_null(mpx_registry_find(&r, MPX_KIND_OPTIMIZER, "nullstep"));
    cr_expect_null(mpx_registry_find(&r, MPX_KIND_BACKEND, "nullops"));
    mpx_registry_free(&r);

    char cmd[1024];
    snprintf(cmd, sizeof cmd, "MPX_PLUGIN_PATH= build/bin/mpx plugins --plugin-dir %s 2>&1", d);
    const char *out = run_capture(cmd);
    cr_expect(strstr(out, "null_ops.so: backend/nullops: its op table") && strstr(out, "null_step.so: optimizer/nullstep"),
              "%s", out);
    snprintf(cmd, sizeof cmd, "MPX_PLUGIN_PATH= build/bin/mpx run configs/toy.cfg --plugin-dir %s -s "
             "'backend.plugin=\"nullops\"' --out %s/run 2>&1; echo rc=$?; test -e %s/run && echo exists", d, d, d);
    out = run_capture(cmd);
    cr_expect(strstr(out, "has no layernorm_bwd, gelu_bwd") && !strstr(out, "rc=0") && !strstr(out, "exists"), "%s", out);
    /* a sweep with a cell naming it stops before any cell, giving the loader's reason */
    char sweep[600];
    snprintf(sweep, sizeof sweep, "%s/nul.cfg", d);
    FILE *f = fopen(sweep, "w");
    cr_assert_not_null(f);
    char cwd[400];
    cr_assert_not_null(getcwd(cwd, sizeof cwd));
    fprintf(f, "name = \"nul\"; base = \"%s/configs/toy.cfg\";\n"
               "axes = ( { key = \"optimizer.plugin\"; values = (\"adam\", \"nullstep\"); } );\n", cwd);
    cr_assert_eq(fclose(f), 0);
    snprintf(cmd, sizeof cmd, "MPX_PLUGIN_PATH= build/bin/mpx sweep %s --plugin-dir %s --dry-run 2>&1; echo rc=$?", sweep, d);
    out = run_capture(cmd);
    cr_expect(strstr(out, "cell nullstep: optimizer.plugin = \"nullstep\": a plugin of that name was found but refused: ") &&
              strstr(out, "has no step") && strstr(out, "rc=2"), "%s", out);
}

/* A refused file named as a built-in, in a folder searched first, would have been the
 * user's choice: the run uses the built-in and says so in a note (stderr and run.json).
 * A plugin refused for a newer ABI minor is still named when a config selects it. */
Test(loader, a_refused_plugin_is_named_where_it_would_have_been_used)
{
    const char *p[] = { "null_sgd", "newer_minor" };
    char *d = folder_with(p, 2);
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "MPX_PLUGIN_PATH= build/bin/mpx run configs/toy.cfg --plugin-dir %s -s "
             "'optimizer.plugin=\"sgd\"' -s train.max_steps=2 --out %s/run 2>&1; echo rc=$?", d, d);
    const char *out = run_capture(cmd);
    char want[1200], cwd[400];
    cr_assert_not_null(getcwd(cwd, sizeof cwd));
    snprintf(want, sizeof want, "optimizer/sgd: using %s/build/bin/../plugins/optimizer-sgd.so, because %s/null_sgd.so, of "
             "the same kind and name, was refused: optimizer/sgd: its optimizer vtable (56 bytes) has no step", cwd, d);
    cr_expect(strstr(out, want) && strstr(out, "rc=0"), "want \"%s\" in:\n%s", want, out);
    snprintf(cmd, sizeof cmd, "grep -c 'null_sgd.so, of the same kind' %s/run/run.json", d);
    out = run_capture(cmd);
    cr_expect(atoi(out) == 1, "run.json's notes: %s", out);
    snprintf(cmd, sizeof cmd, "MPX_PLUGIN_PATH= build/bin/mpx check configs/toy.cfg --plugin-dir %s -s "
             "'precision.plugin=\"fakeminor\"' 2>&1", d);
    out = run_capture(cmd);
    cr_expect(strstr(out, "\"fakeminor\": a plugin of that name was found but refused: ") &&
              strstr(out, "newer than this mpx's ABI"), "%s", out);
}

/* A backend's own `ops` is whole but the table its instance hands over (instance_ops)
 * lacks gelu_bwd: it loads, and the run fails when its session starts, naming the op,
 * before any op is called (each is a placeholder that would crash). */
Test(loader, an_instances_op_table_is_checked_too)
{
    const char *p[] = { "null_instance_ops" };
    char *d = folder_with(p, 1);
    mpx_registry r;
    scan(&r, &d, 1);
    const mpx_plugin_rec *be = by_file(&r, "null_instance_ops.so");
    cr_assert(be);
    cr_expect(be->loaded && !be->error, "%s", be->error ? be->error : "not loaded");
    mpx_registry_free(&r);
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "MPX_PLUGIN_PATH= build/bin/mpx run configs/toy.cfg --plugin-dir %s -s "
             "'backend.plugin=\"nullinstance\"' --out %s/run 2>&1; echo rc=$?", d, d);
    const char *out = run_capture(cmd);
    cr_expect(strstr(out, "backend/nullinstance: its instance's op table has no gelu_bwd: every ABI 1.0 op is required") &&
              !strstr(out, "rc=0"), "%s", out);
}

Test(loader, mpx_plugins_name_prints_options)
{
    const char *out = run_capture("build/bin/mpx plugins optimizer/sgd 2>&1");
    cr_expect(strstr(out, "momentum"), "%s", out);
    cr_expect(strstr(out, "default"), "%s", out);
    out = run_capture("build/bin/mpx plugins model/toy 2>&1");
    cr_expect(strstr(out, "hidden") && strstr(out, "int"), "%s", out);
}

/* --compat: every installed pair through the checks of `mpx check`; the test plugin's
 * declared incompatibility (precision/incompat-test with optimizer/sgd) is the one "no",
 * with its reason, and the same pair passes `mpx check`'s refusal too. */
Test(loader, mpx_plugins_compat_is_generated_from_declarations)
{
    const char *plugins[] = { "incompat_precision" };
    char *d = folder_with(plugins, 1);
    char cmd[512];
    snprintf(cmd, sizeof cmd, "MPX_PLUGIN_PATH= build/bin/mpx plugins --compat --plugin-dir %s 2>&1", d);
    const char *out = run_capture(cmd);
    cr_expect(strstr(out, "| incompat-test | ok | ok | ok | no [1] |"), "%s", out);
    cr_expect(strstr(out, "[1] precision/incompat-test + optimizer/sgd: precision/incompat-test cannot be combined "
                          "with optimizer/sgd: test plugin: momentum SGD is declared unsupported"), "%s", out);
    cr_expect(strstr(out, "| fp32 | ok | ok | ok | ok |"), "%s", out);
    cr_expect(strstr(out, "incompatible pair"), "%s", out);
    /* where nvcc built backend/cuda and comm/nccl: a precision policy with nccl fails only
     * under the default cpu backend, so it is "ok" with a note naming backend/cuda; cpu with
     * nccl is a real "no" */
    if (strstr(out, "| cpu | cuda |") && strstr(out, " nccl |")) {
        cr_expect(strstr(out, "precision/fp32 + comm/nccl: ok with backend/cuda (with the default: "), "%s", out);
        cr_expect(strstr(out, "backend/cpu + comm/nccl: comm/nccl cannot be combined with backend/cpu"), "%s", out);
    }
}
