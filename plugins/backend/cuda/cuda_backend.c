/* The `cuda` compute backend: descriptor, instance (device, stream, cuBLAS handle,
 * workspaces), memory ops and the op table. The ops live in one file per group:
 *   cuda_elementwise.cu  cast, add, axpby, scale, gelu, dropout, apply_update
 *   cuda_gemm.c          gemm (cublasGemmEx / cublasGemmStridedBatchedEx)
 *   cuda_rows.cu         bias_add/grad, layernorm, softmax, cross_entropy, and the fused
 *                        softmax + dropout and dropout + residual + layernorm
 *   cuda_misc.cu         embeddings, sum_squares, count_nonfinite
 *   cuda_optim.cu        fused_update (ABI 1.4: the optimizers on device memory)
 * Memory comes from cudaMalloc: the host counts it by role (host->alloc calls ops->alloc),
 * so the run record shows device bytes exactly as it shows the cpu backend's. */
#include "cuda_internal.h"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const mpx_option cuda_options[] = {
    { .key = "device", .type = MPX_OPT_INT, .def = "-1", .min = -1, .max = 1024,
      .help = "CUDA device index; -1 = the process's local rank (OMPI_COMM_WORLD_LOCAL_RANK, SLURM_LOCALID, LOCAL_RANK, MPI_LOCALRANKID, the first one set) modulo the device count, else 0" },
    { .key = "tf32", .type = MPX_OPT_BOOL, .def = "false", .min = 1, .max = 0,
      .help = "let fp32 GEMMs round their inputs to TF32 on tensor cores (CUBLAS_COMPUTE_32F_FAST_TF32); off, fp32 GEMMs are full fp32" },
    { .key = "attention", .type = MPX_OPT_CHOICE, .def = "\"ops\"", .min = 1, .max = 0,
      .choices = "ops|per-example|batched",
      .help = "self-attention: \"ops\" = no attention op, the model runs its GEMMs (one strided-batched call per "
              "example) and row ops one by one; \"per-example\" = the attention op (ABI 1.11) issuing those same "
              "calls; \"batched\" = the attention op with one cublasGemmBatchedEx call per GEMM over every example "
              "and head (other cuBLAS kernels: GEMM sums in another order). Not yet run on a GPU: see docs/CUDA.md" },
    { .key = "fused", .type = MPX_OPT_BOOL, .def = "false", .min = 1, .max = 0,
      .help = "the optional fused ops, the same bits as the ops they stand for: the attention softmax and its dropout "
              "in one pass each way (ABI 1.10, also inside the attention op) and a post-LN block's dropout, residual "
              "add and layernorm in one pass (ABI 1.17); off, those run as separate kernels. Not yet run on a GPU: "
              "see docs/CUDA.md" },
    { .key = "epilogue", .type = MPX_OPT_BOOL, .def = "false", .min = 1, .max = 0,
      .help = "the linear layers' bias added in the GEMM's epilogue (cuBLASLt, CUBLASLT_EPILOGUE_BIAS): one op "
              "instead of the bias fill, bias add and GEMM (ABI 1.13 gemm_bias, 1.18 gemm_bias_as_c). The same "
              "rounding as those ops, but cuBLASLt may pick another kernel than cublasGemmEx, so the GEMM may "
              "sum in another order: other bits, within the GEMM's bound. Not yet run on a GPU: see docs/CUDA.md" },
};

int cuda_rt_(cuda_be *be, int err, const char *file, int line, const char *what)
{
    if (err == cudaSuccess) return MPX_OK;
    be->env->host->error(be->env, file, line, "cuda %s: %s (%s)", what,
                         cudaGetErrorName((cudaError_t)err), cudaGetErrorString((cudaError_t)err));
    return MPX_ERR;
}

