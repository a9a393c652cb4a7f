/* The loss scaler's state machine against overflow sequences traced by hand from the
 * reference code of each path (REFERENCE: torch GradScaler.update, DeepSpeed
 * FP16_Optimizer._update_scale, DeepSpeed DynamicLossScaler.update_scale). Windows are
 * shortened to 3 through the same override a user has (precision.loss_scale_window). */
#include <criterion/criterion.h>
#include <string.h>

#include "../core/config/core_schema.h"
#include "../core/engine/loss_scaler.h"
#include "../core/engine/settings.h"

static mpx_config *cfg_with(const char *const *overrides, size_t n)
{
    mpx_config *c = NULL;
    char err[4096];
    cr_assert_eq(mpx_config_load(&c, NULL, overrides, n, mpx_core_groups, mpx_n_core_groups, NULL, err, sizeof err), 0,
                 "%s", err);
    return c;
}

/* Feeds `seq` ('C' clean, 'O' overflow) and checks the scale after each step and the skips. */
static void trace(const char *preset, const char *const *ov, size_t n_ov, const char *seq, const double *want)
{
    mpx_config *c = cfg_with(ov, n_ov);
    mpx_loss_scaler ls;
    mpx_scaler_keys keys;
    mpx_scaler_keys_read(c, &keys);
    char err[512];
    cr_assert_eq(mpx_scaler_init(&ls, preset, &keys, err, sizeof err), 0, "%s", err);
    for (size_t i = 0; seq[i]; i++) {
        int skip = -1, overflow = seq[i] == 'O';
        cr_assert_eq(mpx_scaler_update(&ls, overflow, (int64_t)i, &skip, err, sizeof err), 0, "%s step %zu: %s", preset, i, err);
        cr_expect_eq(skip, overflow, "%s step %zu", preset, i);
        cr_expect_eq(ls.scale, want[i], "%s: after step %zu (%c) scale %g, traced %g", preset, i, seq[i], ls.scale, want[i]);
    }
    mpx_config_free(c);
}

static const char *const window3[] = { "precision.loss_scale_window=3" };

Test(loss_scaler, pytorch_grows_after_window_clean_steps_and_halves_on_overflow)
{
    mpx_loss_scaler ls;
    char err[256];
    cr_assert_eq(mpx_scaler_init(&ls, "pytorch", NULL, err, sizeof err), 0);
    cr_expect_eq(ls.scale, 65536.0);
    cr_expect_eq(ls.window, 2000);
    const double want[] = { 65536, 65536, 131072, 65536, 65536, 65536, 131072, 65536, 32768, 32768 };
    trace("pytorch", window3, 1, "CCCOCCCOOC", want);
}

Test(loss_scaler, deepspeed_fp16_optimizer_counts_the_window_after_the_overflow)
{
    mpx_loss_scaler ls;
    char err[256];
    cr_assert_eq(mpx_scaler_init(&ls, "deepspeed-fp16-optimizer", NULL, err, sizeof err), 0);
    cr_expect_eq(ls.scale, 65536.0);
    cr_expect_eq(ls.window, 1000);
    cr_expect_eq(ls.min_scale, 1.0);
    /* growth when (iter - last_overflow - 1) is a positive multiple of 3 */
    const double want[] = { 65536, 65536, 65536, 131072, 65536, 65536, 65536, 65536, 131072 };
    trace("deepspeed-fp16-optimizer", window3, 1, "CCCCOCCCC", want);
}

Test(loss_scaler, deepspeed_fp16_optimizer_never_stops_at_the_minimum)
{
    const char *const ov[] = { "precision.initial_scale_power=1", "precision.loss_scale_window=3" };
    const double want[] = { 1, 1, 1, 1 };
    trace("deepspeed-fp16-optimizer", ov, 2, "OOOO", want);
}

Test(loss_scaler, deepspeed_zero_keys_has_hysteresis_two)
{
    mpx_loss_scaler ls;
    char err[256];
    cr_assert_eq(mpx_scaler_init(&ls, "deepspeed-zero-keys", NULL, err, sizeof err), 0);
    cr_expect_eq(ls.scale, 65536.0);
    cr_expect_eq(ls.hysteresis, 2);
    /* first overflow spends the hysteresis, the second halves; growth at (iter - last) % 3 == 0
     * restores the hysteresis */
    const double want[] = { 65536, 32768, 32768, 32768, 65536, 65536, 32768 };
    trace("deepspeed-zero-keys", window3, 1, "OOCCCOO", want);
}

