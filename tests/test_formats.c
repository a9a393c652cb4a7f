/* mpx/formats.h: parameter-built converters against ml_dtypes (tests/fixtures/formats,
 * made by make_fixture.py there): every code decoded, and a dense fp32 sweep encoded
 * (hashed per binade), for each of ml_dtypes' 8-, 6- and 4-bit formats; the saturating
 * mode against clip-then-convert; hand-derived values for what ml_dtypes lacks
 * (flushed subnormals, 2-byte storage); the OCP MX v1.0 shared-scale rule. */
#include <criterion/criterion.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mpx/formats.h"

#define FIXTURE "tests/fixtures/formats/formats.json"

static json_t *root;

static void load(void)
{
    json_error_t err;
    root = json_load_file(FIXTURE, 0, &err);
    cr_assert(root, "%s:%d: %s", FIXTURE, err.line, err.text);
}

static void unload(void) { json_decref(root); }

static mpx_format from_json(const char *name, json_t *rec)
{
    const char *sp = json_string_value(json_object_get(rec, "special"));
    mpx_format f = {
        .size = sizeof f, .name = name, .subnormals = 1, .storage_bytes = 1,
        .exp_bits = (uint8_t)json_integer_value(json_object_get(rec, "exp_bits")),
        .man_bits = (uint8_t)json_integer_value(json_object_get(rec, "man_bits")),
        .bias = (int16_t)json_integer_value(json_object_get(rec, "bias")),
        .special = strcmp(sp, "IEEE") == 0 ? MPX_FMT_IEEE : strcmp(sp, "FN") == 0 ? MPX_FMT_FN
                 : strcmp(sp, "FNUZ") == 0 ? MPX_FMT_FNUZ : MPX_FMT_FINITE,
    };
    cr_assert_null(mpx_fmt_invalid(&f), "%s: %s", name, mpx_fmt_invalid(&f));
    return f;
}

static uint32_t bits_of(float x) { uint32_t u; memcpy(&u, &x, 4); return u; }

Test(formats, every_code_decodes_as_ml_dtypes, .init = load, .fini = unload)
{
    const char *name;
    json_t *rec;
    int n_formats = 0;
    json_object_foreach(json_object_get(root, "formats"), name, rec) {
        mpx_format f = from_json(name, rec);
        json_t *dec = json_object_get(rec, "decode");
        size_t n = json_array_size(dec);
        cr_assert_eq(n, (size_t)1 << mpx_fmt_bits(&f), "%s: %zu codes in the fixture", name, n);
        for (size_t c = 0; c < n; c++) {
            uint32_t want = (uint32_t)strtoul(json_string_value(json_array_get(dec, c)), NULL, 16);
            uint32_t got = bits_of(mpx_fmt_decode(&f, (uint32_t)c));
            int want_nan = (want & 0x7fffffffu) > 0x7f800000u, got_nan = (got & 0x7fffffffu) > 0x7f800000u;
            if (want_nan || got_nan)
                cr_expect(want_nan && got_nan, "%s code 0x%02zx: ml_dtypes %08x, mpx %08x", name, c, want, got);
            else
                cr_expect_eq(got, want, "%s code 0x%02zx: ml_dtypes %08x, mpx %08x", name, c, want, got);
        }
        float mx = (float)json_real_value(json_object_get(rec, "max"));
        cr_expect_eq(mpx_fmt_max(&f), mx, "%s: largest finite %g, ml_dtypes %g", name, mpx_fmt_max(&f), mx);
        n_formats++;
    }
    cr_assert_eq(n_formats, 10);
}

/* The sweep of make_fixture.py, hashed per binade (top 9 bits) with FNV-1a 64. */
static void sweep(const mpx_format *f, int saturate, uint64_t hash[512])
{
    json_t *lows = json_object_get(root, "low_bits");
    size_t n_low = json_array_size(lows);
    uint32_t low[16];
    cr_assert(n_low > 0 && n_low <= 16, "the fixture's low_bits: %zu values, 1 to 16 expected", n_low);
    for (size_t j = 0; j < n_low; j++) low[j] = (uint32_t)json_integer_value(json_array_get(lows, j));
    for (uint32_t hi = 0; hi < (1u << 20); hi++) {
        uint64_t *h = &hash[hi >> 11];
        if ((hi & 0x7ffu) == 0) *h = 0xcbf29ce484222325ull;
        for (size_t j = 0; j < n_low; j++) {
            uint32_t u = (hi << 12) | low[j];
            float x;
            memcpy(&x, &u, 4);
            uint32_t c = saturate ? mpx_fmt_encode_sat(f, x) : mpx_fmt_encode(f, x);
            *h = (*h ^ c) * 0x100000001b3ull;
        }
    }
}