int cuda_check_(cuda_be *be, const char *file, int line, const char *op, const char *name,
                mpx_arg a, size_t n)
{
    if (a.t != MPX_F32 && a.t != MPX_F16 && a.t != MPX_BF16) {
        be->env->host->error(be->env, file, line, "cuda %s: %s has dtype %s; supported: fp32, fp16, bf16",
                             op, name, mpx_dtype_name(a.t));
        return MPX_ERR_UNSUPPORTED;
    }
    if (n > 0 && !a.p) {
        be->env->host->error(be->env, file, line, "cuda %s: %s is NULL", op, name);
        return MPX_ERR;
    }
    return MPX_OK;
}

void *cuda_ws(cuda_be *be, int slot, size_t bytes)
{
    if (bytes <= be->ws_bytes[slot] && be->ws[slot]) return be->ws[slot];
    if (be->ws[slot]) cudaFree(be->ws[slot]);   /* synchronises: no kernel still uses it */
    be->ws[slot] = NULL;
    be->ws_bytes[slot] = 0;
    size_t rounded = ((bytes ? bytes : 1) + 255) / 256 * 256;
    cudaError_t e = cudaMalloc(&be->ws[slot], rounded);
    if (e != cudaSuccess) {
        be->ws[slot] = NULL;
        (void)CUDA_FAIL(be, "cuda backend: cannot allocate a %zu-byte device workspace: %s", bytes, cudaGetErrorString(e));
        return NULL;
    }
    be->ws_bytes[slot] = rounded;
    return be->ws[slot];
}

void *cuda_hws(cuda_be *be, int slot, size_t bytes)
{
    if (bytes <= be->hws_bytes[slot] && be->hws[slot]) return be->hws[slot];
    free(be->hws[slot]);
    size_t rounded = ((bytes ? bytes : 1) + 63) / 64 * 64;
    be->hws[slot] = malloc(rounded);
    be->hws_bytes[slot] = be->hws[slot] ? rounded : 0;
    if (!be->hws[slot]) (void)CUDA_FAIL(be, "cuda backend: out of memory for a %zu-byte host buffer", bytes);
    return be->hws[slot];
}

int cuda_sync_(cuda_be *be, const char *file, int line, const char *what)
{
    if (cuda_rt_(be, cudaMemcpyAsync(be->bad_h, be->bad, sizeof be->bad_h, cudaMemcpyDeviceToHost, be->stream), file,
                 line, what) ||
        cuda_rt_(be, cudaStreamSynchronize(be->stream), file, line, what))
        return MPX_ERR;
    static const char *const op[CUDA_BAD_KINDS] = { "embedding_fwd", "embedding_bwd", "cross_entropy" };
    for (int k = 0; k < CUDA_BAD_KINDS; k++) {
        const unsigned long long v = be->bad_h[k];
        if (v == ~0ull) continue;
        /* reported once: the checks start clean */
        (void)cudaMemsetAsync(be->bad, 0xff, CUDA_BAD_KINDS * sizeof *be->bad, be->stream);
        return CUDA_FAIL(be, "cuda %s: %s %d at position %llu is outside [0, %llu) (checked on the device; found at "
                         "%s, the next synchronisation; the op skipped it)", op[k], k == CUDA_BAD_LABEL ? "label" : "id",
                         (int)(int32_t)(uint32_t)(v & 0xffffffffu), v >> 32, be->bad_h[CUDA_BAD_KINDS + k], what);
    }
    return MPX_OK;
}

/* ---- cuBLAS, opened at create ---- */

#define CUDA_STR_(x) #x
#define CUDA_STR(x) CUDA_STR_(x)
#define CUBLAS_SONAME "libcublas.so." CUDA_STR(CUBLAS_VER_MAJOR)

#define CUBLASLT_SONAME "libcublasLt.so." CUDA_STR(CUBLAS_VER_MAJOR)

typedef struct lib_sym { void **slot; const char *name; } lib_sym;

/* Opens `soname` (through the plugin's RUNPATH, else the toolkit it was built against)
 * into *lib and resolves every symbol of syms; `what` names the library in an error. */
