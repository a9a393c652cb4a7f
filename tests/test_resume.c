/* Training-state checkpoints: 20 steps of the tiny BERT (dropout on) straight against 10 steps, a death at step
 * 10 (the fault hook), `mpx run --resume` and 10 more, for fp32, fp16-scaled (a forced
 * overflow at step 3 and a growth window of 8, so the scale changes after the
 * checkpoint only if the scaler's state came back) and pure-bf16 with stochastic
 * rounding (Philox streams), all bitwise: the metrics rows (step, loss, lr, grad norm,
 * loss scale, skipped), the record's loss curve, scale trace, EM and F1, diagnostics,
 * and the saved weights. Then the refusals, the crash between the two renames, and a sweep that resumes
 * its killed cell. */
#include <criterion/criterion.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "support/shell.h"

#define TOY_STEPS "-s train.max_steps=20 -s train.checkpoint_every=10"
#define STEPS TOY_STEPS " -s train.save_model=true -s train.log_every=4"

static void expect_same_file(const char *a, const char *b, const char *name)
{
    char pa[512], pb[512];
    size_t na, nb;
    snprintf(pa, sizeof pa, "%s/%s", a, name);
    snprintf(pb, sizeof pb, "%s/%s", b, name);
    char *x = ts_slurp(pa, &na), *y = ts_slurp(pb, &nb);
    cr_expect(na == nb && memcmp(x, y, na) == 0, "%s and %s differ", pa, pb);
    free(x);
    free(y);
}

static json_t *metrics_of(const char *dir)
{
    char path[512];
    snprintf(path, sizeof path, "%s/run.json", dir);
    json_t *j = ts_load_json(path);
    json_t *m = json_incref(json_object_get(j, "metrics"));
    cr_assert_str_eq(json_string_value(json_object_get(j, "status")), "finished", "%s", path);
    json_decref(j);
    return m;
}

/* The straight run and the interrupted + resumed one under `env` and `extra`; the resume
 * adds `resume_extra`. */
static void straight_vs_resumed(const char *env, const char *extra, const char *resume_extra)
{
    char *d = ts_tmpdir("resume");
    char a[300], b[300];
    snprintf(a, sizeof a, "%s/straight", d);
    snprintf(b, sizeof b, "%s/resumed", d);
    cr_assert_eq(ts_sh(NULL, 0, "%s build/bin/mpx run configs/tiny_squad.cfg " STEPS " %s --out %s >%s.log 2>&1",
                       env, extra, a, a), 0, "straight run (%s.log)", a);
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "%s MPX_FAULT_AT_STEP=10 build/bin/mpx run configs/tiny_squad.cfg " STEPS " %s --out %s >%s.log 2>&1",
             env, extra, b, b);
    int rc = system(cmd);
    cr_assert_neq(rc, 0, "the fault hook did not stop the run");
    char path[512];
    snprintf(path, sizeof path, "%s/train_state/state.json", b);
    json_t *st = ts_load_json(path);
    cr_assert_eq(json_integer_value(json_object_get(st, "step")), 10);
    json_decref(st);
    cr_assert_eq(ts_sh(NULL, 0, "%s build/bin/mpx run --resume %s %s >%s.resume.log 2>&1", env, b, resume_extra, b), 0,
                 "resume (%s.resume.log)", b);

    char *ra = ts_metrics_rows(a), *rb = ts_metrics_rows(b);
    cr_expect_str_eq(rb, ra, "metrics rows differ");
    size_t lines = 0;
    for (char *p = ra; *p; p++) lines += *p == '\n';
    cr_expect_eq(lines, 21, "header + 20 rows");
    free(ra);
    free(rb);
    json_t *ma = metrics_of(a), *mb = metrics_of(b);
    static const char *const keys[] = { "losses", "loss_scale_trace", "overflow_steps", "exact_match", "f1",
                                        "updates", "skipped_steps", "overflow_count", "first_loss", "diagnostics" };
    for (size_t i = 0; i < sizeof keys / sizeof *keys; i++)
        cr_expect(json_equal(json_object_get(ma, keys[i]), json_object_get(mb, keys[i])), "metrics.%s differs", keys[i]);
    cr_expect_eq(json_array_size(json_object_get(ma, "losses")), 20);
    if (json_object_get(ma, "scaling") || json_object_get(mb, "scaling"))   /* 8-bit policies' scales */
        cr_expect(json_equal(json_object_get(ma, "scaling"), json_object_get(mb, "scaling")), "metrics.scaling differs");
    json_decref(ma);
    json_decref(mb);
    expect_same_file(a, b, "checkpoint/model.safetensors");
    expect_same_file(a, b, "diagnostics.csv");
    snprintf(path, sizeof path, "%s/run.json", b);
    json_t *rec = ts_load_json(path);
    json_t *res = json_array_get(json_object_get(rec, "resumed"), 0);
    cr_expect_eq(json_integer_value(json_object_get(res, "step")), 10, "run.json says where it resumed");
    json_decref(rec);
}

