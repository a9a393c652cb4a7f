/* Device check (not a test): one training step — forward + backward + Adam, clip 1.0,
 * dropout on — on the cuda backend, per precision policy, for a MiniLM-sized and a
 * bert-base-sized BERT with random weights (config.json only: the device gets no
 * checkpoint), against the cuBLAS GEMM ceiling measured in the same process: a
 * bert-base FFN GEMM (B*S x 3072 x 768, X W^T) in the GEMM dtype of each policy (fp32
 * without TF32 for fp32; fp16 for amp and fp16-scaled; bf16 for bf16-master and
 * pure-bf16).
 *
 * GEMM FLOPs of a step = 6 x forward MACs (as tests/bench_step.c): T x sum(in x out of
 * the linear weights) + layers x 2 x B x S^2 x hidden, T = B x S.
 *
 *   bench_cuda_step [--steps N] [--batch B] [--out DIR] [--backend NAME] [--profile]
 *                   [--attention ops|per-example|batched]   (backend.cuda.attention)
 *                   [--fused]                               (backend.cuda.fused = true)
 *                   [--epilogue]                            (backend.cuda.epilogue = true)
 * (from the repository root) prints a Markdown table and writes DIR/cuda_step.md and DIR/cuda_step.json
 * (DIR default results/anchors on cuda). --backend cpu runs the same cases on the cpu backend
 * without a ceiling: a check of this program on a machine without a GPU, which writes
 * files only where --out says (the committed anchors are the device's). --profile adds,
 * for fp32 and bf16-master, where a step's time goes by op class (tests/bench_profile.h),
 * each op timed between two device synchronisations. */
#define _GNU_SOURCE
#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "../core/engine/session.h"
#include "../core/engine/train.h"
#include "bench_profile.h"
#include "bench_util.h"

#define SEQ 384
#define MAX_BATCH 64
#define MAX_STEPS 50

/* ---- a synthetic task: one fixed batch of random tokens, every mask 1 ---- */

typedef struct synth {
    int batch;
    int32_t ids[MAX_BATCH * SEQ], seg[MAX_BATCH * SEQ], mask[MAX_BATCH * SEQ], start[MAX_BATCH], end[MAX_BATCH];
    mpx_itensor t[5];
    const int32_t *host[5];   /* the same on the host (mpx_batch.host): the model checks them there */
} synth;

static int synth_next(mpx_task *t, mpx_session *s, int rows, mpx_batch *out, int64_t *tokens, char *err, size_t errlen)
{
    (void)s;
    synth *d = t->self;
    if (rows != d->batch) { snprintf(err, errlen, "bench: train.batch_size must be %d", d->batch); return -1; }
    *out = (mpx_batch){ .size = sizeof *out, .tensors = d->t, .n_tensors = 5, .training = 1, .host = d->host };
    *tokens = (int64_t)d->batch * SEQ;
    return 0;
}

static void synth_init(synth *d, int batch, int vocab)
{
    uint32_t x = 12345;
    d->batch = batch;
    for (int i = 0; i < batch * SEQ; i++) {
        x = x * 1664525u + 1013904223u;
        d->ids[i] = 1000 + (int32_t)((x >> 8) % (uint32_t)(vocab - 1000));
        d->seg[i] = i % SEQ >= SEQ / 4;
        d->mask[i] = 1;
    }
    for (int b = 0; b < batch; b++) {
        x = x * 1664525u + 1013904223u;
        d->start[b] = (int32_t)((x >> 8) % SEQ);
        d->end[b] = (int32_t)((x >> 16) % SEQ);
    }
    d->t[0] = (mpx_itensor){ "input_ids", d->ids, 2, { batch, SEQ } };
    d->t[1] = (mpx_itensor){ "segment_ids", d->seg, 2, { batch, SEQ } };
    d->t[2] = (mpx_itensor){ "input_mask", d->mask, 2, { batch, SEQ } };
    d->t[3] = (mpx_itensor){ "start_positions", d->start, 1, { batch, 0 } };
    d->t[4] = (mpx_itensor){ "end_positions", d->end, 1, { batch, 0 } };
    const int32_t *host[5] = { d->ids, d->seg, d->mask, d->start, d->end };
    memcpy(d->host, host, sizeof host);
}