static int open_lib(cuda_be *be, const char *soname, const char *what, void **lib, const lib_sym *syms, size_t n)
{
    char path[512];
    snprintf(path, sizeof path, "%s/%s", MPX_CUDA_LIB_DIR, soname);
    const char *paths[] = { soname, path };
    for (size_t i = 0; i < 2 && !*lib; i++) *lib = dlopen(paths[i], RTLD_NOW | RTLD_LOCAL);
    if (!*lib) return CUDA_FAIL(be, "cannot open %s (%s): %s", what, soname, dlerror());
    for (size_t i = 0; i < n; i++) {
        *syms[i].slot = dlsym(*lib, syms[i].name);
        if (!*syms[i].slot) return CUDA_FAIL(be, "%s has no %s", soname, syms[i].name);
    }
    return MPX_OK;
}

/* cuBLASLt for backend.cuda.epilogue: its entry points and a handle. */
static int open_cublaslt(cuda_be *be)
{
    cuda_lt *lt = &be->lt;
    const lib_sym syms[] = {
        { (void **)&lt->create, "cublasLtCreate" },
        { (void **)&lt->destroy, "cublasLtDestroy" },
        { (void **)&lt->desc_create, "cublasLtMatmulDescCreate" },
        { (void **)&lt->desc_destroy, "cublasLtMatmulDescDestroy" },
        { (void **)&lt->desc_set, "cublasLtMatmulDescSetAttribute" },
        { (void **)&lt->layout_create, "cublasLtMatrixLayoutCreate" },
        { (void **)&lt->layout_destroy, "cublasLtMatrixLayoutDestroy" },
        { (void **)&lt->pref_create, "cublasLtMatmulPreferenceCreate" },
        { (void **)&lt->pref_destroy, "cublasLtMatmulPreferenceDestroy" },
        { (void **)&lt->pref_set, "cublasLtMatmulPreferenceSetAttribute" },
        { (void **)&lt->heuristic, "cublasLtMatmulAlgoGetHeuristic" },
        { (void **)&lt->matmul, "cublasLtMatmul" },
    };
    MPX_TRY(open_lib(be, CUBLASLT_SONAME, "cuBLASLt (backend.cuda.epilogue)", &lt->lib, syms, MPX_COUNT(syms)));
    cublasStatus_t s = lt->create(&lt->handle);
    if (s != CUBLAS_STATUS_SUCCESS) {
        lt->handle = NULL;
        return CUDA_FAIL(be, "backend.cuda.epilogue: cublasLtCreate failed (status %d)", (int)s);
    }
    return MPX_OK;
}

static int open_cublas(cuda_be *be)
{
    const lib_sym syms[] = {
        { (void **)&be->api.create, "cublasCreate_v2" },
        { (void **)&be->api.destroy, "cublasDestroy_v2" },
        { (void **)&be->api.set_stream, "cublasSetStream_v2" },
        { (void **)&be->api.set_math_mode, "cublasSetMathMode" },
        { (void **)&be->api.get_version, "cublasGetVersion_v2" },
        { (void **)&be->api.status_string, "cublasGetStatusString" },
        { (void **)&be->api.gemm_ex, "cublasGemmEx" },
        { (void **)&be->api.gemm_strided_batched_ex, "cublasGemmStridedBatchedEx" },
    };
    MPX_TRY(open_lib(be, CUBLAS_SONAME, "cuBLAS", &be->api.lib, syms, MPX_COUNT(syms)));
    if (be->epilogue) MPX_TRY(open_cublaslt(be));
    /* only attention = "batched" calls it */
    *(void **)&be->api.gemm_batched_ex = dlsym(be->api.lib, "cublasGemmBatchedEx");
    if (be->attention == CUDA_ATTN_BATCHED && !be->api.gemm_batched_ex)
        return CUDA_FAIL(be, "backend.cuda.attention = \"batched\": %s has no cublasGemmBatchedEx", CUBLAS_SONAME);
    return MPX_OK;
}

