/* The `cpu` compute backend: descriptor, instance (threads, pool, workspaces), memory
 * ops and the op table. The ops themselves live in one file per group:
 *   cpu_elementwise.c  cast, add, axpby, scale, gelu, dropout, apply_update
 *   cpu_gemm.c         gemm (OpenBLAS sgemm on fp32-widened inputs)
 *   cpu_rows.c         bias_add/grad, layernorm, cross_entropy
 *   cpu_rows_softmax.c softmax (and fused with dropout)
 *   cpu_attention.c    the attention core in one op, a head per thread (ABI 1.11)
 *   cpu_misc.c         embeddings, sum_squares, count_nonfinite
 *   cpu_vecmath.c      vectorised Philox, Phi and exp used by those
 * See cpu_internal.h for which results depend on the thread count (only GEMM's, through
 * OpenBLAS). */
#define _GNU_SOURCE
#include "cpu_internal.h"

#include <cblas.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define CPU_MAX_THREADS 1024

static const mpx_option cpu_options[] = {
    { .key = "threads", .type = MPX_OPT_INT, .def = "0", .min = 0, .max = CPU_MAX_THREADS,
      .help = "threads of the backend's pool, which runs its GEMMs and ops (OpenBLAS runs single-threaded inside it); 0 = all available cores" },
    { .key = "fp8_accumulate", .type = MPX_OPT_CHOICE, .def = "\"fp32\"", .choices = "fp32|h100|h100-fast",
      .help = "accumulation of GEMMs on fp8 inputs: fp32 (OpenBLAS); h100: an H100's tensor cores as mmaemu 0.1.0 "
              "models them (32-product blocks truncated to 13 bits, chains restarted every 128 of K and added in fp32: "
              "torch._scaled_mm's default); h100-fast: one chain over K (use_fast_accum); single-threaded" },
    { .key = "attention_gemm", .type = MPX_OPT_CHOICE, .def = "\"mpx\"", .choices = "mpx|mpx-avx2|openblas",
      .help = "the batched attention GEMMs (head size <= 64 as K or N): mpx = the backend's AVX-512/AVX2 kernel, one "
              "fp32 FMA chain per element in K order (the same bits on either ISA; OpenBLAS on CPUs with neither); "
              "mpx-avx2 = the AVX2 kernel even where AVX-512 exists (to check that the two agree); openblas = cblas_sgemm, as before version 1.1.0 of this backend (other bits)" },
    { .key = "linear_gemm", .type = MPX_OPT_CHOICE, .def = "\"mpx\"", .choices = "mpx|mpx-avx2|openblas",
      .help = "every other GEMM (the linear layers: forward, input and weight gradients): mpx = the backend's packed, "
              "blocked AVX-512/AVX2 kernel with the attention kernel's contract, one fp32 FMA chain per element in K "
              "order (the same bits on either ISA and any thread count; OpenBLAS on CPUs with neither); mpx-avx2 = the "
              "AVX2 kernel even where AVX-512 exists; openblas = cblas_sgemm, as before version 1.3.0 of this backend "
              "(other bits; its speed depends on the kernels OpenBLAS picks for the CPU)" },
    { .key = "bf16_gemm", .type = MPX_OPT_CHOICE, .def = "\"fma\"", .choices = "fma|amx|auto",
      .help = "GEMMs on two bf16 operands (compute bf16, or fp32 on bf16 operands; and the 8-bit GEMMs' products), "
              "from version 1.5.0 of this backend: fma = the fp32 FMA kernels of linear_gemm and attention_gemm; amx = "
              "the CPU's AMX-BF16 tiles (the same products, accumulated in fp32 in the unit's order: other bits than "
              "fma's; subnormal inputs, products and results read or written as zero), refused where the CPU or the "
              "OS has none; auto = amx where available, else fma. Default fma: protocol A's census (subnormal_census) "
              "found subnormal inputs in bf16 GEMMs (docs/SPEED.md). run.json's backend line says which ran" },
    { .key = "subnormal_census", .type = MPX_OPT_BOOL, .def = "false", .min = 1, .max = 0,
      .help = "count, in every GEMM the AMX path would take (two bf16 operands, or an 8-bit GEMM's quantised "
              "operands), the subnormal inputs and fp32 results (the values the AMX unit would read or write as zero); "
              "those GEMMs then take the fma path, and the counts are printed as a note when the run ends" },
};

