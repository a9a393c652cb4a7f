/* A checkpoint proves itself before `mpx run --resume` touches anything (issue 46): a
 * table of refusals, each applied to a killed run folder with a checkpoint at step 10,
 * each refused with exit 1 and a message naming what differs, and each leaving the run
 * folder byte for byte (links included) as the damage left it: run.json still `killed`,
 * metrics.csv with its rows, the checkpoint as it was. The damage covers another -s on
 * every kind of key, a truncated, extended, missing, linked, bit-flipped, zeroed or
 * reordered state.bin (weights and momentum swapped), a state.json of another version,
 * format, step, seed, policy or plugin version (edited with and without its own
 * checksum recomputed; the forgeries recompute it with coreutils' sha256sum, not mpx's
 * code), the checkpoint's other files edited or linked, another run's checkpoint dropped
 * into the folder (another policy, another seed), and a run.json that is a link or
 * unreadable. Then the undamaged folder resumes and finishes. A second test changes the
 * training data between the kill and the resume. Run against the build before this
 * (commit 6eca5c9), 19 of the 42 resumed and finished with no warning: among them the
 * flipped bit, the swap, the zeroed state, step = total, the linked files, the edited
 * metrics.csv and config.cfg, and the bf16-master and seed-43 checkpoints. mpx.lock is
 * left out of the comparison: it holds the pid of whoever last held the folder. */
#include <criterion/criterion.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "support/shell.h"

#define TOY_STEPS "-s train.max_steps=20 -s train.checkpoint_every=10"
#define TOY "configs/toy.cfg " TOY_STEPS

/* A killed toy run in $D/NAME (a checkpoint at step 10), with extra -s. */
static void kill_run(const char *d, const char *name, const char *extra)
{
    int rc = ts_sh(NULL, 0, "MPX_FAULT_AT_STEP=10 build/bin/mpx run " TOY " %s --out %s/%s >%s/%s.log 2>&1", extra, d,
                   name, d, name);
    cr_assert_neq(rc, 0, "the fault hook did not stop %s", name);
    cr_assert_eq(ts_sh(NULL, 0, "test -s %s/%s/train_state/state.json", d, name), 0, "no checkpoint in %s/%s", d, name);
}

/* ---- damage done in C: bits, buffers, and forgeries with a recomputed checksum ---------- */

static char *state_path(const char *d, const char *file)
{
    static char p[600];
    snprintf(p, sizeof p, "%s/run/train_state/%s", d, file);
    return p;
}

/* The byte range of buffer `name` in state.bin, from state.json's table. */
static void buffer_range(const char *d, const char *name, long *off, long *bytes)
{
    json_t *st = ts_load_json(state_path(d, "state.json")), *b;
    size_t i;
    *off = *bytes = -1;
    json_array_foreach(json_object_get(st, "buffers"), i, b) {
        if (strcmp(json_string_value(json_object_get(b, "name")), name)) continue;
        *off = (long)json_integer_value(json_object_get(b, "offset"));
        *bytes = (long)json_integer_value(json_object_get(b, "bytes"));
    }
    json_decref(st);
    cr_assert(*off >= 0 && *bytes > 0, "no buffer %s in the checkpoint", name);
}

static void rewrite_bin(const char *d, void (*edit)(unsigned char *, size_t, const char *), const char *dd)
{
    size_t n;
    unsigned char *b = (unsigned char *)ts_slurp(state_path(d, "state.bin"), &n);
    edit(b, n, dd);
    FILE *f = fopen(state_path(d, "state.bin"), "wb");
    cr_assert(f && fwrite(b, 1, n, f) == n && fclose(f) == 0);
    free(b);
}

static void flip(unsigned char *b, size_t n, const char *d)
{
    long off, bytes;
    buffer_range(d, "weights", &off, &bytes);
    cr_assert((size_t)(off + bytes) <= n);
    b[off + 4 * 7 + 1] ^= 0x01;   /* weight 7's mantissa, bit 8: one ulp-scale change */
}

static void swap_buffers(unsigned char *b, size_t n, const char *d)
{
    long wo, wb, mo, mb;
    buffer_range(d, "weights", &wo, &wb);
    buffer_range(d, "opt_state0", &mo, &mb);
    cr_assert(wb == mb && (size_t)(wo + wb) <= n && (size_t)(mo + mb) <= n);
    for (long i = 0; i < wb; i++) {
        unsigned char t = b[wo + i];
        b[wo + i] = b[mo + i];
        b[mo + i] = t;
    }
}

static void zero_all(unsigned char *b, size_t n, const char *d) { (void)d; memset(b, 0, n); }