Test(loss_scaler, deepspeed_zero_defaults_and_stop_at_the_minimum)
{
    mpx_loss_scaler ls;
    char err[512];
    cr_assert_eq(mpx_scaler_init(&ls, "deepspeed-zero", NULL, err, sizeof err), 0);
    cr_expect_eq(ls.scale, 4294967296.0);
    cr_expect_eq(ls.hysteresis, 1);
    const char *const ov[] = { "precision.initial_scale_power=1" };
    mpx_config *c = cfg_with(ov, 1);
    mpx_scaler_keys keys;
    mpx_scaler_keys_read(c, &keys);
    cr_assert_eq(mpx_scaler_init(&ls, "deepspeed-zero", &keys, err, sizeof err), 0);
    int skip;
    cr_assert_eq(mpx_scaler_update(&ls, 1, 41, &skip, err, sizeof err), 0);
    cr_expect_eq(ls.scale, 1.0);
    cr_expect_neq(mpx_scaler_update(&ls, 1, 42, &skip, err, sizeof err), 0);
    cr_expect(strstr(err, "step 42") && strstr(err, "minimum"), "%s", err);
    mpx_config_free(c);
}

Test(loss_scaler, static_and_none_keep_their_scale_and_skip_overflows)
{
    const char *const ov[] = { "precision.static_loss_scale=128" };
    const double want128[] = { 128, 128, 128 };
    trace("static", ov, 1, "COC", want128);
    const double want1[] = { 1, 1 };
    trace("none", NULL, 0, "OC", want1);
}

/* The scales and skips a preset gives, from a fresh scaler each, over two sequences: a few
 * overflows among clean steps (hysteresis, growth under a short window), and 40 overflows
 * (every floor reached; -1 where an overflow at the minimum stops the run). */
static size_t run_states(const char *preset, const mpx_scaler_keys *k, double *scale, int *skip)
{
    static const char *const seqs[] = { "OCCCCCOOCCCCCCCOOOC", "OOOOOOOOOOOOOOOOOOOOOOOOOOOOOOOOOOOOOOOO" };
    size_t i = 0;
    for (size_t q = 0; q < 2; q++) {
        mpx_loss_scaler ls;
        char err[512];
        cr_assert_eq(mpx_scaler_init(&ls, preset, k, err, sizeof err), 0, "%s: %s", preset, err);
        scale[i] = ls.scale;
        skip[i++] = 0;
        for (size_t t = 0; seqs[q][t]; t++, i++) {
            int s = -1;
            if (mpx_scaler_update(&ls, seqs[q][t] == 'O', (int64_t)t, &s, err, sizeof err)) {
                scale[i] = -1;
                skip[i++] = -1;
                break;
            }
            scale[i] = ls.scale;
            skip[i] = s;
        }
    }
    return i;
}

/* Which loss-scale keys act under which preset, found by running the state machine with
 * and without each key (every preset x every key: the behaviour is the reference), and
 * what mpx_scaler_idle_keys reports (mpx check's warning, a run's note): a key is reported
 * exactly when it changes nothing. */
Test(loss_scaler, idle_keys_are_exactly_those_that_change_nothing)
{
    static const char *const presets[] = { "none", "static", "pytorch", "deepspeed-fp16-optimizer", "deepspeed-zero",
                                           "deepspeed-zero-keys" };
    static const char *const names[] = { "initial_scale_power", "loss_scale_window", "hysteresis", "min_loss_scale",
                                         "static_loss_scale" };
    const mpx_scaler_keys base = { .power = -1, .window = 0, .hysteresis = 0, .min_scale = 0, .static_scale = 1 };
    int acted = 0, idle_seen = 0;
    for (size_t p = 0; p < sizeof presets / sizeof *presets; p++)
        for (size_t k = 0; k < sizeof names / sizeof *names; k++) {
            mpx_scaler_keys set = base;
            if (k == 0) set.power = 3;
            if (k == 1) set.window = 2;
            if (k == 2) set.hysteresis = 3;
            if (k == 3) set.min_scale = 4096;
            if (k == 4) set.static_scale = 8;
            double s0[128], s1[128];
            int k0[128], k1[128];
            size_t n0 = run_states(presets[p], &base, s0, k0), n1 = run_states(presets[p], &set, s1, k1);
            int same = n0 == n1 && !memcmp(s0, s1, n0 * sizeof *s0) && !memcmp(k0, k1, n0 * sizeof *k0);
            char out[8][240], want[64];
            size_t n = mpx_scaler_idle_keys(presets[p], &set, out[0], 8, sizeof out[0]);
            snprintf(want, sizeof want, "precision.%s = ", names[k]);
            int reported = n == 1 && !strncmp(out[0], want, strlen(want)) && strstr(out[0], "never acts");
            cr_expect(same ? reported : n == 0, "%s, precision.%s: it %s, and %zu key(s) were reported idle%s%s",
                      presets[p], names[k], same ? "changes nothing" : "acts", n, n ? ": " : "", n ? out[0] : "");
            acted += !same;
            idle_seen += same;
        }
    cr_expect(acted > 0 && idle_seen > 0, "the enumeration saw %d acting and %d idle", acted, idle_seen);
}