static int available_cores(void)
{
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) == 0 && CPU_COUNT(&set) > 0) return CPU_COUNT(&set);
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (int)n : 1;
}

/* ---- instance ---- */

static void cpu_destroy(void *vbe)
{
    cpu_be *be = vbe;
    if (!be) return;
    if (be->census && be->env)
        be->env->host->note(be->env,
                            "subnormal census: %zu GEMMs the AMX path would take (bf16 and 8-bit); subnormal inputs "
                            "%zu of %zu, subnormal fp32 results %zu of %zu",
                            be->census_n[4], be->census_n[0], be->census_n[1], be->census_n[2], be->census_n[3]);
    cpu_pool_destroy(be->pool);
    free(be->amx_ws);
    for (int i = 0; i < CPU_WS_SLOTS; i++) free(be->ws[i]);
    for (int i = 0; be->lin_ws && i <= be->threads; i++) free(be->lin_ws[i]);
    free(be->lin_ws);
    free(be->lin_ws_bytes);
    free((void *)be->lin_taken);
    for (int i = 0; be->scr && i < be->threads; i++) free(be->scr[i]);
    free(be->scr);
    free(be->scr_bytes);
    free((void *)be->scr_taken);
    for (int i = 0; i < MPX_FORMAT_END - MPX_FORMAT_FIRST; i++) free(be->lut[i]);
    free(be);
}

static int cpu_create(mpx_env *env, void **out)
{
    int64_t threads = 0;
    MPX_TRY(env->host->opt_int(env, "threads", &threads));
    if (threads < 0 || threads > CPU_MAX_THREADS)
        return MPX_FAIL(env, "backend.cpu.threads = %lld: must be in [0, %d]", (long long)threads,
                        CPU_MAX_THREADS);
    cpu_be *be = calloc(1, sizeof *be);
    if (!be) {
        (void)MPX_FAIL(env, "out of memory creating the cpu backend");
        return MPX_ERR_NOMEM;
    }
    be->env = env;
    be->threads = threads ? (int)threads : available_cores();
    const char *acc = "fp32";
    if (env->host->opt_string(env, "fp8_accumulate", &acc) != MPX_OK) { cpu_destroy(be); return MPX_ERR; }
    be->fp8_acc = !strcmp(acc, "h100") ? CPU_FP8_ACC_H100 : !strcmp(acc, "h100-fast") ? CPU_FP8_ACC_H100_FAST
                                                                                     : CPU_FP8_ACC_FP32;
    be->has_f16c = cpu_detect_f16c();
    be->has_avx2_fma = cpu_detect_avx2_fma();
    be->has_avx2 = cpu_detect_avx2();
    be->has_avx512 = cpu_detect_avx512();
    const char *attn = "mpx";
    if (env->host->opt_string(env, "attention_gemm", &attn) != MPX_OK) { cpu_destroy(be); return MPX_ERR; }
    be->small_gemm = !strcmp(attn, "openblas") ? 0 : cpu_small_gemm_level();
    if (!strcmp(attn, "mpx-avx2") && be->small_gemm > 1) be->small_gemm = 1;
    const char *lin = "mpx";
    if (env->host->opt_string(env, "linear_gemm", &lin) != MPX_OK) { cpu_destroy(be); return MPX_ERR; }
    be->linear_gemm = !strcmp(lin, "openblas") ? 0 : cpu_small_gemm_level();
    if (!strcmp(lin, "mpx-avx2") && be->linear_gemm > 1) be->linear_gemm = 1;
    const char *b16 = "fma";
    if (env->host->opt_string(env, "bf16_gemm", &b16) != MPX_OK ||
        env->host->opt_bool(env, "subnormal_census", &be->census) != MPX_OK) { cpu_destroy(be); return MPX_ERR; }
    int amx_here = cpu_amx_available(), amx_ok = strcmp(b16, "fma") != 0 && amx_here;
    if (!strcmp(b16, "amx") && !amx_ok) {
        (void)MPX_FAIL(env, "backend.cpu.bf16_gemm = \"amx\": this CPU has no AMX-BF16, or the OS does not grant "
                            "the tile state (arch_prctl ARCH_REQ_XCOMP_PERM); use \"auto\" or \"fma\"");
        cpu_destroy(be);
        return MPX_ERR_UNSUPPORTED;
    }
    be->bf16_gemm = amx_ok ? CPU_BF16_GEMM_AMX : CPU_BF16_GEMM_FMA;
    be->lin_ws = calloc((size_t)be->threads + 1, sizeof *be->lin_ws);
    be->lin_ws_bytes = calloc((size_t)be->threads + 1, sizeof *be->lin_ws_bytes);
    be->lin_taken = calloc((size_t)be->threads, sizeof *be->lin_taken);
    be->scr = calloc((size_t)be->threads, sizeof *be->scr);
    be->scr_bytes = calloc((size_t)be->threads, sizeof *be->scr_bytes);
    be->scr_taken = calloc((size_t)be->threads, sizeof *be->scr_taken);
    if (!be->lin_ws || !be->lin_ws_bytes || !be->lin_taken || !be->scr || !be->scr_bytes || !be->scr_taken) {
        (void)MPX_FAIL(env, "out of memory creating the cpu backend");
        cpu_destroy(be);
        return MPX_ERR_NOMEM;
    }
    /* OpenBLAS keeps its thread count process-wide, the one global the backend sets: 1,
     * since the pool threads the GEMMs (cpu_gemm.c). */
    openblas_set_num_threads(1);
    be->pool = cpu_pool_create(be->threads);
    if (!be->pool) {
        (void)MPX_FAIL(env, "cannot create the cpu backend's thread pool (%d threads)", be->threads);
        cpu_destroy(be);
        return MPX_ERR_NOMEM;
    }
    snprintf(be->line, sizeof be->line,
             "cpu: %d threads, OpenBLAS %s%s; attention GEMMs: %s; linear GEMMs: %s; bf16 GEMMs: %s",
             be->threads, openblas_get_config(), be->has_f16c ? ", F16C" : "",
             be->small_gemm == 2 ? "mpx avx512" : be->small_gemm == 1 ? "mpx avx2" : "openblas",
             be->linear_gemm == 2 ? "mpx avx512" : be->linear_gemm == 1 ? "mpx avx2" : "openblas",
             be->census ? "fma (subnormal census)"
             : be->bf16_gemm == CPU_BF16_GEMM_AMX ? "amx"
             : amx_here ? "fma (AMX-BF16 here: bf16_gemm = \"amx\" opts in)" : "fma");
    *out = be;
    return MPX_OK;
}