/* Batch tensors live in backend memory (mpx/model.h): device copies of the host arrays. */
static int synth_upload(synth *d, mpx_session *s)
{
    const int32_t *host[5] = { d->ids, d->seg, d->mask, d->start, d->end };
    size_t n[5] = { (size_t)d->batch * SEQ, (size_t)d->batch * SEQ, (size_t)d->batch * SEQ, (size_t)d->batch,
                    (size_t)d->batch };
    for (int i = 0; i < 5; i++) {
        void *p = mpx_session_alloc(s, MPX_ROLE_SCRATCH, n[i] * 4, "bench batch");
        if (!p || s->ops->to_device(s->be, p, host[i], n[i] * 4)) return -1;
        d->t[i].data = p;
    }
    return 0;
}

static double step_gemm_flop(mpx_session *s, int batch, int *vocab)
{
    mpx_instance *m = &s->inst[MPX_KIND_MODEL];
    const mpx_model_vtable *mv = &m->rec->vt.model;
    double lin = 0;
    int layers = 0;
    int64_t hidden = 0;
    for (size_t i = 0; i < s->n_params; i++) {
        const mpx_param_info *p = mv->param(m->self, i);
        if (p->layer + 1 > layers) layers = p->layer + 1;
        if (i == 0) { *vocab = (int)p->shape[0]; hidden = p->shape[1]; }
        if (p->ndim == 2 && p->group != MPX_GROUP_EMBEDDING) lin += (double)p->shape[0] * (double)p->shape[1];
    }
    double T = (double)batch * SEQ;
    return 6.0 * (T * lin + layers * 2.0 * batch * (double)SEQ * SEQ * (double)hidden);
}

/* ---- the cuBLAS ceiling: TFLOP/s of the FFN GEMM in one dtype, best of 20 ---- */

static double ceiling_tflops(cudaDataType_t t, int batch)
{
    const int M = batch * SEQ, N = 3072, K = 768;
    size_t es = t == CUDA_R_32F ? 4 : 2;
    void *a = NULL, *b = NULL, *c = NULL;
    cublasHandle_t h = NULL;
    double best = NAN;
    if (cudaMalloc(&a, (size_t)M * K * es) || cudaMalloc(&b, (size_t)N * K * es) || cudaMalloc(&c, (size_t)M * N * es) ||
        cudaMemset(a, 0, (size_t)M * K * es) || cudaMemset(b, 0, (size_t)N * K * es) ||
        cublasCreate(&h) != CUBLAS_STATUS_SUCCESS ||
        cublasSetMathMode(h, CUBLAS_DEFAULT_MATH | CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION) != CUBLAS_STATUS_SUCCESS)
        goto out;
    const float one = 1.0f, zero = 0.0f;
    for (int r = 0; r < 23; r++) {
        cudaDeviceSynchronize();
        double t0 = now();
        /* row-major C[M,N] = X[M,K] W[N,K]^T is column-major C^T = W X^T */
        if (cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, N, M, K, &one, b, t, K, a, t, K, &zero, c, t, N,
                         CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT) != CUBLAS_STATUS_SUCCESS)
            goto out;
        cudaDeviceSynchronize();
        double tf = 2.0 * M * N * (double)K / (now() - t0) * 1e-12;
        if (r >= 3 && (isnan(best) || tf > best)) best = tf;   /* 3 warm-ups */
    }
out:
    if (h) cublasDestroy(h);
    cudaFree(a);
    cudaFree(b);
    cudaFree(c);
    return best;
}

/* ---- one case ---- */

typedef struct result {
    const char *model, *prec, *gemm;
    int ok;
    double step_s, flop, ceiling, loss;
    size_t numel, persistent;
    char err[512];
} result;

static const char *backend_name = "cuda";
static const char *attention = "ops";   /* backend.cuda.attention (--attention) */
static int fused;   /* backend.cuda.fused (--fused) */
static int epilogue;   /* backend.cuda.epilogue (--epilogue) */

static int write_cfg(const char *path, const char *ckpt, const char *prec, int batch)
{
    FILE *f = fopen(path, "w");
    if (!f) return -1;
    fprintf(f, "run = { name = \"bench_cuda_step\"; seed = 42; };\n"
               "data = { task = \"toy\"; };\n"
               "model = { plugin = \"bert-qa\"; checkpoint = \"%s\"; bert-qa = { random_init = true; }; };\n"
               "train = { batch_size = %d; gradient_clipping = 1.0; };\n"
               "precision = { plugin = \"%s\"; };\n"
               "backend = { plugin = \"%s\"; cuda = { attention = \"%s\"; fused = %s; epilogue = %s; }; };\n"
               "optimizer = { plugin = \"adam\"; lr = 1e-4; adam = { weight_decay = 0.01; }; };\n",
            ckpt, batch, prec, backend_name, attention, fused ? "true" : "false", epilogue ? "true" : "false");
    return fclose(f);
}

