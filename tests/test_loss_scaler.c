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