static int compare_sweep(const char *name, const char *key, json_t *want, const uint64_t got[512])
{
    cr_assert_eq(json_array_size(want), 512u, "%s %s: 512 binades expected", name, key);
    int bad = 0;
    for (size_t b = 0; b < 512; b++) {
        uint64_t w = strtoull(json_string_value(json_array_get(want, b)), NULL, 16);
        if (w != got[b] && bad++ < 4)
            cr_log_error("%s %s: fp32 inputs with top bits 0x%03zx (sign %zu, exponent %zu) convert "
                         "otherwise than ml_dtypes", name, key, b, b >> 8, b & 255);
    }
    return bad;
}

Test(formats, dense_sweep_encodes_as_ml_dtypes, .init = load, .fini = unload, .timeout = 60)
{
    const char *name;
    json_t *rec;
    int bad = 0, n = 0, n_sat = 0;
    static uint64_t h[512];
    json_object_foreach(json_object_get(root, "formats"), name, rec) {
        mpx_format f = from_json(name, rec);
        sweep(&f, 0, h);
        bad += compare_sweep(name, "sweep", json_object_get(rec, "sweep"), h);
        n++;
        json_t *sat = json_object_get(rec, "sweep_sat");
        if (sat) {
            sweep(&f, 1, h);
            bad += compare_sweep(name, "sweep_sat", sat, h);
            n_sat++;
        }
    }
    cr_assert_eq(bad, 0, "%d binades differ", bad);
    /* every format swept, and the saturating encoder on the fixture's (the two OCP fp8) */
    cr_expect(n == 10 && n_sat >= 2, "%d formats swept, %d saturating", n, n_sat);
}

/* Hand-derived: the OCP E4M3 and E5M2 corner values. */
Test(formats, ocp_fp8_corners)
{
    mpx_format e4 = MPX_FORMAT_FP8_E4M3, e5 = MPX_FORMAT_FP8_E5M2;
    cr_expect_eq(mpx_fmt_max(&e4), 448.0f);
    cr_expect_eq(mpx_fmt_max(&e5), 57344.0f);
    cr_expect_eq(mpx_fmt_decode(&e4, 0x01), 0x1p-9f);          /* smallest subnormal */
    cr_expect_eq(mpx_fmt_decode(&e5, 0x01), 0x1p-16f);
    cr_expect_eq(mpx_fmt_encode(&e4, 464.0f), 0x7eu);           /* tie to even: 448 */
    cr_expect_eq(mpx_fmt_encode(&e4, 465.0f), 0x7fu);           /* rounds past 448: NaN */
    cr_expect_eq(mpx_fmt_encode_sat(&e4, 465.0f), 0x7eu);
    cr_expect_eq(mpx_fmt_encode_sat(&e4, -INFINITY), 0xfeu);
    cr_expect_eq(mpx_fmt_encode(&e5, 61440.0f), 0x7cu);         /* tie at max + ulp/2: inf */
    cr_expect_eq(mpx_fmt_encode(&e4, 0x1p-10f), 0x00u);         /* half the smallest: even, 0 */
    cr_expect_eq(mpx_fmt_encode(&e4, 0x1.000002p-10f), 0x01u);
    cr_expect_eq(mpx_fmt_emax(&e4), 8);
    cr_expect_eq(mpx_fmt_emax(&e5), 15);
}

/* Without subnormals: a zero exponent field reads as zero and subnormal results flush. */
Test(formats, flushed_subnormals)
{
    mpx_format f = MPX_FORMAT_FP8_E4M3;
    f.subnormals = 0;
    cr_expect_eq(mpx_fmt_decode(&f, 0x07), 0.0f);
    cr_expect_eq(mpx_fmt_decode(&f, 0x08), 0x1p-6f);
    cr_expect_eq(mpx_fmt_encode(&f, 0x1p-7f), 0x00u);
    cr_expect_eq(mpx_fmt_encode(&f, -0x1.cp-7f), 0x80u);         /* 7 subnormal units: flushed */
    cr_expect_eq(mpx_fmt_encode(&f, 0x1.f8p-7f), 0x08u);       /* rounds up into the normals */
}

/* A 2-byte format with the same parameters as fp16 converts as IEEE fp16 does
 * (hand values: 65504 max, 2^-24 smallest subnormal, 65520 -> inf). */
Test(formats, two_byte_storage_e5m10)
{
    mpx_format f = MPX_FORMAT_PARAMS("e5m10", 5, 10, 15, MPX_FMT_IEEE);
    f.storage_bytes = 2;
    cr_assert_null(mpx_fmt_invalid(&f));
    cr_expect_eq(mpx_fmt_max(&f), 65504.0f);
    cr_expect_eq(mpx_fmt_decode(&f, 0x0001), 0x1p-24f);
    cr_expect_eq(mpx_fmt_encode(&f, 65520.0f), 0x7c00u);
    cr_expect_eq(mpx_fmt_encode(&f, 1.0f + 0x1p-11f), 0x3c00u);
    cr_expect_eq(mpx_fmt_encode(&f, 1.0f + 0x1.8p-11f), 0x3c01u);
}