static void device_sync(void) { cudaDeviceSynchronize(); }

/* profile: after the timed steps, 3 more with every op timed between two device
 * synchronisations (bench_profile.h), and the per-class table printed. */
static void run_case(result *r, const char *ckpt, int batch, int steps, int profile)
{
    char cfg[128], err[8192] = "";
    snprintf(cfg, sizeof cfg, "/tmp/mpx-bench-cuda-%d.cfg", (int)getpid());
    if (write_cfg(cfg, ckpt, r->prec, batch)) { snprintf(r->err, sizeof r->err, "cannot write %s", cfg); return; }
    const char *dirs[] = { "build/plugins" };
    mpx_session s;
    mpx_task t = { .name = "bench" };
    static synth d;
    if (mpx_session_open(&s, dirs, 1)) { snprintf(r->err, sizeof r->err, "cannot scan build/plugins"); return; }
    if (mpx_session_configure(&s, cfg, NULL, 0, err, sizeof err) || mpx_session_check_compat(&s, err, sizeof err) ||
        mpx_session_start(&s, err, sizeof err))
        goto out;
    if (profile) {
        bench_profile_install(&s);
        bench_profile_set_sync(!strcmp(backend_name, "cuda") ? device_sync : NULL);
    }
    if (mpx_session_alloc_state(&s, batch, SEQ, err, sizeof err)) goto out;
    int vocab = 0;
    r->flop = step_gemm_flop(&s, batch, &vocab);
    r->numel = s.numel;
    synth_init(&d, batch, vocab);
    if (synth_upload(&d, &s)) { snprintf(err, sizeof err, "cannot upload the batch"); goto out; }
    t.self = &d;
    t.next = synth_next;
    t.max_batch = batch;
    t.max_seq = SEQ;
    double times[MAX_STEPS];
    int skipped = 0;
    int on_cuda = !strcmp(backend_name, "cuda");
    for (int i = -2; i < steps; i++) {   /* two warm-ups: workspaces, cuBLAS heuristics */
        if (on_cuda) cudaDeviceSynchronize();
        double t0 = now();
        if (mpx_train_one_step(&s, &t, i + 2, 1e-4, 1.0, NULL, &r->loss, &skipped, err, sizeof err)) goto out;
        if (on_cuda) cudaDeviceSynchronize();
        if (i >= 0) times[i] = now() - t0;
    }
    r->step_s = median(times, steps);
    if (profile) {
        bench_profile_reset();
        bench_profile_enable(1);
        double t0 = now();
        for (int i = 0; i < 3; i++)
            if (mpx_train_one_step(&s, &t, steps + 2 + i, 1e-4, 1.0, NULL, &r->loss, &skipped, err, sizeof err)) {
                bench_profile_enable(0);
                goto out;
            }
        if (on_cuda) cudaDeviceSynchronize();
        double total = now() - t0;
        bench_profile_enable(0);
        printf("\n%s %s, batch %d x %d (every op timed%s: %.4f s a step against %.4f unprofiled)\n", r->model,
               r->prec, batch, SEQ, on_cuda ? " between two device synchronisations" : "", total / 3, r->step_s);
        bench_profile_print("a step's", 3, total);
        fflush(stdout);
    }
    for (int k = 0; k < MPX_ROLE_SCRATCH; k++) r->persistent += s.peak[k];
    r->ok = 1;
out:
    if (!r->ok) snprintf(r->err, sizeof r->err, "%s", err[0] ? err : "failed");
    mpx_session_close(&s);
    unlink(cfg);
}

static const char minilm_json[] =
    "{\"architectures\": [\"BertForQuestionAnswering\"], \"model_type\": \"bert\",\n"
    " \"hidden_size\": 384, \"num_hidden_layers\": 6, \"num_attention_heads\": 12,\n"
    " \"intermediate_size\": 1536, \"vocab_size\": 30522, \"max_position_embeddings\": 512,\n"
    " \"type_vocab_size\": 2, \"hidden_act\": \"gelu\", \"hidden_dropout_prob\": 0.1,\n"
    " \"attention_probs_dropout_prob\": 0.1, \"initializer_range\": 0.02,\n"
    " \"layer_norm_eps\": 1e-12, \"pad_token_id\": 0}\n";