static const char *cpu_describe(void *vbe) { return ((cpu_be *)vbe)->line; }

void *cpu_scratch_take(cpu_be *be, size_t bytes, int *slot)
{
    int i = 0;
    while (atomic_exchange(&be->scr_taken[i], 1)) i = (i + 1) % be->threads;   /* one is free (header) */
    *slot = i;
    if (bytes > be->scr_bytes[i]) {
        free(be->scr[i]);
        size_t rounded = (bytes + 63) / 64 * 64;
        be->scr[i] = aligned_alloc(64, rounded);
        be->scr_bytes[i] = be->scr[i] ? rounded : 0;
    }
    return be->scr[i];
}

void cpu_scratch_give(cpu_be *be, int slot) { atomic_store(&be->scr_taken[slot], 0); }

void *cpu_ws(cpu_be *be, int slot, size_t bytes)
{
    if (bytes <= be->ws_bytes[slot]) return be->ws[slot];
    free(be->ws[slot]);
    size_t rounded = (bytes + 63) / 64 * 64;
    be->ws[slot] = aligned_alloc(64, rounded);
    be->ws_bytes[slot] = be->ws[slot] ? rounded : 0;
    if (!be->ws[slot]) (void)CPU_FAIL(be, "cpu backend: out of memory for a %zu-byte workspace", bytes);
    return be->ws[slot];
}

int cpu_check_(cpu_be *be, const char *file, int line, const char *op, const char *name,
               mpx_arg a, size_t n)
{
    if (a.t != MPX_F32 && a.t != MPX_F16 && a.t != MPX_BF16 && cpu_prepare_format(be, a.t)) {
        be->env->host->error(be->env, file, line,
                             "cpu %s: %s has dtype %s; supported: fp32, fp16, bf16 and the run's "
                             "number formats", op, name, cpu_dtype_name(be, a.t));
        return MPX_ERR_UNSUPPORTED;
    }
    if (n > 0 && !a.p) {
        be->env->host->error(be->env, file, line, "cpu %s: %s is NULL", op, name);
        return MPX_ERR;
    }
    return MPX_OK;
}