Test(formats, invalid_parameters_are_named)
{
    mpx_format f = MPX_FORMAT_PARAMS("too-wide", 5, 3, 15, MPX_FMT_IEEE);
    cr_expect_str_eq(mpx_fmt_invalid(&f), "1 + exp_bits + man_bits exceeds the storage");
    f = (mpx_format)MPX_FORMAT_PARAMS("x", 4, 3, 7, MPX_FMT_FN);
    f.storage_bytes = 3;
    cr_expect_str_eq(mpx_fmt_invalid(&f), "storage_bytes must be 1 or 2");
}

/* OCP MX v1.0 section 6.3: X = floor(log2(amax)) - emax_elem as E8M0 (bias 127). */
Test(formats, mx_shared_scale_rule)
{
    cr_expect_eq(mpx_mx_scale_code(448.0f, 8), 127);            /* 2^8 / 2^8 */
    cr_expect_eq(mpx_mx_scale_code(511.0f, 8), 127);
    cr_expect_eq(mpx_mx_scale_code(512.0f, 8), 128);
    cr_expect_eq(mpx_mx_scale_code(1.0f, 8), 119);
    cr_expect_eq(mpx_mx_scale_code(0.75f, 15), 127 - 16);
    cr_expect_eq(mpx_mx_scale_code(0.0f, 8), 0);
    cr_expect_eq(mpx_mx_scale_code(NAN, 8), 0xff);
    cr_expect_eq(mpx_mx_scale_code(0x1p-140f, 2), 0);           /* clamped at 2^-127 */
    cr_expect_eq(mpx_mx_scale_code(0x1p-130f, 2), 0);           /* subnormal amax: floor(log2) = -130 */
    cr_expect_eq(mpx_mx_scale_code(0x1p-120f, 2), 5);
    cr_expect_eq(mpx_e8m0_decode(127), 1.0f);
    cr_expect_eq(mpx_e8m0_decode(130), 8.0f);
    cr_expect(isnan(mpx_e8m0_decode(0xff)));
}

/* ---- any bias: tests/fixtures/formats/params.json, from an exact reference with Python
 * fractions (make_params_fixture.py): 24 parameter sets, biases from -60 to 147, every
 * special-value encoding, subnormals on and off, 1- and 2-byte storage; every code
 * decoded, and every value, tie, tie +- 1 fp32 ulp, fp32 subnormal and overflow input
 * encoded. */

static json_t *params;

static void load_params(void)
{
    json_error_t err;
    params = json_load_file("tests/fixtures/formats/params.json", 0, &err);
    cr_assert(params, "params.json:%d: %s", err.line, err.text);
}

static void unload_params(void) { json_decref(params); }

static mpx_format params_format(const char *name, json_t *rec)
{
    const char *sp = json_string_value(json_object_get(rec, "special"));
    mpx_format f = {
        .size = sizeof f, .name = name,
        .exp_bits = (uint8_t)json_integer_value(json_object_get(rec, "exp_bits")),
        .man_bits = (uint8_t)json_integer_value(json_object_get(rec, "man_bits")),
        .bias = (int16_t)json_integer_value(json_object_get(rec, "bias")),
        .subnormals = (uint8_t)json_integer_value(json_object_get(rec, "subnormals")),
        .storage_bytes = (uint8_t)json_integer_value(json_object_get(rec, "storage_bytes")),
        .special = strcmp(sp, "IEEE") == 0 ? MPX_FMT_IEEE : strcmp(sp, "FN") == 0 ? MPX_FMT_FN
                 : strcmp(sp, "FNUZ") == 0 ? MPX_FMT_FNUZ : MPX_FMT_FINITE,
    };
    return f;
}

static uint32_t hex_at(const char *s, size_t at, size_t len)
{
    char buf[16];
    memcpy(buf, s + at, len);
    buf[len] = 0;
    return (uint32_t)strtoul(buf, NULL, 16);
}