/* ---- instance ---- */

static void cuda_destroy(void *vbe)
{
    cuda_be *be = vbe;
    if (!be) return;
    if (be->stream) cudaStreamSynchronize(be->stream);
    for (int i = 0; i < CUDA_WS_SLOTS; i++) if (be->ws[i]) cudaFree(be->ws[i]);
    if (be->bad) cudaFree(be->bad);
    for (int i = 0; i < 2; i++) free(be->hws[i]);
    if (be->blas) be->api.destroy(be->blas);   /* the library stays open: never dlclose */
    if (be->lt.handle) be->lt.destroy(be->lt.handle);
    if (be->stream) cudaStreamDestroy(be->stream);
    free(be);
}

static int local_rank(void)
{
    const char *vars[] = { "OMPI_COMM_WORLD_LOCAL_RANK", "SLURM_LOCALID", "LOCAL_RANK", "MPI_LOCALRANKID" };
    for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++) {
        const char *v = getenv(vars[i]);
        if (v && *v) return atoi(v);
    }
    return 0;
}

static const mpx_ops cuda_ops;   /* the op table, below: every instance starts from it */

static int cuda_create(mpx_env *env, void **out)
{
    int64_t device = -1;
    int tf32 = 0;
    const char *attention = "ops";
    int fused = 0, epilogue = 0;
    MPX_TRY(env->host->opt_int(env, "device", &device));
    MPX_TRY(env->host->opt_bool(env, "tf32", &tf32));
    MPX_TRY(env->host->opt_string(env, "attention", &attention));
    MPX_TRY(env->host->opt_bool(env, "fused", &fused));
    MPX_TRY(env->host->opt_bool(env, "epilogue", &epilogue));
    int count = 0;
    cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess || count == 0)
        return MPX_FAIL(env, "no CUDA device: %s", e != cudaSuccess ? cudaGetErrorString(e) : "the driver reports 0 devices");
    if (device < 0) device = local_rank() % count;
    if (device >= count)
        return MPX_FAIL(env, "backend.cuda.device = %lld, but there are %d CUDA devices", (long long)device, count);
    cuda_be *be = calloc(1, sizeof *be);
    if (!be) {
        (void)MPX_FAIL(env, "out of memory creating the cuda backend");
        return MPX_ERR_NOMEM;
    }
    be->env = env;
    be->device = (int)device;
    be->tf32 = tf32;
    be->attention = !strcmp(attention, "batched") ? CUDA_ATTN_BATCHED
                    : !strcmp(attention, "per-example") ? CUDA_ATTN_PER_EXAMPLE : CUDA_ATTN_OPS;
    be->ops = cuda_ops;
    if (be->attention != CUDA_ATTN_OPS) {
        be->ops.attention_fwd = cuda_attention_fwd;
        be->ops.attention_bwd = cuda_attention_bwd;
    }
    be->fused = fused;
    if (be->fused) {
        be->ops.softmax_dropout_fwd = cuda_softmax_dropout_fwd;
        be->ops.dropout_softmax_bwd = cuda_dropout_softmax_bwd;
        be->ops.dropout_add_layernorm_fwd = cuda_dropout_add_layernorm_fwd;
    }
    be->epilogue = epilogue;
    if (be->epilogue) {
        be->ops.gemm_bias = cuda_gemm_bias;
        be->ops.gemm_bias_as_c = cuda_gemm_bias_as_c;
    }
    struct cudaDeviceProp prop;
    /* A blocking stream: it orders with the legacy default stream, where comm/nccl runs. */
    if (cuda_rt_(be, cudaSetDevice(be->device), __FILE__, __LINE__, "cudaSetDevice") ||
        cuda_rt_(be, cudaGetDeviceProperties(&prop, be->device), __FILE__, __LINE__, "cudaGetDeviceProperties") ||
        cuda_rt_(be, cudaStreamCreate(&be->stream), __FILE__, __LINE__, "cudaStreamCreate") ||
        cuda_rt_(be, cudaMalloc((void **)&be->bad, sizeof be->bad_h), __FILE__, __LINE__, "cudaMalloc (id checks)") ||
        cuda_rt_(be, cudaMemset(be->bad, 0xff, sizeof be->bad_h), __FILE__, __LINE__, "cudaMemset (id checks)")) {
        cuda_destroy(be);
        return MPX_ERR;
    }
    if (open_cublas(be)) {
        cuda_destroy(be);
        return MPX_ERR;
    }
    cublasStatus_t bs = be->api.create(&be->blas);
    if (bs == CUBLAS_STATUS_SUCCESS) bs = be->api.set_stream(be->blas, be->stream);
    /* fp32 accumulation throughout: no reduced-precision split-K reductions */
    if (bs == CUBLAS_STATUS_SUCCESS)
        bs = be->api.set_math_mode(be->blas, CUBLAS_DEFAULT_MATH | CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION);
    if (bs != CUBLAS_STATUS_SUCCESS) {
        (void)MPX_FAIL(env, "cuBLAS initialisation failed: %s", be->api.status_string(bs));
        cuda_destroy(be);
        return MPX_ERR;
    }
    int rt = 0, blas_v = 0;
    cudaRuntimeGetVersion(&rt);
    be->api.get_version(be->blas, &blas_v);
    snprintf(be->line, sizeof be->line, "cuda: device %d %.96s (sm_%d%d, %.0f GiB), runtime %d.%d, cuBLAS %d, tf32 %s, "
             "attention %s, fused ops %s, bias epilogue %s", be->device, prop.name, prop.major, prop.minor,
             (double)prop.totalGlobalMem / (1024.0 * 1024.0 * 1024.0), rt / 1000, (rt % 1000) / 10, blas_v,
             tf32 ? "on" : "off", attention, fused ? "on" : "off", epilogue ? "on" : "off");
    *out = be;
    return MPX_OK;
}