/* ---- memory: host memory, 64-byte aligned, zero-filled ---- */

static void *cpu_alloc(void *vbe, size_t bytes)
{
    (void)vbe;
    size_t rounded = bytes ? (bytes + 63) / 64 * 64 : 64;
    void *p = aligned_alloc(64, rounded);
    if (p) memset(p, 0, rounded);
    return p;
}

static void cpu_free(void *vbe, void *p) { (void)vbe; free(p); }

static int cpu_copy_bytes(void *vbe, void *dst, const void *src, size_t bytes)
{
    if (bytes && (!dst || !src)) return CPU_FAIL((cpu_be *)vbe, "cpu copy: NULL pointer for %zu bytes", bytes);
    if (bytes) memmove(dst, src, bytes);
    return MPX_OK;
}

static int cpu_fill_zero(void *vbe, void *p, size_t bytes)
{
    if (bytes && !p) return CPU_FAIL((cpu_be *)vbe, "cpu fill_zero: NULL pointer for %zu bytes", bytes);
    if (bytes) memset(p, 0, bytes);
    return MPX_OK;
}

/* Built with -DMPX_CPU_AS_ABI_1_0 (tests/plugins.mk: build/test-plugins/backend-cpu-abi10.so)
 * this backend declares ABI 1.0 and the 1.0 op table, which the core must still run. */
/* With -DMPX_CPU_NO_FORMATS (build/test-plugins/backend-cpu-noformats.so) it declares no
 * number formats (no MPX_OPS_FORMATS), as backend/cuda does, for the tests of the refusal. */
#ifdef MPX_CPU_AS_ABI_1_0
#define CPU_OPS_SIZE offsetof(mpx_ops, flags)
#define CPU_NAME "cpu-abi10"
#define CPU_DESC_HEADER .abi_major = 1, .abi_minor = 0, .size = sizeof(mpx_plugin_desc)
#else
#define CPU_OPS_SIZE sizeof(mpx_ops)
#define CPU_NAME "cpu"
#define CPU_DESC_HEADER MPX_DESC_HEADER
#endif
#ifdef MPX_CPU_NO_FORMATS
#undef CPU_NAME
#define CPU_NAME "cpu-noformats"
#define CPU_OPS_FLAGS MPX_OPS_LOSS_OPTIONAL
#else
#define CPU_OPS_FLAGS (MPX_OPS_FORMATS | MPX_OPS_LOSS_OPTIONAL)
#endif

/* With -DMPX_CPU_FAULTY (build/test-plugins/backend-cpu-faulty.so) four ops are one ulp
 * off in one element of their output: add, embedding_bwd, and the fused
 * softmax_dropout_fwd and dropout_add_layernorm_fwd. The cuda suites run against it
 * (MPX_TEST_DEVICE_SO) must fail their checks of those ops: a check of the suites'
 * own harness (tests/test_cuda_bounds.c), not a backend anyone runs. */