static void flip_bit(const char *d) { rewrite_bin(d, flip, d); }
static void swap_weights_and_momentum(const char *d) { rewrite_bin(d, swap_buffers, d); }
static void zero_state(const char *d) { rewrite_bin(d, zero_all, d); }

/* state.json edited by `edit`, then (when `resum`) its state_sha256 recomputed as
 * train_state.h defines it: sha256 of the object without that key, compact, keys sorted,
 * ASCII. */
static void edit_state(const char *d, void (*edit)(json_t *), int resum)
{
    char *path = state_path(d, "state.json"), tmp[700], out[256];
    json_t *st = ts_load_json(path);
    edit(st);
    if (resum) {
        json_object_del(st, "state_sha256");
        snprintf(tmp, sizeof tmp, "%s/canonical.json", d);
        char *text = json_dumps(st, JSON_COMPACT | JSON_SORT_KEYS | JSON_ENSURE_ASCII);
        ts_write_file(tmp, text);
        free(text);
        cr_assert_eq(ts_sh(out, sizeof out, "sha256sum < %s | cut -c1-64", tmp), 0);
        out[64] = 0;
        json_object_set_new(st, "state_sha256", json_string(out));
        cr_assert_eq(ts_sh(NULL, 0, "rm %s", tmp), 0);
    }
    cr_assert_eq(json_dump_file(st, state_path(d, "state.json"), JSON_INDENT(1) | JSON_SORT_KEYS), 0);
    json_decref(st);
}

static void step_to_total(json_t *st) { json_object_set(st, "step", json_object_get(st, "total_steps")); }
static void seed_99(json_t *st) { json_object_set_new(st, "seed", json_integer(99)); }
static void policy_master(json_t *st) { json_object_set_new(json_object_get(st, "policy"), "master", json_string("bf16")); }
static void plugin_version(json_t *st)
{
    json_object_set_new(json_object_get(json_object_get(st, "plugins"), "optimizer"), "version", json_string("0.0.1"));
}
static void config_sum(json_t *st) { json_object_set_new(st, "config_sha256", json_string("0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef")); }
static void bin_sum(json_t *st)
{
    json_object_set_new(json_object_get(st, "files"), "state.bin",
                        json_string("0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"));
}
static void no_files(json_t *st) { json_object_del(st, "files"); }
static void buffer_dtype(json_t *st)
{
    json_object_set_new(json_array_get(json_object_get(st, "buffers"), 0), "dtype", json_string("bf16"));
}

static void forge_step_total(const char *d) { edit_state(d, step_to_total, 1); }
static void edit_step_total(const char *d) { edit_state(d, step_to_total, 0); }
static void forge_seed(const char *d) { edit_state(d, seed_99, 1); }
static void forge_policy(const char *d) { edit_state(d, policy_master, 1); }
static void forge_plugin(const char *d) { edit_state(d, plugin_version, 1); }
static void forge_config_sum(const char *d) { edit_state(d, config_sum, 1); }
static void forge_bin_sum(const char *d) { edit_state(d, bin_sum, 1); }
static void forge_no_files(const char *d) { edit_state(d, no_files, 1); }
static void forge_buffer_dtype(const char *d) { edit_state(d, buffer_dtype, 1); }

/* ---- the table ------------------------------------------------------------------------ */

typedef struct refusal {
    const char *what;
    const char *setup;   /* shell, $D the test folder (the run is $D/run); NULL: none */
    void (*damage)(const char *d);
    const char *args;    /* before --resume $D/run ("" = the checkpoint's configuration) */
    const char *needle;  /* in the message */
} refusal;