Test(resume, fp32_20_steps_equal_10_plus_resume_plus_10, .timeout = 300)
{
    straight_vs_resumed("", "", "");
}

Test(resume, fp16_scaled_restores_the_loss_scaler, .timeout = 300)
{
    straight_vs_resumed("MPX_INJECT_OVERFLOW_AT_STEP=3",
                        "-s 'precision.plugin=\"fp16-scaled\"' -s precision.loss_scale_window=8 "
                        "-s 'optimizer.plugin=\"adam\"' -s optimizer.lr=0.01", "");
}

Test(resume, pure_bf16_stochastic_rounding_restores_the_random_streams, .timeout = 300)
{
    straight_vs_resumed("", "-s 'precision.plugin=\"pure-bf16\"' -s 'precision.rounding=\"stochastic\"' "
                            "-s 'optimizer.plugin=\"adam\"' -s optimizer.lr=0.01", "");
}

/* fp8-delayed with a 4-step amax window (and every layer in fp8: the tiny BERT has only
 * a first and a last layer): after the checkpoint every scale comes from the restored
 * histories, so the rest of the run matches only if they came back. With MS-AMP O2's
 * optimizer state (E4M3 / fp16 moments) the per-tensor state scales must come back too. */
Test(resume, fp8_delayed_restores_the_amax_histories_and_state_scales, .timeout = 300)
{
    straight_vs_resumed("", "-s 'precision.plugin=\"fp8-delayed\"' -s precision.fp8-delayed.amax_history_len=4 "
                            "-s 'precision.fp8-delayed.bf16_layers=\"none\"' "
                            "-s 'precision.fp8-delayed.optimizer_state=\"ms-amp-o2\"'", "");
}

/* A killed run folder with a checkpoint at step 10. */
static char *killed_run(void)
{
    char *d = ts_tmpdir("resume-refuse");
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "MPX_FAULT_AT_STEP=10 build/bin/mpx run configs/toy.cfg " TOY_STEPS " --out %s/run >/dev/null 2>&1", d);
    cr_assert_neq(system(cmd), 0);
    return d;
}

/* `mpx sweep --jobs N` gives each cell its own thread count: a cell resumed with other
 * threads and update windows than it started with is the same run, bit for bit (those
 * keys change no result; before, the resume was refused at backend.cpu.threads). */
Test(resume, other_threads_and_update_windows_resume_bitwise, .timeout = 300)
{
    straight_vs_resumed("", "-s backend.cpu.threads=1 -s train.update_threads=1",
                        "-s backend.cpu.threads=2 -s train.update_threads=2 -s train.update_chunk=1000");
}