#ifdef MPX_CPU_FAULTY
#undef CPU_NAME
#define CPU_NAME "cpu-faulty"
/* element i of a, its last bit moved one step */
static void one_ulp(mpx_arg a, size_t i)
{
    if (a.t == MPX_F32) ((uint32_t *)a.p)[i] += 1u;
    else ((uint16_t *)a.p)[i] += 1u;
}
static int faulty_add(void *be, mpx_arg a, mpx_arg b, mpx_arg y, size_t n)
{
    int rc = cpu_add(be, a, b, y, n);
    if (!rc && n > 5) one_ulp(y, n / 2);
    return rc;
}
static int faulty_embedding_bwd(void *be, const int32_t *ids, size_t n_ids, mpx_arg dy, mpx_arg dtable,
                                size_t table_rows, size_t dim)
{
    int rc = cpu_embedding_bwd(be, ids, n_ids, dy, dtable, table_rows, dim);
    if (!rc && n_ids && dim) one_ulp(dtable, (size_t)ids[0] * dim);
    return rc;
}
static int faulty_softmax_dropout_fwd(void *be, mpx_arg x, const mpx_arg mask, mpx_arg y, mpx_arg yd, size_t batch,
                                      size_t heads, size_t rows, size_t cols, float scale, float p, mpx_rng rng)
{
    int rc = cpu_softmax_dropout_fwd(be, x, mask, y, yd, batch, heads, rows, cols, scale, p, rng);
    if (!rc && batch * heads * rows * cols > 0) one_ulp(y, 0);
    return rc;
}
static int faulty_dropout_add_layernorm_fwd(void *be, mpx_arg x, float p, mpx_rng rng, mpx_arg resid, mpx_arg r,
                                            mpx_arg gamma, mpx_arg beta, mpx_arg y, float *mean, float *rstd,
                                            size_t rows, size_t cols, float eps)
{
    int rc = cpu_dropout_add_layernorm_fwd(be, x, p, rng, resid, r, gamma, beta, y, mean, rstd, rows, cols, eps);
    if (!rc && rows * cols > 0) one_ulp(y, rows * cols - 1);
    return rc;
}
#define cpu_add faulty_add
#define cpu_embedding_bwd faulty_embedding_bwd
#define cpu_softmax_dropout_fwd faulty_softmax_dropout_fwd
#define cpu_dropout_add_layernorm_fwd faulty_dropout_add_layernorm_fwd
#endif

static const mpx_ops cpu_ops = {
    .size = CPU_OPS_SIZE,
    .alloc = cpu_alloc, .free = cpu_free,
    .to_device = cpu_copy_bytes, .to_host = cpu_copy_bytes, .copy = cpu_copy_bytes,
    .fill_zero = cpu_fill_zero,
    .cast = cpu_cast, .add = cpu_add, .axpby = cpu_axpby, .scale = cpu_scale,
    .gemm = cpu_gemm,
    .bias_add = cpu_bias_add, .bias_grad = cpu_bias_grad,
    .layernorm_fwd = cpu_layernorm_fwd, .layernorm_bwd = cpu_layernorm_bwd,
    .softmax_fwd = cpu_softmax_fwd, .softmax_bwd = cpu_softmax_bwd,
    .gelu_fwd = cpu_gelu_fwd, .gelu_bwd = cpu_gelu_bwd,
    .dropout_fwd = cpu_dropout_fwd, .dropout_bwd = cpu_dropout_bwd,
    .embedding_fwd = cpu_embedding_fwd, .embedding_bwd = cpu_embedding_bwd,
    .cross_entropy = cpu_cross_entropy,
    .sum_squares = cpu_sum_squares, .count_nonfinite = cpu_count_nonfinite,
    .apply_update = cpu_apply_update,
    /* ABI 1.4: host memory (no MPX_OPS_DEVICE_MEMORY), no fused_update; ABI 1.15: the
     * formats run here */
    .flags = CPU_OPS_FLAGS,
    /* ABI 1.10 (past CPU_OPS_SIZE, so unread, in the 1.0 build) */
    .softmax_dropout_fwd = cpu_softmax_dropout_fwd, .dropout_softmax_bwd = cpu_dropout_softmax_bwd,
    /* ABI 1.11 */
    .attention_fwd = cpu_attention_fwd, .attention_bwd = cpu_attention_bwd,
    /* ABI 1.13 */
    .gemm_bias = cpu_gemm_bias,
    /* ABI 1.17 */
    .dropout_add_layernorm_fwd = cpu_dropout_add_layernorm_fwd,
};

static const mpx_backend_vtable cpu_vtable = {
    .size = sizeof(mpx_backend_vtable),
    .create = cpu_create,
    .destroy = cpu_destroy,
    .ops = &cpu_ops,
    .describe = cpu_describe,
};

static const mpx_plugin_desc cpu_desc = {
    CPU_DESC_HEADER,
    .kind = MPX_KIND_BACKEND,
    .name = CPU_NAME,
    .version = "1.6.0",
    .summary = "AVX-512/AVX2 GEMM kernels (OpenBLAS sgemm on CPUs with neither) and threaded C ops over "
               "fp32/fp16/bf16 storage, fp32 accumulation",
    .options = cpu_options,
    .n_options = MPX_COUNT(cpu_options),
    .vtable = &cpu_vtable,
};

MPX_PLUGIN_ENTRY
{
    (void)host;
    return &cpu_desc;
}