#define TS "$D/run/train_state"
static const refusal cases[] = {
    /* another configuration: every kind of key */
    { "another lr", NULL, NULL, TOY " -s optimizer.lr=0.01", "differs at optimizer.lr" },
    { "another seed", NULL, NULL, TOY " -s run.seed=99", "differs at run.seed" },
    { "another batch", NULL, NULL, TOY " -s train.batch_size=16", "differs at train.batch_size" },
    { "another clipping", NULL, NULL, TOY " -s train.gradient_clipping=0.5", "differs at train.gradient_clipping" },
    { "another momentum", NULL, NULL, TOY " -s optimizer.sgd.momentum=0.5", "differs at optimizer.sgd.momentum" },
    { "another policy", NULL, NULL, TOY " -s precision.plugin=\\\"bf16-master\\\"", "differs at precision.plugin" },
    { "another optimizer", NULL, NULL, TOY " -s optimizer.plugin=\\\"adam\\\"", "differs at optimizer.plugin" },
    { "another step count", NULL, NULL, "configs/toy.cfg -s train.max_steps=30 -s train.checkpoint_every=10",
      "differs at train.max_steps" },
    { "another data size", NULL, NULL, TOY " -s data.toy.examples=1024", "differs at data.toy.examples" },
    { "another sequence", NULL, NULL, TOY " -s data.toy.seq_len=16", "differs at data.toy.seq_len" },
    { "another model", NULL, NULL, TOY " -s model.toy.hidden=32", "differs at model.toy.hidden" },
    { "another epoch count", NULL, NULL, TOY " -s train.epochs=10", "differs at train.epochs" },
    { "another log interval", NULL, NULL, TOY " -s train.log_every=8", "differs at train.log_every" },
    { "another config file", NULL, NULL, "configs/tiny_squad.cfg -s train.checkpoint_every=10", "another configuration" },
    /* state.bin */
    { "state.bin truncated", "truncate -s -4 " TS "/state.bin", NULL, "", "(truncated?)" },
    { "state.bin extended", "printf x >> " TS "/state.bin", NULL, "", "(truncated?)" },
    { "state.bin missing", "rm " TS "/state.bin", NULL, "", "state.bin: No such file" },
    { "state.bin a link", "mv " TS "/state.bin $D/elsewhere.bin && ln -s $D/elsewhere.bin " TS "/state.bin", NULL, "",
      "state.bin: not a regular file" },
    { "one flipped bit", NULL, flip_bit, "", "state.bin does not match its checksum" },
    { "weights and momentum swapped", NULL, swap_weights_and_momentum, "", "state.bin does not match its checksum" },
    { "state zeroed", NULL, zero_state, "", "state.bin does not match its checksum" },
    /* state.json */
    { "another version", "sed -i 's/^ \"version\": [0-9]*/ \"version\": 99/' " TS "/state.json", NULL, "",
      "not an mpx training state of version" },
    { "another format", "sed -i 's/mpx-train-state/other-state/' " TS "/state.json", NULL, "",
      "not an mpx training state of version" },
    { "state.json cut short", "head -c 200 " TS "/state.json > $D/s && cat $D/s > " TS "/state.json", NULL, "",
      "state.json:" },
    { "state.json a link", "mv " TS "/state.json $D/s.json && ln -s $D/s.json " TS "/state.json", NULL, "",
      "state.json: not a regular file" },
    { "step = total, edited", NULL, edit_step_total, "", "does not match its own checksum" },
    { "step = total, forged", NULL, forge_step_total, "", "step 20 of 20" },
    { "another seed, forged", NULL, forge_seed, "", "not a checkpoint of this run" },
    { "another policy, forged", NULL, forge_policy, "", "another precision policy (it differs at policy.master)" },
    { "another plugin version, forged", NULL, forge_plugin, "", "other plugins (they differ at plugins.optimizer.version)" },
    { "config checksum, forged", NULL, forge_config_sum, "", "config does not match config_sha256" },
    { "state.bin checksum, forged", NULL, forge_bin_sum, "", "state.bin does not match its checksum" },
    { "no checksums, forged", NULL, forge_no_files, "", "incomplete (files)" },
    { "another buffer dtype, forged", NULL, forge_buffer_dtype, "", "(truncated?)" },
    /* the checkpoint's other files */
    { "metrics.csv edited", "echo 11,0,0,0,0,0 >> " TS "/metrics.csv", NULL, "", "metrics.csv does not match its checksum" },
    { "config.cfg edited", "echo '# edited' >> " TS "/config.cfg", NULL, TOY, "config.cfg does not match its checksum" },
    { "config.cfg a link", "mv " TS "/config.cfg $D/c.cfg && ln -s $D/c.cfg " TS "/config.cfg", NULL, TOY,
      "config.cfg is not a regular file" },
    /* another run's checkpoint dropped in */
    { "a bf16-master run's checkpoint", "rm -r " TS " && cp -a $D/bf16/train_state " TS, NULL, "",
      "not of the run in" },
    { "another seed's checkpoint", "rm -r " TS " && cp -a $D/seed43/train_state " TS, NULL, "",
      "differs from" },
    { "the old folder, damaged", "mv " TS " " TS ".old && truncate -s -1 " TS ".old/state.bin", NULL, "",
      "(truncated?)" },
    /* the record */
    { "run.json a link", "mv $D/run/run.json $D/r.json && ln -s $D/r.json $D/run/run.json", NULL, "",
      "run.json is a symbolic link" },
    { "run.json unreadable", "head -c 50 $D/run/run.json > $D/r && cat $D/r > $D/run/run.json", NULL, "",
      "cannot tell whose run this is" },
};