Test(resume, another_configuration_is_refused_naming_the_key, .timeout = 300)
{
    char *d = killed_run(), out[4096];
    int rc = ts_sh(out, sizeof out, "build/bin/mpx run configs/toy.cfg " TOY_STEPS " -s optimizer.lr=0.01 --resume %s/run 2>&1", d);
    cr_expect_eq(rc, 1);
    cr_expect(strstr(out, "optimizer.lr") != NULL, "names the key: %s", out);
    /* a checkpoint_every of its own is the same run */
    rc = ts_sh(out, sizeof out, "build/bin/mpx run configs/toy.cfg " TOY_STEPS " -s train.checkpoint_every=5 --resume %s/run 2>&1", d);
    cr_expect_eq(rc, 0, "%s", out);
}

/* A refused --resume loses nothing: before, the record was opened first, so metrics.csv
 * lost its rows and a "killed" record became "failed". Each refusal here (another -s, a
 * truncated state.bin, another state version, another seed) leaves run.json, metrics.csv
 * and the checkpoint byte for byte as they were, and a plain --resume then goes on. */
Test(resume, a_refused_resume_changes_nothing, .timeout = 300)
{
    char *d = killed_run(), out[4096], path[1024];
    static const char *const files[] = { "run.json", "metrics.csv", "train_state/state.json", "train_state/state.bin" };
    cr_assert_eq(ts_sh(NULL, 0, "mkdir -p %s/before && cp %s/run/run.json %s/run/metrics.csv %s/before/ && "
                       "cp %s/run/train_state/state.json %s/run/train_state/state.bin %s/before/", d, d, d, d, d, d, d), 0);
    struct { const char *setup, *undo, *args, *needle; } cases[] = {
        { "true", "true", "configs/toy.cfg " TOY_STEPS " -s optimizer.lr=0.01", "differs at optimizer.lr" },
        { "truncate -s -4 %s/run/train_state/state.bin", "cp %s/before/state.bin %s/run/train_state/", "",
          "truncated" },
        { "sed -i 's/^ \"version\": [0-9]*/ \"version\": 99/' %s/run/train_state/state.json",
          "cp %s/before/state.json %s/run/train_state/", "", "not an mpx training state of version" },
        { "true", "true", "configs/toy.cfg " TOY_STEPS " -s run.seed=99", "differs at run.seed" },
    };
    for (size_t k = 0; k < sizeof cases / sizeof *cases; k++) {
        cr_assert_eq(ts_sh(NULL, 0, cases[k].setup, d), 0);
        /* the checkpoint as the refusal must leave it, with the case's damage */
        cr_assert_eq(ts_sh(NULL, 0, "cp %s/run/train_state/state.bin %s/run/train_state/state.json %s/", d, d, d), 0);
        int rc = ts_sh(out, sizeof out, "build/bin/mpx run %s --resume %s/run 2>&1", cases[k].args, d);
        cr_expect_eq(rc, 1, "case %zu: exit %d: %s", k, rc, out);
        cr_expect(strstr(out, cases[k].needle) && strstr(out, "nothing in"), "case %zu: %s", k, out);
        for (size_t f = 0; f < 2; f++) {
            snprintf(path, sizeof path, "%s/run/%s", d, files[f]);
            char *a = ts_slurp(path, NULL);
            snprintf(path, sizeof path, "%s/before/%s", d, strrchr(files[f], '/') ? strrchr(files[f], '/') + 1 : files[f]);
            char *b = ts_slurp(path, NULL);
            cr_expect_str_eq(a, b, "case %zu: %s changed", k, files[f]);
            free(a);
            free(b);
        }
        cr_expect(ts_sh(NULL, 0, "cmp -s %s/state.bin %s/run/train_state/state.bin && "
                        "cmp -s %s/state.json %s/run/train_state/state.json", d, d, d, d) == 0,
                  "case %zu: the checkpoint changed", k);
        cr_assert_eq(ts_sh(NULL, 0, cases[k].undo, d, d), 0);
    }
    snprintf(path, sizeof path, "%s/run/run.json", d);
    json_t *rec = ts_load_json(path);
    cr_expect_str_eq(json_string_value(json_object_get(rec, "status")), "killed");
    json_decref(rec);
    int rc = ts_sh(out, sizeof out, "build/bin/mpx run --resume %s/run 2>&1", d);
    cr_expect_eq(rc, 0, "the undamaged checkpoint resumes: %s", out);
}