static int model_dir(char *dir, const char *json)
{
    char path[128];
    if (!mkdtemp(dir)) return -1;
    snprintf(path, sizeof path, "%s/config.json", dir);
    FILE *f = fopen(path, "w");
    if (!f) return -1;
    fputs(json, f);
    return fclose(f);
}

int main(int argc, char **argv)
{
    int steps = 10, batch = 32, profile = 0;
    const char *out_dir = NULL;   /* results/anchors on cuda; nothing written on another backend without --out */
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--steps") && i + 1 < argc) steps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--batch") && i + 1 < argc) batch = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--out") && i + 1 < argc) out_dir = argv[++i];
        else if (!strcmp(argv[i], "--backend") && i + 1 < argc) backend_name = argv[++i];
        else if (!strcmp(argv[i], "--profile")) profile = 1;
        else if (!strcmp(argv[i], "--attention") && i + 1 < argc) attention = argv[++i];
        else if (!strcmp(argv[i], "--fused")) fused = 1;
        else if (!strcmp(argv[i], "--epilogue")) epilogue = 1;
        else {
            fprintf(stderr, "usage: bench_cuda_step [--steps N] [--batch B] [--out DIR] [--backend NAME] [--profile] "
                    "[--attention ops|per-example|batched] [--fused] [--epilogue]\n");
            return 2;
        }
    }
    if (steps < 1 || steps > MAX_STEPS || batch < 1 || batch > MAX_BATCH) { fprintf(stderr, "bench_cuda_step: bad --steps/--batch\n"); return 2; }
    int count = 0, on_cuda = !strcmp(backend_name, "cuda");
    struct cudaDeviceProp prop;
    memset(&prop, 0, sizeof prop);
    snprintf(prop.name, sizeof prop.name, "%s", backend_name);
    if (on_cuda) {
        if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
            fprintf(stderr, "bench_cuda_step: no CUDA device: skipped\n");
            return 77;   /* tests/run-bench.sh: skipped, not failed (device-check.sh: a failure) */
        }
        cudaGetDeviceProperties(&prop, 0);
    }
    char mini[] = "/tmp/mpx-cuda-minilm-XXXXXX", base[] = "/tmp/mpx-cuda-bert-base-XXXXXX";
    if (model_dir(mini, minilm_json) || model_dir(base, bench_bert_base_json)) { perror("bench_cuda_step: model folder"); return 1; }
    double ceil32 = NAN, ceil16 = NAN, ceilbf = NAN;
    if (on_cuda) {
        ceil32 = ceiling_tflops(CUDA_R_32F, batch);
        ceil16 = ceiling_tflops(CUDA_R_16F, batch);
        ceilbf = ceiling_tflops(CUDA_R_16BF, batch);
    }
    static const struct { const char *prec, *gemm; } P[5] = {
        { "fp32", "fp32" }, { "amp", "fp16" }, { "fp16-scaled", "fp16" }, { "bf16-master", "bf16" }, { "pure-bf16", "bf16" } };
    const struct { const char *name, *dir; } M[2] = { { "minilm-sized", mini }, { "bert-base-sized", base } };
    result res[2][5];
    memset(res, 0, sizeof res);
    int rc = 0;
    for (int m = 0; m < 2; m++)
        for (int p = 0; p < 5; p++) {
            result *r = &res[m][p];
            r->model = M[m].name;
            r->prec = P[p].prec;
            r->gemm = P[p].gemm;
            r->ceiling = !strcmp(P[p].gemm, "fp32") ? ceil32 : !strcmp(P[p].gemm, "fp16") ? ceil16 : ceilbf;
            /* the profile: fp32 and bf16-master, where the 16-bit step's time goes */
            run_case(r, M[m].dir, batch, steps, profile && (p == 0 || p == 3));
            if (!r->ok) { fprintf(stderr, "bench_cuda_step: %s %s: %s\n", r->model, r->prec, r->err); rc = 1; }
            else fprintf(stderr, "  %s %s: %.4f s/step\n", r->model, r->prec, r->step_s);
        }
    /* the committed anchors are the device's: a check of this program on another backend
     * writes files only where --out says */
    if (!out_dir && on_cuda) out_dir = "results/anchors";
    char md_path[512] = "", js_path[512] = "";
    FILE *md = NULL, *js = NULL;
    if (out_dir) {
        char part[512];   /* make DIR and the folders above it, as mkdir -p */
        snprintf(part, sizeof part, "%s", out_dir);
        for (char *c = part + 1; *c; c++)
            if (*c == '/') { *c = 0; mkdir(part, 0777); *c = '/'; }
        mkdir(part, 0777);
        snprintf(md_path, sizeof md_path, "%s/cuda_step.md", out_dir);
        snprintf(js_path, sizeof js_path, "%s/cuda_step.json", out_dir);
        md = fopen(md_path, "w");
        js = md ? fopen(js_path, "w") : NULL;
        if (!md || !js) {
            fprintf(stderr, "bench_cuda_step: cannot write %s: %s\n", md ? js_path : md_path, strerror(errno));
            if (md) fclose(md);
            md = NULL;
            out_dir = NULL;
            rc = 1;
        }
    }
    FILE *outs[2] = { stdout, md };
    for (int o = 0; o < 2; o++) {
        FILE *f = outs[o];
        if (!f) continue;
        fprintf(f, "One training step (forward + backward + adam, clip 1.0, dropout on), batch %d x %d, random weights, "
                   "%s (sm_%d%d), median of %d steps.\n"
                   "cuBLAS ceiling (FFN GEMM %d x 3072 x 768, fp32 compute, same process): fp32 %.1f, fp16 %.1f, bf16 %.1f TFLOP/s.\n\n",
                batch, SEQ, prop.name, prop.major, prop.minor, steps, batch * SEQ, ceil32, ceil16, ceilbf);
        fprintf(f, "| model | policy | GEMM dtype | step s | tokens/s | GEMM TFLOP/s | of cuBLAS ceiling | step / fp32 step | state MiB |\n"
                   "|---|---|---|---|---|---|---|---|---|\n");
        for (int m = 0; m < 2; m++)
            for (int p = 0; p < 5; p++) {
                const result *r = &res[m][p];
                if (!r->ok) { fprintf(f, "| %s | %s | %s | failed: %s | | | | | |\n", r->model, r->prec, r->gemm, r->err); continue; }
                double tf = r->flop / r->step_s * 1e-12;
                double vs32 = res[m][0].ok ? r->step_s / res[m][0].step_s : NAN;
                fprintf(f, "| %s | %s | %s | %.4f | %.0f | %.1f | %.1f%% | %.2f | %.0f |\n", r->model, r->prec, r->gemm,
                        r->step_s, batch * SEQ / r->step_s, tf, 100.0 * tf / r->ceiling, vs32,
                        (double)r->persistent / (1024.0 * 1024.0));
            }
    }
    if (js) {
        fprintf(js, "{\n  \"device\": \"%s\", \"batch\": %d, \"seq\": %d, \"steps\": %d,\n"
                    "  \"ceiling_tflops\": {\"fp32\": %.3f, \"fp16\": %.3f, \"bf16\": %.3f},\n  \"cases\": [\n",
                prop.name, batch, SEQ, steps, ceil32, ceil16, ceilbf);
        for (int m = 0; m < 2; m++)
            for (int p = 0; p < 5; p++) {
                const result *r = &res[m][p];
                fprintf(js, "    {\"model\": \"%s\", \"policy\": \"%s\", \"gemm\": \"%s\", \"ok\": %s, \"step_s\": %.6f, "
                            "\"gemm_flop\": %.6e, \"params\": %zu, \"state_bytes\": %zu, \"loss\": %.6f}%s\n",
                        r->model, r->prec, r->gemm, r->ok ? "true" : "false", r->ok ? r->step_s : 0.0, r->flop, r->numel,
                        r->persistent, r->ok ? r->loss : 0.0, m == 1 && p == 4 ? "" : ",");
            }
        fprintf(js, "  ]\n}\n");
    }
    if (md) fclose(md);
    if (js) fclose(js);
    if (out_dir) printf("\nwritten: %s, %s\n", md_path, js_path);
    else if (!rc) printf("\nnot written: on backend %s, results/anchors keeps the device's numbers (--out DIR writes these)\n",
                backend_name);
    char rm[256];
    snprintf(rm, sizeof rm, "rm -rf %s %s", mini, base);
    if (system(rm) != 0) fprintf(stderr, "bench_cuda_step: could not remove the model folders\n");
    return rc;
}