static const char *cuda_describe(void *vbe) { return ((cuda_be *)vbe)->line; }

/* ---- memory: device memory, zero-filled ---- */

static void *cuda_alloc(void *vbe, size_t bytes)
{
    (void)vbe;
    void *p = NULL;
    size_t rounded = bytes ? (bytes + 255) / 256 * 256 : 256;
    if (cudaMalloc(&p, rounded) != cudaSuccess) return NULL;
    if (cudaMemset(p, 0, rounded) != cudaSuccess) { cudaFree(p); return NULL; }
    return p;
}

static void cuda_free(void *vbe, void *p) { (void)vbe; if (p) cudaFree(p); }

/* Host -> device: from pageable memory the call returns once the source is staged, so
 * the caller may reuse it. */
static int cuda_to_device(void *vbe, void *dst, const void *src, size_t bytes)
{
    cuda_be *be = vbe;
    if (!bytes) return MPX_OK;
    if (!dst || !src) return CUDA_FAIL(be, "cuda to_device: NULL pointer for %zu bytes", bytes);
    CUDA_TRY(be, cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, be->stream), "to_device");
    return MPX_OK;
}

static int cuda_to_host(void *vbe, void *dst, const void *src, size_t bytes)
{
    cuda_be *be = vbe;
    if (!bytes) return MPX_OK;
    if (!dst || !src) return CUDA_FAIL(be, "cuda to_host: NULL pointer for %zu bytes", bytes);
    CUDA_TRY(be, cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, be->stream), "to_host");
    CUDA_SYNC(be, "to_host");
    return MPX_OK;
}