Test(formats, any_bias_converts_as_the_exact_reference, .init = load_params, .fini = unload_params)
{
    const char *name;
    json_t *rec;
    int n_formats = 0, n_bias127 = 0;
    json_object_foreach(json_object_get(params, "formats"), name, rec) {
        mpx_format f = params_format(name, rec);
        cr_assert_null(mpx_fmt_invalid(&f), "%s: %s", name, mpx_fmt_invalid(&f));
        const char *dec = json_string_value(json_object_get(rec, "decode"));
        size_t n_codes = strlen(dec) / 8, bad = 0, bad_in = 0;
        cr_assert_eq(n_codes, (size_t)1 << mpx_fmt_bits(&f), "%s: %zu codes", name, n_codes);
        for (size_t c = 0; c < n_codes; c++) {
            uint32_t want = hex_at(dec, 8 * c, 8), got = bits_of(mpx_fmt_decode(&f, (uint32_t)c));
            int nan = (want & 0x7fffffffu) > 0x7f800000u;
            if (nan ? (got & 0x7fffffffu) <= 0x7f800000u : got != want) {
                if (bad++ < 4) cr_log_error("%s: code 0x%zx decodes to %08x, the reference %08x", name, c, got, want);
            }
        }
        const char *enc = json_string_value(json_object_get(rec, "encode"));
        size_t n_pairs = strlen(enc) / 12;
        for (size_t k = 0; k < n_pairs; k++) {
            uint32_t in = hex_at(enc, 12 * k, 8), want = hex_at(enc, 12 * k + 8, 4);
            float x;
            memcpy(&x, &in, 4);
            uint32_t got = mpx_fmt_encode(&f, x);
            if (got != want && bad_in++ < 8)
                cr_log_error("%s: %a (%08x) encodes to 0x%x, the reference 0x%x", name, (double)x, in, got, want);
        }
        cr_expect(bad == 0 && bad_in == 0, "%s: %zu of %zu codes and %zu of %zu inputs differ", name, bad, n_codes,
                  bad_in, n_pairs);
        n_formats++;
        n_bias127 += f.bias >= 127;
    }
    cr_assert_geq(n_formats, 20);
    cr_assert_geq(n_bias127, 8);
}

/* A range fp32 cannot hold is refused: a largest finite past 2^128, or a smallest step
 * below 2^-149 (decode would return garbage). */
Test(formats, ranges_past_fp32_are_refused, .init = load_params, .fini = unload_params)
{
    const char *name;
    json_t *rec;
    int n = 0;
    json_object_foreach(json_object_get(params, "refused"), name, rec) {
        mpx_format f = params_format(name, rec);
        const char *why = mpx_fmt_invalid(&f);
        cr_expect(why && strstr(why, "fp32"), "%s: %s", name, why ? why : "accepted");
        n++;
    }
    cr_assert_eq(n, 3);
}

/* Saturation is what the clamp alone decides: past the midpoint above the largest finite
 * value (on it when that tie rounds up). The oracle is the non-saturating encoder, itself
 * checked against ml_dtypes above: for IEEE and FN formats it gives the overflow code
 * exactly when the value does not round to a finite one. Every fp32 from the largest
 * finite to twice it, both signs, for E4M3 (FN: the tie at 464 rounds down to 448) and E5M2
 * (IEEE: the tie at 61440 rounds up). Hand values too, and E2M1 (FINITE). */
Test(formats, saturation_is_past_the_rounding_of_the_largest_value)
{
    static const mpx_format fmts[] = { MPX_FORMAT_FP8_E4M3, MPX_FORMAT_FP8_E5M2 };
    for (size_t k = 0; k < 2; k++) {
        const mpx_format *f = &fmts[k];
        float top = mpx_fmt_max(f);
        uint32_t lo = bits_of(top), hi = bits_of(2 * top), over = mpx_fmt_encode(f, INFINITY);
        size_t bad = 0;
        for (uint32_t u = lo; u <= hi; u++) {
            float x;
            memcpy(&x, &u, 4);
            for (int s = 0; s < 2; s++) {
                float v = s ? -x : x;
                int want = (mpx_fmt_encode(f, v) & 0x7fu) == (over & 0x7fu);
                if (mpx_fmt_saturates(f, v) != want && bad++ < 4)
                    cr_log_error("%s: %a: saturates %d, the encoder says %d", f->name, (double)v, !want, want);
            }
        }
        cr_expect_eq(bad, 0, "%s: %zu values", f->name, bad);
    }
    mpx_format e4 = MPX_FORMAT_FP8_E4M3, e5 = MPX_FORMAT_FP8_E5M2, e2 = MPX_FORMAT_FP4_E2M1;
    cr_expect(!mpx_fmt_saturates(&e4, 448.0f) && !mpx_fmt_saturates(&e4, 0x1.c00002p+8f) && !mpx_fmt_saturates(&e4, 464.0f));
    cr_expect(mpx_fmt_saturates(&e4, 0x1.d00002p+8f) && mpx_fmt_saturates(&e4, -500.0f) && mpx_fmt_saturates(&e4, INFINITY));
    cr_expect(!mpx_fmt_saturates(&e5, 0x1.dffffep+15f) && mpx_fmt_saturates(&e5, 61440.0f));
    cr_expect(!mpx_fmt_saturates(&e2, 6.99f) && mpx_fmt_saturates(&e2, 7.0f) && !mpx_fmt_saturates(&e2, NAN));
}