Test(resume, a_folder_without_a_checkpoint_is_refused, .timeout = 30)
{
    char *d = ts_tmpdir("resume-none"), out[4096];
    int rc = ts_sh(out, sizeof out, "build/bin/mpx run --resume %s 2>&1", d);
    cr_expect_eq(rc, 1);
    cr_expect(strstr(out, "no training state") != NULL, "%s", out);
}

Test(resume, a_truncated_state_is_refused, .timeout = 300)
{
    char *d = killed_run(), out[4096];
    cr_assert_eq(ts_sh(NULL, 0, "truncate -s 100 %s/run/train_state/state.bin", d), 0);
    int rc = ts_sh(out, sizeof out, "build/bin/mpx run --resume %s/run 2>&1", d);
    cr_expect_eq(rc, 1);
    cr_expect(strstr(out, "state.bin: 100 bytes") != NULL, "%s", out);
}

/* A crash between renaming the old checkpoint away and the new one in leaves only
 * train_state.old: resume takes it. */
Test(resume, a_crash_between_the_renames_resumes_from_the_old_folder, .timeout = 300)
{
    char *d = killed_run(), out[4096];
    cr_assert_eq(ts_sh(NULL, 0, "mv %s/run/train_state %s/run/train_state.old", d, d), 0);
    int rc = ts_sh(out, sizeof out, "build/bin/mpx run --resume %s/run 2>&1", d);
    cr_expect_eq(rc, 0, "%s", out);
}

/* mpx sweep: a cell killed after its checkpoint is resumed from it, not run again. */
Test(resume, a_sweep_resumes_its_killed_cell_from_the_checkpoint, .timeout = 90)
{
    char *d = ts_tmpdir("resume-sweep"), path[1024], out[8192];
    snprintf(path, sizeof path, "%s/s.cfg", d);
    char text[1024];
    snprintf(text, sizeof text, "base = \"%s/configs/toy.cfg\";\n"
             "axes = ( { key = \"run.seed\"; values = (1, 2); } );\n", getenv("PWD"));
    ts_write_file(path, text);
    const char *keys = "-s train.max_steps=20 -s train.checkpoint_every=10";
    cr_assert_eq(ts_sh(out, sizeof out, "build/bin/mpx sweep %s -s 'run.output_dir=\"%s/out\"' %s --dry-run", path, d, keys), 0);
    /* the first cell's folder, from the dry run's listing */
    char *dir = strstr(out, d);
    cr_assert_not_null(dir, "%s", out);
    char cell[512];
    cr_assert_eq(sscanf(dir, "%511s", cell), 1);
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "MPX_FAULT_AT_STEP=15 build/bin/mpx run configs/toy.cfg %s -s run.seed=1 --out %s >/dev/null 2>&1",
             keys, cell);
    cr_assert_neq(system(cmd), 0);
    cr_assert_eq(ts_sh(NULL, 0, "build/bin/mpx sweep %s -s 'run.output_dir=\"%s/out\"' %s >/dev/null 2>&1", path, d, keys), 0);
    snprintf(path, sizeof path, "%s/run.json", cell);
    json_t *rec = ts_load_json(path);
    cr_expect_str_eq(json_string_value(json_object_get(rec, "status")), "finished");
    json_t *res = json_array_get(json_object_get(rec, "resumed"), 0);
    cr_expect_eq(json_integer_value(json_object_get(res, "step")), 10, "resumed from the step-10 checkpoint");
    cr_expect_eq(json_array_size(json_object_get(json_object_get(rec, "metrics"), "losses")), 20);
    json_decref(rec);
}