Test(resume_refusals, every_refusal_names_the_cause_and_changes_nothing, .timeout = 600)
{
    char *d = ts_tmpdir("refusals"), out[8192];
    kill_run(d, "run", "");
    kill_run(d, "bf16", "-s 'precision.plugin=\"bf16-master\"'");
    kill_run(d, "seed43", "-s run.seed=43");
    cr_assert_eq(ts_sh(NULL, 0, "cp -a %s/run %s/pristine", d, d), 0);
    size_t n = sizeof cases / sizeof *cases;
    cr_expect_geq(n, 37);
    for (size_t k = 0; k < n; k++) {
        const refusal *c = &cases[k];
        cr_assert_eq(ts_sh(NULL, 0, "rm -rf %s/run %s/before && cp -a %s/pristine %s/run", d, d, d, d), 0);
        if (c->setup) cr_assert_eq(ts_sh(NULL, 0, "D=%s; %s", d, c->setup), 0, "%s: setup", c->what);
        if (c->damage) c->damage(d);
        /* the folder as the refusal must leave it, damage and all */
        cr_assert_eq(ts_sh(NULL, 0, "cp -a %s/run %s/before", d, d), 0);
        int rc = ts_sh(out, sizeof out, "D=%s; build/bin/mpx run %s --resume $D/run 2>&1", d, c->args);
        cr_expect_eq(rc, 1, "%s: exit %d: %s", c->what, rc, out);
        cr_expect(strstr(out, c->needle) != NULL, "%s: the message does not say \"%s\": %s", c->what, c->needle, out);
        cr_expect(strstr(out, "nothing in") || strstr(out, "nothing was changed"),
                  "%s: the message does not say nothing changed: %s", c->what, out);
        int same = ts_sh(out, sizeof out, "diff -r --no-dereference -x mpx.lock %s/before %s/run 2>&1", d, d);
        cr_expect_eq(same, 0, "%s: the run folder changed: %s", c->what, out);
    }
    /* the undamaged folder resumes, and the record says so */
    cr_assert_eq(ts_sh(NULL, 0, "rm -rf %s/run && cp -a %s/pristine %s/run", d, d, d), 0);
    int rc = ts_sh(out, sizeof out, "build/bin/mpx run --resume %s/run 2>&1", d);
    cr_expect_eq(rc, 0, "the undamaged checkpoint resumes: %s", out);
    snprintf(out, sizeof out, "%s/run/run.json", d);
    json_t *rec = ts_load_json(out);
    cr_expect_str_eq(json_string_value(json_object_get(rec, "status")), "finished");
    json_decref(rec);
}

/* The training data changed between the kill and the resume: refused, naming the file. */
Test(resume_refusals, changed_training_data_is_refused, .timeout = 300)
{
    char *d = ts_tmpdir("refusals-data"), out[8192];
    cr_assert_eq(ts_sh(NULL, 0, "cp datasets/data/train-v1.1.json %s/train.json", d), 0);
    int rc = ts_sh(NULL, 0, "MPX_FAULT_AT_STEP=10 build/bin/mpx run configs/tiny_squad.cfg -s train.max_steps=20 "
                   "-s train.checkpoint_every=10 -s 'data.squad.train_file=\"%s/train.json\"' --out %s/run >%s/run.log 2>&1",
                   d, d, d);
    cr_assert_neq(rc, 0, "the fault hook did not stop the run (%s/run.log)", d);
    /* one character more in the first question of the training file */
    cr_assert_eq(ts_sh(NULL, 0, "sed -i '0,/\"question\": \"/s//\"question\": \"x/' %s/train.json && "
                       "! cmp -s datasets/data/train-v1.1.json %s/train.json && cp -a %s/run %s/before", d, d, d, d), 0);
    rc = ts_sh(out, sizeof out, "build/bin/mpx run --resume %s/run 2>&1", d);
    cr_expect_eq(rc, 1, "%s", out);
    cr_expect(strstr(out, "train.json changed since the checkpoint") != NULL, "%s", out);
    cr_expect_eq(ts_sh(out, sizeof out, "diff -r --no-dereference -x mpx.lock %s/before %s/run 2>&1", d, d), 0, "changed: %s", out);
    /* the data as it was: the run goes on */
    cr_assert_eq(ts_sh(NULL, 0, "cp datasets/data/train-v1.1.json %s/train.json", d), 0);
    rc = ts_sh(out, sizeof out, "build/bin/mpx run --resume %s/run 2>&1", d);
    cr_expect_eq(rc, 0, "%s", out);
}