/* memmove semantics (as the cpu backend): overlapping ranges go through a workspace. */
static int cuda_copy(void *vbe, void *dst, const void *src, size_t bytes)
{
    cuda_be *be = vbe;
    if (!bytes || dst == src) return MPX_OK;
    if (!dst || !src) return CUDA_FAIL(be, "cuda copy: NULL pointer for %zu bytes", bytes);
    const char *d = dst, *s = src;
    if (d < s + bytes && s < d + bytes) {
        void *tmp = cuda_ws(be, 6, bytes);
        if (!tmp) return MPX_ERR_NOMEM;
        CUDA_TRY(be, cudaMemcpyAsync(tmp, src, bytes, cudaMemcpyDeviceToDevice, be->stream), "copy");
        src = tmp;
    }
    CUDA_TRY(be, cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, be->stream), "copy");
    return MPX_OK;
}

static int cuda_fill_zero(void *vbe, void *p, size_t bytes)
{
    cuda_be *be = vbe;
    if (!bytes) return MPX_OK;
    if (!p) return CUDA_FAIL(be, "cuda fill_zero: NULL pointer for %zu bytes", bytes);
    CUDA_TRY(be, cudaMemsetAsync(p, 0, bytes, be->stream), "fill_zero");
    return MPX_OK;
}

static const mpx_ops cuda_ops = {
    .size = sizeof(mpx_ops),
    .alloc = cuda_alloc, .free = cuda_free,
    .to_device = cuda_to_device, .to_host = cuda_to_host, .copy = cuda_copy,
    .fill_zero = cuda_fill_zero,
    .cast = cuda_cast, .add = cuda_add, .axpby = cuda_axpby, .scale = cuda_scale,
    .gemm = cuda_gemm,
    .bias_add = cuda_bias_add, .bias_grad = cuda_bias_grad,
    .layernorm_fwd = cuda_layernorm_fwd, .layernorm_bwd = cuda_layernorm_bwd,
    .softmax_fwd = cuda_softmax_fwd, .softmax_bwd = cuda_softmax_bwd,
    .gelu_fwd = cuda_gelu_fwd, .gelu_bwd = cuda_gelu_bwd,
    .dropout_fwd = cuda_dropout_fwd, .dropout_bwd = cuda_dropout_bwd,
    .embedding_fwd = cuda_embedding_fwd, .embedding_bwd = cuda_embedding_bwd,
    .cross_entropy = cuda_cross_entropy,
    .sum_squares = cuda_sum_squares, .count_nonfinite = cuda_count_nonfinite,
    .apply_update = cuda_apply_update,
    /* no MPX_OPS_FORMATS (ABI 1.15): a policy with an 8-bit format is refused at check */
    /* ABI 1.18: one-pass ADAM and SGD; a backward's cross-entropy without its loss (no wait) */
    .flags = MPX_OPS_DEVICE_MEMORY | MPX_OPS_FUSED_ADD_IN_PLACE | MPX_OPS_LOSS_OPTIONAL,
    .fused_update = cuda_fused_update,
};

static const mpx_ops *cuda_instance_ops(void *be) { return &((cuda_be *)be)->ops; }

static const mpx_backend_vtable cuda_vtable = {
    .size = sizeof(mpx_backend_vtable),
    .create = cuda_create,
    .destroy = cuda_destroy,
    .ops = &cuda_ops,
    .describe = cuda_describe,
    .instance_ops = cuda_instance_ops,   /* ABI 1.16: backend.cuda.attention, .fused, .epilogue */
};

static const mpx_plugin_desc cuda_desc = {
    MPX_DESC_HEADER,
    .kind = MPX_KIND_BACKEND,
    .name = "cuda",
    .version = "0.3.0",
    .summary = "cuBLAS GEMMs (fp32 accumulate) and CUDA kernels over fp32/fp16/bf16 storage, the cpu backend's rounding and Philox streams",
    .options = cuda_options,
    .n_options = MPX_COUNT(cuda_options),
    .vtable = &cuda_vtable,
};

MPX_PLUGIN_ENTRY
{
    (void)host;
    return &cuda_desc;
}
