/* Benchmark (not a test): one training step — forward + backward + Adam, batch 3 x 384,
 * dropout on — of MiniLM-L6 (the checkpoint of `make model`) and of a random model of
 * bert-base's sizes, through a session and mpx_train_one_step: the code path `mpx run`
 * takes. Prints, per model: tokens/s, GFLOP/s over the step's GEMM FLOPs, the ratio to
 * OpenBLAS sgemm timed in the same process (the "ceiling"), peak RSS, counted memory by
 * role, each policy's step time over fp32's (wall and CPU time: on shared cores the CPU
 * seconds a step takes, all threads, move far less than its wall time) and, when PyTorch
 * imports, the ratio to PyTorch as users run it on the same step (tests/bench_step_torch.py
 * --serve, same threads; sdpa attention; fp32 for fp32, torch.autocast bf16 for bf16-master
 * and for bf16-master+amx, which is bf16-master with backend.cpu.bf16_gemm = "amx"; fp16 for
 * amp), and for fp32 also PyTorch eager, whose steps run alternately with mpx's timed ones.
 *
 * GEMM FLOPs of a step = 6 x (forward GEMM multiply-adds): forward 2 FLOPs per MAC, and
 * backward twice forward (dX and dW for each linear; dP, dV, dQ, dK for attention).
 * Forward MACs = T x sum(in x out over the linear weights, QA head included)
 *              + layers x 2 x B x S^2 x hidden (QK^T and PV), T = B x S.
 *
 * Each case runs in a child process (its own peak RSS):
 *   bench_step [--steps N] [--no-torch] [--kernels env|detected|both] [--pad F] [--plugin-dir DIR]
 *              [-s KEY=VALUE]...   all + tables
 * --kernels: OpenBLAS's kernels as the environment's OPENBLAS_CORETYPE sets them (env), as
 * OpenBLAS itself picks them with the variable unset (detected), or both, one table each
 * (the default; with the variable unset the two are one). PyTorch runs once per model.
 *   bench_step --case NAME CHECKPOINT PRECISION STEPS [--pad F] [--plugin-dir DIR] [--torch CONFIG_JSON]
 *              [-s KEY=VALUE]...
 * --torch: PyTorch alongside, one process per OpenMP wait policy, one of its steps (and
 * evaluation forwards) after each of mpx's timed ones (the parent passes it in every case
 * of each model's first kernel set, the peer configured per policy).
 * --pad F masks the last F of every window (input_mask 0, token id 0), as a padded batch
 * of real windows is (bench_padding: 24 % of a shuffled SQuAD batch's tokens at 384):
 * the attention then softmaxes over masked positions. Default 0: every mask 1.
 * Run from the repository root (plugins from build/plugins unless --plugin-dir). */
#define _GNU_SOURCE
#include <cblas.h>
#include <fcntl.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "../core/engine/session.h"
#include "../core/engine/train.h"
#include "../core/engine/update_window.h"
#include "bench_profile.h"
#include "bench_util.h"

#define BATCH 3
#define SEQ 384
#define MAX_STEPS 32
#define MAX_OVR 32

/* ---- a synthetic task: one fixed batch of random tokens, every mask 1 ---- */

typedef struct synth {
    int32_t ids[BATCH * SEQ], seg[BATCH * SEQ], mask[BATCH * SEQ], start[BATCH], end[BATCH];
    mpx_itensor t[5];
} synth;

static int synth_next(mpx_task *t, mpx_session *s, int rows, mpx_batch *out, int64_t *tokens,
                      char *err, size_t errlen)
{
    (void)s;
    if (rows != BATCH) { snprintf(err, errlen, "bench: train.batch_size must be %d", BATCH); return -1; }
    synth *d = t->self;
    *out = (mpx_batch){ .size = sizeof *out, .tensors = d->t, .n_tensors = 5, .training = 1 };
    *tokens = BATCH * SEQ;
    return 0;
}

/* --pad: the fraction of each window that is padding */
static double g_pad;

static void synth_init(synth *d, int vocab)
{
    uint32_t x = 12345;
    const int valid = SEQ - (int)(g_pad * SEQ + 0.5);
    for (int i = 0; i < BATCH * SEQ; i++) {
        x = x * 1664525u + 1013904223u;
        d->ids[i] = 1000 + (int32_t)((x >> 8) % (uint32_t)(vocab - 1000));
        d->seg[i] = i % SEQ >= SEQ / 4;
        d->mask[i] = i % SEQ < valid;
        if (!d->mask[i]) d->ids[i] = d->seg[i] = 0;
    }
    for (int b = 0; b < BATCH; b++) {
        x = x * 1664525u + 1013904223u;
        d->start[b] = (int32_t)((x >> 8) % (uint32_t)valid);
        d->end[b] = (int32_t)((x >> 16) % (uint32_t)valid);
    }
    d->t[0] = (mpx_itensor){ "input_ids", d->ids, 2, { BATCH, SEQ } };
    d->t[1] = (mpx_itensor){ "segment_ids", d->seg, 2, { BATCH, SEQ } };
    d->t[2] = (mpx_itensor){ "input_mask", d->mask, 2, { BATCH, SEQ } };
    d->t[3] = (mpx_itensor){ "start_positions", d->start, 1, { BATCH, 0 } };
    d->t[4] = (mpx_itensor){ "end_positions", d->end, 1, { BATCH, 0 } };
}

/* ---- FLOPs from the parameter table ---- */

static double step_gemm_flop(mpx_session *s, int *vocab)
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
        if (p->ndim == 2 && p->group != MPX_GROUP_EMBEDDING)
            lin += (double)p->shape[0] * (double)p->shape[1];
    }
    double T = BATCH * SEQ;
    double macs = T * lin + layers * 2.0 * BATCH * (double)SEQ * SEQ * (double)hidden;
    return 6.0 * macs;
}

/* ---- the sgemm ceiling: a bert-base-sized FFN GEMM (X W^T, 1152 x 3072 x 768), timed
 * once before each measured step so that the two see the same machine (other processes'
 * load changes both alike), two ways: cblas_sgemm with OpenBLAS's own threads, and the
 * backend's gemm op on fp32 operands (its linear kernel, cpu_gemm_linear.c, unless
 * backend.cpu.linear_gemm = "openblas"). The ceiling is the faster of the two: a step
 * whose GEMMs beat OpenBLAS is measured against its own kernel's rate. ---- */

typedef struct ceiling { float *a, *b, *c; int threads; const mpx_ops *ops; void *be; } ceiling;

#define CEIL_M (BATCH * SEQ)
#define CEIL_N 3072
#define CEIL_K 768

static int ceiling_open(ceiling *c, int threads)
{
    c->a = malloc((size_t)CEIL_M * CEIL_K * 4);
    c->b = malloc((size_t)CEIL_N * CEIL_K * 4);
    c->c = malloc((size_t)CEIL_M * CEIL_N * 4);
    c->threads = threads > 0 ? threads : 1;
    if (!c->a || !c->b || !c->c) return -1;
    for (size_t i = 0; i < (size_t)CEIL_M * CEIL_K; i++) c->a[i] = (float)(i % 97) * 0.01f - 0.4f;
    for (size_t i = 0; i < (size_t)CEIL_N * CEIL_K; i++) c->b[i] = (float)(i % 89) * 0.01f - 0.4f;
    return 0;
}

static void ceiling_close(ceiling *c) { free(c->a); free(c->b); free(c->c); }

/* GFLOP/s of cblas_sgemm, and of the backend's gemm op (*op_gf; NaN if it failed), each
 * the faster of two calls. The op goes first: after a threaded cblas_sgemm OpenBLAS's
 * workers spin (sched_yield) for about 2^28 cycles before they sleep, and on 2 cores
 * that spinning took the op's second core (its rate read 30-40 % low) and would take the
 * step's; so after cblas_sgemm this waits 0.3 s for them to sleep. */
static double ceiling_run(ceiling *c, double *op_gf)
{
    mpx_gemm g = { .trans_b = 1, .m = CEIL_M, .n = CEIL_N, .k = CEIL_K, .alpha = 1.0f, .a = mpx_a(c->a, MPX_F32),
                   .lda = CEIL_K, .b = mpx_a(c->b, MPX_F32), .ldb = CEIL_K, .c = mpx_a(c->c, MPX_F32), .ldc = CEIL_N,
                   .batch = 1, .compute = MPX_F32 };
    double dt_op = INFINITY, dt = INFINITY;
    int bad = 0;
    for (int r = 0; r < 2 && !bad; r++) {
        double t1 = now();
        bad = c->ops->gemm(c->be, &g);
        dt_op = fmin(dt_op, now() - t1);
    }
    openblas_set_num_threads(c->threads);
    for (int r = 0; r < 2; r++) {
        double t0 = now();
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, CEIL_M, CEIL_N, CEIL_K, 1.0f, c->a, CEIL_K,
                    c->b, CEIL_K, 0.0f, c->c, CEIL_N);
        dt = fmin(dt, now() - t0);
    }
    openblas_set_num_threads(1);   /* as the cpu backend keeps it */
    struct timespec idle = { 0, 300000000 };
    nanosleep(&idle, NULL);
    *op_gf = bad ? NAN : 2.0 * CEIL_M * CEIL_N * CEIL_K / dt_op * 1e-9;
    return 2.0 * CEIL_M * CEIL_N * CEIL_K / dt * 1e-9;
}

/* ---- PyTorch alongside: tests/bench_step_torch.py --serve, one process per OpenMP wait
 * policy (PyTorch's default, whose threads spin a while before they sleep, and
 * "passive"), each told to run one step or one evaluation forward right after each of
 * mpx's timed ones. Timed alternately, the two see the same load: on a shared host whose
 * speed drifts over minutes, a PyTorch run minutes apart from mpx's moved the ratio more
 * than the code did (docs/SPEED.md). ---- */

#define N_POLICIES 2
static const char *const g_policies[N_POLICIES] = { "", "passive" };

/* The PyTorch configurations a case is measured against, the matching one first: as users
 * run PyTorch, transformers' default attention (sdpa), fp32 for fp32 and torch.autocast
 * for the 16-bit policies (bf16 for the bf16 ones, fp16 for amp and fp16-scaled); the fp32
 * case also against eager attention (the comparison of the earlier speed issues). */
#define N_PEERS 2
#define N_SRV (N_PEERS * N_POLICIES)
typedef struct peer { const char *attn, *autocast, *label; } peer;

static int peers_of(const char *prec, peer out[N_PEERS])
{
    if (!strcmp(prec, "fp32")) {
        out[0] = (peer){ "sdpa", "none", "sdpa fp32" };
        out[1] = (peer){ "eager", "none", "eager fp32" };
        return 2;
    }
    if (strstr(prec, "bf16")) { out[0] = (peer){ "sdpa", "bf16", "sdpa autocast bf16" }; return 1; }
    if (!strcmp(prec, "amp") || strstr(prec, "fp16")) { out[0] = (peer){ "sdpa", "fp16", "sdpa autocast fp16" }; return 1; }
    return 0;
}

typedef struct torch_srv {
    const peer *cfg;   /* its attention and autocast */
    pid_t pid;
    FILE *in, *out;
    int ok;   /* started and answering */
    int n_step, n_eval;
    double step[MAX_STEPS], step_cpu[MAX_STEPS], eval[MAX_STEPS], eval_cpu[MAX_STEPS];
} torch_srv;

/* Starts the server (its warm-up runs while the caller sets up); 0 when it runs. */
static int torch_start(torch_srv *t, const char *config_json, int threads, const char *policy, const peer *cfg)
{
    int to[2], from[2];
    memset(t, 0, sizeof *t);
    t->pid = -1;
    t->cfg = cfg;
    /* close-on-exec: a second server or any other child must not hold this one's pipes
     * (dup2 onto 0 and 1 clears the flag for the server itself) */
    if (pipe2(to, O_CLOEXEC)) return -1;
    if (pipe2(from, O_CLOEXEC)) { close(to[0]), close(to[1]); return -1; }
    /* everything the child needs is made before fork: this process has threads, and
     * between fork and exec the child calls only what is safe there */
    char th[16], pad[32], pol[64];
    snprintf(th, sizeof th, "%d", threads);
    snprintf(pad, sizeof pad, "%.17g", g_pad);
    snprintf(pol, sizeof pol, "OMP_WAIT_POLICY=%s", policy);
    char *args[24];
    int n = 0;
    args[n++] = "env";
    if (policy[0]) args[n++] = pol;
    else args[n++] = "-u", args[n++] = "OMP_WAIT_POLICY";
    args[n++] = "python3", args[n++] = "tests/bench_step_torch.py", args[n++] = "--config";
    args[n++] = (char *)config_json, args[n++] = "--threads", args[n++] = th, args[n++] = "--pad", args[n++] = pad;
    args[n++] = "--attn", args[n++] = (char *)cfg->attn, args[n++] = "--autocast", args[n++] = (char *)cfg->autocast;
    args[n++] = "--serve", args[n] = NULL;
    fflush(stdout);
    pid_t pid = fork();
    if (pid < 0) { close(to[0]), close(to[1]), close(from[0]), close(from[1]); return -1; }
    if (pid == 0) {
        int null = open("/dev/null", O_WRONLY);
        if (dup2(to[0], 0) < 0 || dup2(from[1], 1) < 0 || (null >= 0 && dup2(null, 2) < 0)) _exit(127);
        close(to[0]), close(to[1]), close(from[0]), close(from[1]);
        if (null > 2) close(null);
        execvp("env", args);
        _exit(127);
    }
    close(to[0]), close(from[1]);
    t->pid = pid;
    t->in = fdopen(to[1], "w");
    t->out = fdopen(from[0], "r");
    if (!t->in || !t->out) {
        if (t->in) fclose(t->in); else close(to[1]);
        if (t->out) fclose(t->out); else close(from[0]);
        t->in = t->out = NULL;
        return -1;
    }
    return 0;
}

/* Waits for "ready"; 0 when the server is up. */
static int torch_ready(torch_srv *t)
{
    char line[256];
    t->ok = t->out && fgets(line, sizeof line, t->out) && strncmp(line, "ready ", 6) == 0;
    return t->ok ? 0 : -1;
}

/* One step ("step") or evaluation forward ("eval") in the server, its seconds recorded. */
static void torch_one(torch_srv *t, const char *cmd)
{
    char line[256], word[16];
    double wall, cpu;
    if (!t->ok) return;
    if (fprintf(t->in, "%s\n", cmd) < 0 || fflush(t->in) || !fgets(line, sizeof line, t->out) ||
        sscanf(line, "%15s %lf %lf", word, &wall, &cpu) != 3 || strcmp(word, cmd) != 0) {
        t->ok = 0;
        return;
    }
    int eval = strcmp(cmd, "eval") == 0, *n = eval ? &t->n_eval : &t->n_step;
    if (*n >= MAX_STEPS) return;
    (eval ? t->eval : t->step)[*n] = wall;
    (eval ? t->eval_cpu : t->step_cpu)[*n] = cpu;
    (*n)++;
}

static void torch_stop(torch_srv *t)
{
    if (t->in) {
        fputs("quit\n", t->in);
        fclose(t->in);
    }
    if (t->out) fclose(t->out);
    if (t->pid > 0) waitpid(t->pid, NULL, 0);
    t->in = t->out = NULL;
    t->pid = -1;
}

/* Forward + backward alone (no optimizer), the model's share of the step. */
static int time_model(mpx_session *s, mpx_task *t, int steps, double *median_s)
{
    mpx_instance *m = &s->inst[MPX_KIND_MODEL];
    const mpx_model_vtable *mv = &m->rec->vt.model;
    double times[MAX_STEPS];
    char err[256];
    for (int i = 0; i < steps; i++) {
        mpx_batch b;
        int64_t tok;
        if (t->next(t, s, BATCH, &b, &tok, err, sizeof err)) return -1;
        b.tick = (uint32_t)(1000 + i);
        mpx_forward_out fo = { .size = sizeof fo };
        double t0 = now();
        if (mv->forward(m->self, &b, &fo) || mv->backward(m->self, &b, 1.0f, 0)) return -1;
        times[i] = now() - t0;
    }
    *median_s = median(times, steps);
    return 0;
}

/* The evaluation forward: eval mode (no dropout), no labels, on a forward-only bind. */
static int time_eval(mpx_session *s, mpx_task *t, int steps, double *median_s, double *sum_s, torch_srv *torch,
                     int n_srv)
{
    mpx_instance *m = &s->inst[MPX_KIND_MODEL];
    const mpx_model_vtable *mv = &m->rec->vt.model;
    double times[MAX_STEPS];
    char err[256];
    for (int i = -1; i < steps; i++) {   /* -1: warm-up */
        mpx_batch b;
        int64_t tok;
        if (t->next(t, s, BATCH, &b, &tok, err, sizeof err)) return -1;
        b.training = 0;
        b.n_tensors = 3;   /* input_ids, segment_ids, input_mask */
        mpx_forward_out fo = { .size = sizeof fo };
        bench_profile_enable(i >= 0);
        double t0 = now();
        int rc = mv->forward(m->self, &b, &fo);
        if (i >= 0) times[i] = now() - t0;
        bench_profile_enable(0);
        if (rc) return -1;
        for (int p = 0; torch && i >= 0 && p < n_srv; p++) torch_one(&torch[p], "eval");
    }
    *sum_s = 0;
    for (int i = 0; i < steps; i++) *sum_s += times[i];
    *median_s = median(times, steps);
    return 0;
}

static int write_cfg(char *path, size_t len, const char *ckpt, const char *prec)
{
    snprintf(path, len, "/tmp/mpx-bench-step-%d.cfg", (int)getpid());
    FILE *f = fopen(path, "w");
    if (!f) return -1;
    fprintf(f, "run = { name = \"bench_step\"; seed = 42; };\n"
               "data = { task = \"toy\"; };\n"
               "model = { plugin = \"bert-qa\"; checkpoint = \"%s\"; };\n"
               "train = { batch_size = %d; gradient_clipping = 1.0; };\n"
               "precision = { plugin = \"%s\"; };\n"
               "optimizer = { plugin = \"adam\"; lr = 1e-4; adam = { weight_decay = 0.01; }; };\n",
            ckpt, BATCH, prec);
    return fclose(f);
}

static double mib(size_t b) { return (double)b / (1024.0 * 1024.0); }

/* CPU seconds of the whole process, every thread (user + system): beside the wall time,
 * the work a step did; on shared cores it moves far less than the wall clock. */
static double cpu_time(void)
{
    struct rusage r;
    if (getrusage(RUSAGE_SELF, &r)) return NAN;
    return (double)(r.ru_utime.tv_sec + r.ru_stime.tv_sec) + 1e-6 * (double)(r.ru_utime.tv_usec + r.ru_stime.tv_usec);
}

/* /proc/stat's CPU time, all cores: what the hypervisor gave to other guests ("steal",
 * the 8th field; 0 on bare metal) and the total, in clock ticks. On a shared host the
 * bench's times move with its neighbours' load; steal says how much. */
typedef struct jiffies { unsigned long long steal, total; } jiffies;

static int read_jiffies(jiffies *j)
{
    unsigned long long v[8] = { 0 };
    FILE *f = fopen("/proc/stat", "r");
    if (!f) return -1;
    int n = fscanf(f, "cpu %llu %llu %llu %llu %llu %llu %llu %llu", &v[0], &v[1], &v[2], &v[3], &v[4], &v[5], &v[6],
                   &v[7]);
    fclose(f);
    if (n < 4) return -1;
    j->steal = n >= 8 ? v[7] : 0;
    j->total = 0;
    for (int i = 0; i < n; i++) j->total += v[i];
    return 0;
}

/* Steal since `since`, in percent of all CPU time since then; NAN when unknown. */
static double steal_pct(const jiffies *since)
{
    jiffies now;
    if (read_jiffies(&now) || now.total <= since->total) return NAN;
    return 100.0 * (double)(now.steal - since->steal) / (double)(now.total - since->total);
}

/* One case in this process: prints human lines and one "result" line for the parent. */
static int run_case(const char *name, const char *ckpt, const char *prec, int steps,
                    const char *plugin_dir, const char *const *ovr, size_t n_ovr, const char *torch_json)
{
    char cfg[256], err[8192] = "", policy[32];
    torch_srv torch[N_SRV];   /* PyTorch alongside (torch_json given): peer k, wait policy p at k N_POLICIES + p */
    peer peers[N_PEERS];
    int with_torch = 0, n_peers = torch_json ? peers_of(prec, peers) : 0, n_srv = n_peers * N_POLICIES;
    for (int p = 0; p < N_SRV; p++) memset(&torch[p], 0, sizeof torch[p]), torch[p].pid = -1;
    /* "POLICY+amx": the policy with backend.cpu.bf16_gemm = "amx" (the AMX path, opted in) */
    const char *ovr_all[MAX_OVR + 1];
    size_t n_all = 0;
    for (size_t i = 0; i < n_ovr && i < MAX_OVR; i++) ovr_all[n_all++] = ovr[i];
    snprintf(policy, sizeof policy, "%s", prec);
    char *plus = strchr(policy, '+');
    if (plus && !strcmp(plus, "+amx")) {
        *plus = 0;
        ovr_all[n_all++] = "backend.cpu.bf16_gemm=\"amx\"";
    }
    ovr = ovr_all;
    n_ovr = n_all;
    if (write_cfg(cfg, sizeof cfg, ckpt, policy)) { fprintf(stderr, "bench_step: cannot write %s\n", cfg); return 1; }
    const char *dirs[] = { plugin_dir };
    mpx_session s;
    mpx_task t = { .name = "bench" };
    synth d;
    int rc = 1;
    if (mpx_session_open(&s, dirs, 1)) { fprintf(stderr, "bench_step: cannot scan %s\n", plugin_dir); return 1; }
    if (mpx_session_configure(&s, cfg, ovr, n_ovr, err, sizeof err) ||
        mpx_session_check_compat(&s, err, sizeof err) || mpx_session_start(&s, err, sizeof err) ||
        bench_profile_install(&s) || mpx_session_alloc_state(&s, BATCH, SEQ, err, sizeof err))
        goto out;
    int vocab = 0;
    double flop = step_gemm_flop(&s, &vocab);
    synth_init(&d, vocab);
    t.self = &d;
    t.next = synth_next;
    t.max_batch = BATCH;
    t.max_seq = SEQ;
    const mpx_backend_vtable *bv = &s.inst[MPX_KIND_BACKEND].rec->vt.backend;
    int threads = 0;
    sscanf(bv->describe(s.be), "cpu: %d", &threads);
    ceiling ce;
    if (ceiling_open(&ce, threads)) { snprintf(err, sizeof err, "out of memory for the sgemm ceiling"); goto out; }
    ce.ops = bv->ops;
    ce.be = s.be;
    if (torch_json) {   /* started now: their set-up and warm-up overlap mpx's, untimed */
        signal(SIGPIPE, SIG_IGN);   /* a server that died answers nothing; it must not end this process */
        for (int p = 0; p < n_srv; p++)
            if (torch_start(&torch[p], torch_json, threads, g_policies[p % N_POLICIES], &peers[p / N_POLICIES]) == 0)
                with_torch = 1;
    }
    double times[MAX_STEPS], cpu[MAX_STEPS], ceil_gf[MAX_STEPS], ceil_op[MAX_STEPS], loss = 0, unused_gf;
    int skipped = 0;
    if (steps > MAX_STEPS) steps = MAX_STEPS;
    ceiling_run(&ce, &unused_gf);   /* warm-up */
    for (int p = 0; with_torch && p < n_srv; p++)
        if (torch_ready(&torch[p]))
            printf("  PyTorch alongside (%s, OMP_WAIT_POLICY=%s) did not start: tests/bench_step_torch.py --serve\n",
                   torch[p].cfg->label, g_policies[p % N_POLICIES][0] ? g_policies[p % N_POLICIES] : "unset");
    jiffies j0 = { 0, 0 };
    int have_j = read_jiffies(&j0) == 0;
    for (int i = -1; i < steps; i++) {   /* step -1: warm-up (first touch, workspaces) */
        if (i >= 0) ceil_gf[i] = ceiling_run(&ce, &ceil_op[i]);
        bench_profile_enable(i >= 0);
        double t0 = now(), c0 = cpu_time();
        if (mpx_train_one_step(&s, &t, i + 1, 1e-4, 1.0, NULL, &loss, &skipped, err, sizeof err)) {
            ceiling_close(&ce);
            goto out;
        }
        if (i >= 0) times[i] = now() - t0, cpu[i] = cpu_time() - c0;
        bench_profile_enable(0);
        for (int p = 0; with_torch && i >= 0 && p < n_srv; p++) torch_one(&torch[p], "step");
    }
    ceiling_close(&ce);
    double steal = have_j ? steal_pct(&j0) : NAN;
    double gemm_s = bench_profile_gemm_s() / steps;   /* per step, in the GEMM ops */
    double model_s = NAN;
    if (time_model(&s, &t, steps, &model_s)) {
        snprintf(err, sizeof err, "%s", "forward/backward alone failed");
        goto out;
    }
    /* the same steps with diagnostics on every step (train.diagnostics, log_every 1);
     * the memory figures are taken before, without the diagnostics' own buffers */
    size_t scratch_now = s.bytes[MPX_ROLE_SCRATCH], scratch_peak = s.peak[MPX_ROLE_SCRATCH];
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    double diag_times[MAX_STEPS];
    mpx_diagnostics diag;
    char diag_dir[] = "/tmp/mpx-bench-diag-XXXXXX";
    if (!mkdtemp(diag_dir) || mpx_diag_open(&diag, &s, diag_dir, err, sizeof err)) goto out;
    for (int i = 0; i < steps; i++) {
        double t0 = now();
        if (mpx_train_one_step(&s, &t, steps + i + 1, 1e-4, 1.0, &diag, &loss, &skipped, err, sizeof err)) {
            mpx_diag_close(&diag, &s);
            goto out;
        }
        diag_times[i] = now() - t0;
    }
    mpx_diag_close(&diag, &s);
    char rm[128];
    snprintf(rm, sizeof rm, "rm -rf %s", diag_dir);
    if (system(rm) != 0) fprintf(stderr, "bench_step: could not remove %s\n", diag_dir);
    double diag_s = median(diag_times, steps);
    /* last, as mpx eval runs it: the model bound forward-only (no grads) */
    double eval_s = NAN, eval_sum = 0;
    /* PyTorch's step over mpx's, step by step (before the medians sort `times`) */
    double paired[N_SRV][MAX_STEPS];
    for (int p = 0; p < n_srv; p++)
        for (int i = 0; i < torch[p].n_step && i < steps; i++) paired[p][i] = torch[p].step[i] / times[i];
    double tmin = times[0];
    for (int i = 1; i < steps; i++) tmin = times[i] < tmin ? times[i] : tmin;
    double step_s = median(times, steps), ceil_blas = median(ceil_gf, steps), ceil_mpx = median(ceil_op, steps);
    double ceil = ceil_mpx > ceil_blas ? ceil_mpx : ceil_blas, cpu_s = median(cpu, steps);
    size_t core_scratch = mpx_update_buffer_bytes(&s);   /* the fp32 gradient and update (update_window.h) */
    size_t model_scratch = scratch_now - core_scratch;
    size_t persistent = 0;
    for (int r = 0; r < MPX_ROLE_SCRATCH; r++) persistent += s.peak[r];
    printf("  %s %s: %s; %zu parameters; step median %.3f s (min %.3f, %d steps), last loss %.9g%s\n",
           name, prec, bv->describe(s.be), s.numel, step_s, tmin, steps, loss, skipped ? " (skipped)" : "");
    printf("  of which model forward + backward %.3f s, the rest (overflow check, clip, optimizer, "
           "write-back) %.3f s; CPU time a step (all threads) median %.3f s\n", model_s, step_s - model_s, cpu_s);
    if (!isnan(steal))
        printf("  CPU time the hypervisor gave to other guests during these steps (steal, /proc/stat): %.1f %%%s\n",
               steal, steal >= 5.0 ? " -- the host is shared: times here vary with its load" : "");
    double sum_s = 0;
    for (int i = 0; i < steps; i++) sum_s += times[i];
    bench_profile_print("a step's", steps, sum_s);
    bench_profile_reset();
    mpx_instance *mi = &s.inst[MPX_KIND_MODEL];
    mpx_model_bind fb = { .size = sizeof fb, .weights = s.weights, .grads = mpx_a(NULL, s.grads.t),
                          .offsets = s.offsets, .numel = s.numel };
    if (mi->rec->vt.model.bind(mi->self, &fb, BATCH, SEQ) || time_eval(&s, &t, steps, &eval_s, &eval_sum, with_torch ? torch : NULL, n_srv)) {
        mpx_session_error(&s, MPX_KIND_MODEL, err, sizeof err);
        goto out;
    }
    printf("  evaluation forward (forward-only bind, no dropout, no labels): median %.3f s, %.2f windows/s\n", eval_s,
           BATCH / eval_s);
    bench_profile_print("an evaluation forward's", steps, eval_sum);
    /* PyTorch's figures: each peer's, each policy's medians; the table takes the faster policy's */
    double torch_s[N_PEERS], torch_cpu_s[N_PEERS], torch_eval_s[N_PEERS], torch_eval_cpu_s[N_PEERS];
    double paired_med = NAN, paired_lo = NAN, paired_hi = NAN;
    for (int k = 0; k < N_PEERS; k++) torch_s[k] = torch_cpu_s[k] = torch_eval_s[k] = torch_eval_cpu_s[k] = NAN;
    for (int p = 0; with_torch && p < n_srv; p++) {
        torch_srv *tp = &torch[p];
        int k = p / N_POLICIES, w = p % N_POLICIES;
        const char *pol = g_policies[w][0] ? g_policies[w] : "unset (PyTorch's default)";
        if (tp->n_step < steps || tp->n_eval < steps) {
            printf("  PyTorch alongside (%s), OMP_WAIT_POLICY=%s: %d of %d steps and %d of %d forwards answered; not used\n",
                   tp->cfg->label, pol, tp->n_step, steps, tp->n_eval, steps);
            continue;
        }
        double tmin_t = tp->step[0];
        for (int i = 1; i < steps; i++) tmin_t = fmin(tmin_t, tp->step[i]);
        double st = median(tp->step, steps), sc = median(tp->step_cpu, steps);
        double ev = median(tp->eval, steps), ec = median(tp->eval_cpu, steps);
        double pm = median(paired[p], steps), plo = paired[p][0], phi = paired[p][steps - 1];   /* sorted */
        printf("  PyTorch %s alongside (tests/bench_step_torch.py --serve, OMP_WAIT_POLICY=%s, one of its steps "
               "after each of these): step median %.3f s (min %.3f), CPU %.3f s; evaluation forward median %.3f s, "
               "CPU %.3f s; its step / mpx's, step by step: median %.2f (%.2f-%.2f)\n",
               tp->cfg->label, pol, st, tmin_t, sc, ev, ec, pm, plo, phi);
        if (isnan(torch_s[k]) || st < torch_s[k]) {
            torch_s[k] = st;
            if (k == 0) paired_med = pm, paired_lo = plo, paired_hi = phi;
        }
        if (isnan(torch_eval_s[k]) || ev < torch_eval_s[k]) torch_eval_s[k] = ev;
        if (g_policies[w][0]) torch_cpu_s[k] = sc, torch_eval_cpu_s[k] = ec;   /* passive: waiting threads sleep */
    }
    printf("  with diagnostics on the step: median %.3f s, +%.3f s (%.1f%%; on every log_every-th step only)\n",
           diag_s, diag_s - step_s, 100.0 * (diag_s - step_s) / step_s);
    printf("  counted bytes (peak by role): weights %.1f MiB, grads %.1f, grad_acc %.1f, master %.1f, "
           "opt_state %.1f, scratch %.1f (model activations %.1f MiB, core fp32 grad/update %.1f MiB)\n",
           mib(s.peak[MPX_ROLE_WEIGHTS]), mib(s.peak[MPX_ROLE_GRADS]), mib(s.peak[MPX_ROLE_GRAD_ACC]),
           mib(s.peak[MPX_ROLE_MASTER]), mib(s.peak[MPX_ROLE_OPT_STATE]), mib(scratch_peak),
           mib(model_scratch), mib(core_scratch));
    printf("  sgemm ceiling %dx%dx%d (median of %d, beside the steps; each the faster of 2 calls): cblas_sgemm %.1f GFLOP/s, the backend's gemm "
           "op %.1f GFLOP/s\n", CEIL_M, CEIL_N, CEIL_K, steps, ceil_blas, ceil_mpx);
    printf("result %s %s threads=%d step_s=%.5f min_s=%.5f flop=%.6e ceiling=%.3f rss=%ld "
           "model_scratch=%zu scratch_peak=%zu persistent=%zu model_s=%.5f eval_s=%.5f cpu_s=%.5f gemm_s=%.5f "
           "ceil_blas=%.3f ceil_mpx=%.3f torch_s=%.5f torch_cpu_s=%.5f torch_eval_s=%.5f torch_eval_cpu_s=%.5f "
           "paired=%.4f paired_lo=%.4f paired_hi=%.4f torch2_s=%.5f torch2_eval_s=%.5f\n",
           name, prec, threads, step_s, tmin, flop, ceil, ru.ru_maxrss * 1024L, model_scratch,
           scratch_peak, persistent, model_s, eval_s, cpu_s, gemm_s, ceil_blas, ceil_mpx, torch_s[0], torch_cpu_s[0],
           torch_eval_s[0], torch_eval_cpu_s[0], paired_med, paired_lo, paired_hi, torch_s[1], torch_eval_s[1]);
    rc = 0;
out:
    if (rc) fprintf(stderr, "bench_step %s %s: %s\n", name, prec, err[0] ? err : "failed");
    for (int p = 0; p < N_SRV; p++) torch_stop(&torch[p]);
    mpx_session_close(&s);
    unlink(cfg);
    return rc;
}

/* ---- the parent: every case in a child, PyTorch, the table ---- */

typedef struct result {
    char name[32], prec[32];
    int threads, ok;
    double step_s, min_s, flop, ceiling, gemm_s, torch_s, model_s, eval_s, torch_eval_s, cpu_s, torch_cpu_s, torch_eval_cpu_s;
    double ceil_blas, ceil_mpx, paired, paired_lo, paired_hi;
    double torch2_s, torch2_eval_s;   /* the second peer (fp32: PyTorch eager), NaN when none */
    long rss;
    size_t model_scratch, scratch_peak, persistent;
} result;

/* The OpenBLAS kernels a child runs with (a kernel set): 0 = as the environment sets
 * them; 1 = OpenBLAS's own choice (OPENBLAS_CORETYPE and OPENBLAS_L2_SIZE unset); 2 =
 * forced to g_forced_core, when OpenBLAS's own choice on this CPU is a generic fallback
 * (an OpenBLAS older than the CPU: Debian 12's 0.3.21 picks Prescott, SSE3 kernels at a
 * tenth of the rate, on Xeons of 2023 with AVX-512). The prefix of the child's command. */
static const char *g_forced_core = "";
static const char *set_prefix(int set, char *buf, size_t len)
{
    if (set == 1) return "env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE ";
    if (set == 2) { snprintf(buf, len, "env -u OPENBLAS_L2_SIZE OPENBLAS_CORETYPE=%s ", g_forced_core); return buf; }
    return "";
}

static int run_child(const char *self, const char *name, const char *ckpt, const char *prec,
                     int steps, const char *plugin_dir, char **ovr, int n_ovr, int set, const char *torch_json,
                     result *r)
{
    char cmd[8192], pre[128];
    int n = snprintf(cmd, sizeof cmd, "%s'%s' --case %s '%s' %s %d --pad %.17g --plugin-dir '%s'",
                     set_prefix(set, pre, sizeof pre), self, name, ckpt, prec, steps, g_pad, plugin_dir);
    for (int i = 0; i < n_ovr && n < (int)sizeof cmd; i++)
        n += snprintf(cmd + n, sizeof cmd - (size_t)n, " -s '%s'", ovr[i]);
    if (torch_json && n < (int)sizeof cmd) snprintf(cmd + n, sizeof cmd - (size_t)n, " --torch '%s'", torch_json);
    memset(r, 0, sizeof *r);
    snprintf(r->name, sizeof r->name, "%s", name);
    snprintf(r->prec, sizeof r->prec, "%s", prec);
    fflush(stdout);
    FILE *p = popen(cmd, "r");
    if (!p) return -1;
    char line[2048];
    while (fgets(line, sizeof line, p)) {
        if (strncmp(line, "result ", 7) != 0) { fputs(line, stdout); continue; }
        char nm[64], pr[64];
        if (sscanf(line, "result %63s %63s threads=%d step_s=%lf min_s=%lf flop=%lf ceiling=%lf rss=%ld "
                         "model_scratch=%zu scratch_peak=%zu persistent=%zu model_s=%lf eval_s=%lf cpu_s=%lf gemm_s=%lf "
                         "ceil_blas=%lf ceil_mpx=%lf torch_s=%lf torch_cpu_s=%lf torch_eval_s=%lf "
                         "torch_eval_cpu_s=%lf paired=%lf paired_lo=%lf paired_hi=%lf torch2_s=%lf torch2_eval_s=%lf", nm, pr,
                   &r->threads, &r->step_s, &r->min_s, &r->flop, &r->ceiling, &r->rss, &r->model_scratch,
                   &r->scratch_peak, &r->persistent, &r->model_s, &r->eval_s, &r->cpu_s, &r->gemm_s,
                   &r->ceil_blas, &r->ceil_mpx, &r->torch_s, &r->torch_cpu_s, &r->torch_eval_s,
                   &r->torch_eval_cpu_s, &r->paired, &r->paired_lo, &r->paired_hi, &r->torch2_s, &r->torch2_eval_s) == 26)
            r->ok = 1;
    }
    int st = pclose(p);
    return st == 0 && r->ok ? 0 : -1;
}

/* The 1-minute load average: other processes share the cores, and every figure here
 * moves with them (the sgemm column is timed beside each step for that reason). */
static double loadavg(void)
{
    double l = NAN;
    FILE *f = fopen("/proc/loadavg", "r");
    if (f) {
        if (fscanf(f, "%lf", &l) != 1) l = NAN;
        fclose(f);
    }
    return l;
}


/* The matching PyTorch configuration of a policy (peers_of's first), for the tables. */
static const char *peer_label(const char *prec)
{
    peer p[N_PEERS];
    return peers_of(prec, p) ? p[0].label : "-";
}

static void print_row(const result *r)
{
    double tok = BATCH * SEQ / r->step_s, gfs = r->flop / r->step_s * 1e-9;
    printf("%-10s %-15s %3d %8.3f %8.0f %8.1f %8.1f %8.1f %8.1f %6.1f%% %6.1f%% %9.0f %8.0f", r->name, r->prec,
           r->threads, r->step_s, tok, r->flop * 1e-9, gfs, r->ceil_blas, r->ceil_mpx, 100.0 * gfs / r->ceiling,
           100.0 * r->flop / r->gemm_s * 1e-9 / r->ceiling, mib(r->model_scratch), (double)r->rss / (1024.0 * 1024.0));
    printf(" %-18s", peer_label(r->prec));
    if (isnan(r->torch_s)) printf("        -       -\n");
    else if (isnan(r->paired)) printf(" %8.3f %6.2fx\n", r->torch_s, r->torch_s / r->step_s);
    else printf(" %8.3f %6.2fx %5.2fx (%.2f-%.2f)\n", r->torch_s, r->torch_s / r->step_s, r->paired, r->paired_lo,
                r->paired_hi);
}

/* ---- are these kernels right? The environment may force OPENBLAS_CORETYPE because an
 * older OpenBLAS computes wrong results on this CPU with the kernels it detects; before
 * timing them, check cblas_sgemm against a double-precision dot product on the step's
 * shapes (every layout the backend uses), entries sampled on the large ones. ---- */

static int sgemm_check(int threads, char *msg, size_t len)
{
    static const int shapes[][3] = { { 1152, 3072, 768 }, { 1152, 768, 3072 }, { 1152, 384, 1536 },
                                     { 384, 384, 32 },    { 384, 32, 384 },    { 768, 768, 1152 },
                                     { 17, 13, 29 },      { 1, 1, 1 },         { 5, 301, 7 } };
    const CBLAS_TRANSPOSE tr[2] = { CblasNoTrans, CblasTrans };
    double worst = 0;
    long checked = 0;
    uint32_t x = 2024;
    openblas_set_num_threads(threads > 0 ? threads : 1);
    for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
        const int M = shapes[si][0], N = shapes[si][1], K = shapes[si][2];
        float *a = malloc((size_t)M * K * 4), *b = malloc((size_t)K * N * 4), *c = malloc((size_t)M * N * 4);
        if (!a || !b || !c) { free(a); free(b); free(c); snprintf(msg, len, "out of memory"); return -1; }
        for (size_t i = 0; i < (size_t)M * K; i++) x = x * 1664525u + 1013904223u, a[i] = (float)(x >> 8) / 16777216.0f - 0.5f;
        for (size_t i = 0; i < (size_t)K * N; i++) x = x * 1664525u + 1013904223u, b[i] = (float)(x >> 8) / 16777216.0f - 0.5f;
        for (int ta = 0; ta < 2; ta++)
            for (int tb = 0; tb < 2; tb++) {
                const int lda = ta ? M : K, ldb = tb ? K : N;
                cblas_sgemm(CblasRowMajor, tr[ta], tr[tb], M, N, K, 1.0f, a, lda, b, ldb, 0.0f, c, N);
                const long total = (long)M * N, n = total < 4096 ? total : 4096;
                for (long e = 0; e < n; e++) {
                    long idx = total <= 4096 ? e : (long)((x = x * 1664525u + 1013904223u) % (uint32_t)total);
                    int i = (int)(idx / N), j = (int)(idx % N);
                    double ref = 0, mag = 0;
                    for (int k = 0; k < K; k++) {
                        double av = ta ? a[(size_t)k * M + i] : a[(size_t)i * K + k];
                        double bv = tb ? b[(size_t)j * K + k] : b[(size_t)k * N + j];
                        ref += av * bv, mag += fabs(av * bv);
                    }
                    double err = fabs((double)c[idx] - ref) / (mag + 1e-30);
                    if (err > worst) worst = err;
                    checked++;
                }
            }
        free(a), free(b), free(c);
    }
    openblas_set_num_threads(1);
    /* fp32 accumulation of K products: |err| <= K u sum|ab| in the worst case, far less in
     * practice; 1e-5 of sum|ab| (K up to 3072, u = 6e-8) is a wrong result, not rounding */
    int ok = worst <= 1e-5;
    snprintf(msg, len, "sgemm check %s: %ld entries of 9 shapes x 4 layouts against a double dot product, "
             "worst error %.2g of sum|a b|", ok ? "ok" : "FAILED (these kernels compute wrong results)", checked, worst);
    return ok ? 0 : 1;
}

/* The kernels a child of kernel set `set` gets (bench_step --corename), and whether they
 * passed sgemm_check: 0 if they did. */
static int kernel_probe(const char *self, int set, char *name, size_t len, char *msg, size_t mlen)
{
    char cmd[4200], pre[128];
    snprintf(cmd, sizeof cmd, "%s'%s' --corename", set_prefix(set, pre, sizeof pre), self);
    snprintf(name, len, "?");
    snprintf(msg, mlen, "sgemm check did not run");
    fflush(stdout);
    FILE *p = popen(cmd, "r");
    if (!p) return -1;
    if (fgets(name, (int)len, p)) name[strcspn(name, "\n")] = 0;
    if (fgets(msg, (int)mlen, p)) msg[strcspn(msg, "\n")] = 0;
    return pclose(p) == 0 ? 0 : -1;
}

/* ---- the machine's FMA peak: what the ceiling itself is measured against ---- */

/* 12 independent chains of 8-lane FMAs in registers, `n` rounds (no memory traffic):
 * the most the cores' FMA units do, the bound no GEMM can pass. */
#if defined(__x86_64__)
#include <immintrin.h>
static volatile float g_peak_sink;
/* One loop per vector width: V the vector type, P the intrinsics' prefix, W its lanes. */
#define FMA_LOOP(NAME, TARGET, V, P, W)                                                                         \
    __attribute__((target(TARGET))) static void *NAME(void *arg)                                               \
    {                                                                                                           \
        long n = *(const long *)arg;                                                                            \
        V x = P##_set1_ps(1.0000001f), y = P##_set1_ps(0.9999999f);                                             \
        V a[12];                                                                                                \
        for (int c = 0; c < 12; c++) a[c] = P##_set1_ps((float)c);                                              \
        for (long i = 0; i < n; i++) {                                                                          \
            a[0] = P##_fmadd_ps(a[0], x, y), a[1] = P##_fmadd_ps(a[1], x, y), a[2] = P##_fmadd_ps(a[2], x, y);     \
            a[3] = P##_fmadd_ps(a[3], x, y), a[4] = P##_fmadd_ps(a[4], x, y), a[5] = P##_fmadd_ps(a[5], x, y);     \
            a[6] = P##_fmadd_ps(a[6], x, y), a[7] = P##_fmadd_ps(a[7], x, y), a[8] = P##_fmadd_ps(a[8], x, y);     \
            a[9] = P##_fmadd_ps(a[9], x, y), a[10] = P##_fmadd_ps(a[10], x, y), a[11] = P##_fmadd_ps(a[11], x, y); \
        }                                                                                                       \
        float out[W], sum = 0;                                                                                  \
        for (int c = 0; c < 12; c++) {                                                                          \
            P##_storeu_ps(out, a[c]);                                                                           \
            sum += out[0];                                                                                      \
        }                                                                                                       \
        g_peak_sink = sum;                                                                                      \
        return NULL;                                                                                            \
    }
FMA_LOOP(fma_loop_avx2, "avx2,fma", __m256, _mm256, 8)
FMA_LOOP(fma_loop_avx512, "avx512f", __m512, _mm512, 16)

/* GFLOP/s of the widest FMA loop the CPU has (AVX-512F, else AVX2 + FMA: the widths the
 * backend's kernels use) on `threads` threads at once, the best of 3; 0 without either.
 * `isa` names the loop. */
static double fma_peak(int threads, const char **isa)
{
    __builtin_cpu_init();
    void *(*loop)(void *) = NULL;
    int lanes = 0;
    if (__builtin_cpu_supports("avx512f")) loop = fma_loop_avx512, lanes = 16, *isa = "AVX-512";
    else if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) loop = fma_loop_avx2, lanes = 8, *isa = "AVX2";
    if (!loop || threads < 1 || threads > 64) return 0;
    long n = 100000000;
    double best = 0;
    for (int rep = 0; rep < 3; rep++) {
        pthread_t t[64];
        int started = 0;
        double t0 = now();
        for (; started < threads - 1; started++)
            if (pthread_create(&t[started], NULL, loop, &n)) break;
        loop(&n);
        for (int i = 0; i < started; i++) pthread_join(t[i], NULL);
        double gf = (double)(started + 1) * (double)n * 12 * 2 * lanes / (now() - t0) * 1e-9;
        if (gf > best) best = gf;
    }
    return best;
}
#else
static double fma_peak(int threads, const char **isa) { (void)threads; (void)isa; return 0; }
#endif

#define N_MODELS 2
#define N_PRECS 4

/* One kernel setting's tables: the step, its CPU time, the evaluation, bf16/fp32. */
static void print_tables(result res[N_MODELS][N_PRECS], const char *const *model_names, const char *kernels)
{
    printf("\n-- OpenBLAS kernels: %s --\n", kernels);
    printf("%-10s %-15s %3s %8s %8s %8s %8s %8s %8s %7s %7s %9s %8s %-18s %8s %7s %s\n", "model", "precision", "thr",
           "step s", "tok/s", "GEMM GF", "GFLOP/s", "blas GF", "mpx GF", "of ceil", "GEMMs", "act MiB", "RSS MiB",
           "PyTorch peer", "torch s", "speedup", "paired (range)");
    for (int m = 0; m < N_MODELS; m++)
        for (int p = 0; p < N_PRECS; p++)
            if (res[m][p].ok) print_row(&res[m][p]);
    printf("\nCPU seconds a training step, every thread (on shared cores the steadier figure; torch under "
           "OMP_WAIT_POLICY=passive, whose waiting threads sleep)\n");
    printf("%-10s %-15s %3s %8s %9s %7s\n", "model", "precision", "thr", "cpu s", "torch cpu", "ratio");
    for (int m = 0; m < N_MODELS; m++)
        for (int p = 0; p < N_PRECS; p++) {
            const result *r = &res[m][p];
            if (!r->ok) continue;
            printf("%-10s %-15s %3d %8.3f", r->name, r->prec, r->threads, r->cpu_s);
            if (isnan(r->torch_cpu_s)) printf("         -       -\n");
            else printf(" %9.3f %6.2fx\n", r->torch_cpu_s, r->torch_cpu_s / r->cpu_s);
        }
    printf("\nevaluation forward (eval mode, no labels; mpx forward vs torch.inference_mode() in the same PyTorch "
           "configuration), batch %d x %d\n", BATCH, SEQ);
    printf("%-10s %-15s %3s %8s %10s %-18s %8s %10s %7s\n", "model", "precision", "thr", "fwd s", "windows/s",
           "PyTorch peer", "torch s", "torch w/s", "speedup");
    for (int m = 0; m < N_MODELS; m++)
        for (int p = 0; p < N_PRECS; p++) {
            const result *r = &res[m][p];
            if (!r->ok) continue;
            printf("%-10s %-15s %3d %8.3f %10.2f %-18s", r->name, r->prec, r->threads, r->eval_s, BATCH / r->eval_s,
                   peer_label(r->prec));
            if (isnan(r->torch_eval_s)) printf("        -          -       -\n");
            else printf(" %8.3f %10.2f %6.2fx\n", r->torch_eval_s, BATCH / r->torch_eval_s, r->torch_eval_s / r->eval_s);
        }
    printf("\nfp32 against PyTorch eager attention (the comparison of the earlier speed issues)\n");
    for (int m = 0; m < N_MODELS; m++) {
        const result *r = &res[m][0];
        if (r->ok && !isnan(r->torch2_s))
            printf("%-10s fp32 step %.3f s, PyTorch eager %.3f s: %.2fx; evaluation forward %.3f s, PyTorch eager %.3f s: "
                   "%.2fx\n", r->name, r->step_s, r->torch2_s, r->torch2_s / r->step_s, r->eval_s, r->torch2_eval_s,
                   r->torch2_eval_s / r->eval_s);
    }
    printf("\n");
    for (int m = 0; m < N_MODELS; m++)
        for (int p = 1; p < N_PRECS; p++)
            if (res[m][0].ok && res[m][p].ok)
                printf("%s: %s step / fp32 step = %.2f; in CPU time a step %.2f (%.3f / %.3f s)\n", model_names[m],
                       res[m][p].prec, res[m][p].step_s / res[m][0].step_s, res[m][p].cpu_s / res[m][0].cpu_s,
                       res[m][p].cpu_s, res[m][0].cpu_s);
}

/* kernels: 0 = as the environment sets them, 1 = OpenBLAS's own choice, 2 = both (the
 * second only when OPENBLAS_CORETYPE is set: otherwise the two are the same) */
static int run_all(const char *self, int steps, int with_torch, int kernels, const char *plugin_dir, char **ovr,
                   int n_ovr)
{
    char dir[] = "/tmp/mpx-bench-bert-base-XXXXXX", json[64];
    jiffies j0 = { 0, 0 };
    int have_j = read_jiffies(&j0) == 0;
    if (!mkdtemp(dir)) { perror("bench_step: mkdtemp"); return 1; }
    snprintf(json, sizeof json, "%s/config.json", dir);
    FILE *f = fopen(json, "w");
    if (!f || fputs(bench_bert_base_json, f) < 0 || fclose(f)) { fprintf(stderr, "bench_step: cannot write %s\n", json); return 1; }
    const char *mini = "models/checkpoints/minilm-l6";
    struct { const char *name, *ckpt, *json; int steps; } models[N_MODELS] = {
        { "minilm-l6", mini, "models/checkpoints/minilm-l6/config.json", steps * 2 },
        { "bert-base", dir, json, steps },
    };
    const char *model_names[N_MODELS] = { models[0].name, models[1].name };
    /* bf16-master+amx: backend.cpu.bf16_gemm = "amx" (opt-in: docs/SPEED.md, the census) */
    const char *precs[N_PRECS] = { "fp32", "bf16-master", "bf16-master+amx", "amp" };
    /* OpenBLAS picks its kernels when it loads; OPENBLAS_CORETYPE overrides the choice
     * (Haswell = AVX2 only, even on a CPU with AVX-512), and PyTorch's own GEMMs ignore it */
    const char *core_env = getenv("OPENBLAS_CORETYPE");
    int forced = core_env && core_env[0];
    int sets[3], n_sets = 0;
    if (kernels != 1 || !forced) sets[n_sets++] = 0;
    if (forced && kernels != 0) sets[n_sets++] = 1;
    char labels[3][512];
    for (int k = 0; k < n_sets; k++) {
        char name[128], msg[256];
        int bad = kernel_probe(self, sets[k], name, sizeof name, msg, sizeof msg);
        if (sets[k] == 0 && forced)
            snprintf(labels[k], sizeof labels[k], "%s, forced by OPENBLAS_CORETYPE=%s in the environment", name, core_env);
        else
            snprintf(labels[k], sizeof labels[k], "%s, OpenBLAS's own choice on this CPU%s", name,
                     forced ? " (OPENBLAS_CORETYPE and OPENBLAS_L2_SIZE unset for these cases)" : "");
        printf("OpenBLAS kernels %s: %s\n", labels[k], msg);
        if (bad && sets[k] == 1) {   /* wrong kernels: not timed */
            printf("  not timed: these kernels failed the sgemm check\n");
            n_sets--;
            continue;
        }
        /* OpenBLAS's own choice is a generic fallback on a CPU with AVX-512 or AVX2: the
         * ceiling would be a fraction of what OpenBLAS does here, so one more set forces
         * the kernels this CPU runs (if they pass the check) */
        __builtin_cpu_init();
        const char *best = __builtin_cpu_supports("avx512f") ? "SkylakeX" : __builtin_cpu_supports("avx2") ? "Haswell" : NULL;
        if (sets[k] != 0 && forced) continue;   /* the environment's choice is not a fallback */
        if (best && kernels == 2 && (!strcmp(name, "Prescott") || !strcmp(name, "Nehalem") || !strcmp(name, "Core2") ||
                                     !strcmp(name, "Sandybridge") || !strcmp(name, "Katmai"))) {
            g_forced_core = best;
            char fname[128], fmsg[256];
            int fbad = kernel_probe(self, 2, fname, sizeof fname, fmsg, sizeof fmsg);
            printf("OpenBLAS kernels %s, forced by this bench (OPENBLAS_CORETYPE=%s: OpenBLAS's own choice, %s, is a "
                   "generic fallback on this CPU): %s\n", fname, best, name, fmsg);
            if (!fbad) {
                sets[n_sets] = 2;
                snprintf(labels[n_sets], sizeof labels[n_sets], "%s, forced by this bench (OpenBLAS's own choice, %s, "
                         "is a generic fallback on this CPU)", fname, name);
                n_sets++;
                break;
            }
        }
    }
    result res[3][N_MODELS][N_PRECS];
    memset(res, 0, sizeof res);
    int rc = 0;
    if (with_torch && system("python3 -c 'import torch, transformers' >/dev/null 2>&1") != 0) {
        printf("PyTorch or transformers does not import here: no comparison with PyTorch\n");
        with_torch = 0;
    }
    printf("one training step (forward + backward + adam, clip 1.0), batch %d x %d, dropout on, "
           "%.0f %% of each window padding (--pad); load average %.2f\n", BATCH, SEQ, 100.0 * g_pad, loadavg());
    for (int m = 0; m < N_MODELS; m++) {
        if (m == 0 && access("models/checkpoints/minilm-l6/model.safetensors", R_OK) != 0) {
            printf("  minilm-l6: models/checkpoints/minilm-l6 missing (make model): skipped\n");
            continue;
        }
        for (int k = 0; k < n_sets; k++)
            for (int p = 0; p < N_PRECS; p++) {
                result *r = &res[k][m][p];
                /* PyTorch alongside each case of the first kernel set (the peers of its
                 * policy): its own GEMMs do not read OPENBLAS_CORETYPE */
                const char *tj = with_torch && k == 0 ? models[m].json : NULL;
                printf("  [kernels: %s]\n", labels[k]);
                if (run_child(self, models[m].name, models[m].ckpt, precs[p], models[m].steps, plugin_dir, ovr, n_ovr,
                              sets[k], tj, r)) {
                    fprintf(stderr, "bench_step: case %s %s (%s) failed\n", models[m].name, precs[p], labels[k]);
                    rc = 1;
                }
                if (!tj) r->torch_s = r->torch_eval_s = r->torch_cpu_s = r->torch_eval_cpu_s = r->paired = NAN;
                if (!tj) r->torch2_s = r->torch2_eval_s = NAN;
            }
        for (int p = 0; with_torch && p < N_PRECS; p++) {
            result *r0 = &res[0][m][p];
            if (!r0->ok) continue;
            for (int k = 1; k < n_sets; k++) {
                result *rk = &res[k][m][p];
                rk->torch_s = r0->torch_s, rk->torch_eval_s = r0->torch_eval_s;
                rk->torch_cpu_s = r0->torch_cpu_s, rk->torch_eval_cpu_s = r0->torch_eval_cpu_s;
                rk->torch2_s = r0->torch2_s, rk->torch2_eval_s = r0->torch2_eval_s;
            }
        }
    }
    for (int k = 0; k < n_sets; k++) print_tables(res[k], model_names, labels[k]);
    int thr = res[0][0][0].ok ? res[0][0][0].threads : res[0][1][0].threads;
    const char *isa = "";
    double peak1 = fma_peak(1, &isa), peak = fma_peak(thr, &isa), clo = 1e30, chi = 0;
    for (int k = 0; k < n_sets; k++)
        for (int m = 0; m < N_MODELS; m++)
            for (int p = 0; p < N_PRECS; p++)
                if (res[k][m][p].ok) {
                    clo = fmin(clo, res[k][m][p].ceiling);
                    chi = fmax(chi, res[k][m][p].ceiling);
                }
    if (peak > 0 && chi > 0)
        printf("\nFMA peak (12 independent %s FMA chains in registers, no memory): %.1f GFLOP/s on 1 thread, %.1f on "
               "%d; the ceilings above (%.1f-%.1f GFLOP/s) are %.0f-%.0f %% of it\n", isa, peak1, peak, thr, clo, chi,
               100.0 * clo / peak, 100.0 * chi / peak);
    printf("\nload average at the end %.2f (%ld cores online)", loadavg(), sysconf(_SC_NPROCESSORS_ONLN));
    double steal = have_j ? steal_pct(&j0) : NAN;
    if (!isnan(steal)) printf("; CPU time stolen by the hypervisor over the whole bench: %.1f %% (/proc/stat)", steal);
    printf("\n");
    printf("GEMM GF = 6 x forward GEMM MACs (T x sum of linear in x out + layers x 2 x B x S^2 x hidden); "
           "blas GF, mpx GF = GFLOP/s of an fp32 GEMM %dx3072x768 (x W^T) by cblas_sgemm (OpenBLAS threads = thr, the "
           "table's kernels) and by the backend's gemm op (its linear kernel), timed before each step; the ceiling is "
           "the faster of the two; of ceil = GEMM GF / step s / ceiling (the whole step against the ceiling); GEMMs = "
           "GEMM GF / the seconds inside the GEMM ops and the attention op / ceiling (the GEMMs alone, but for the "
           "attention op's softmax and dropout, which run inside it between its GEMMs); act = the model's counted scratch; "
           "PyTorch peer = the PyTorch configuration a policy is compared with, as users run it: transformers' default "
           "attention (sdpa), fp32 for fp32, torch.autocast bf16 for the bf16 policies, fp16 for amp; torch s = its median "
           "step, the faster of its two OpenMP wait policies, one PyTorch process per policy, each running one step "
           "after each of mpx's timed steps of that case (beside the first kernel set: PyTorch's GEMMs do not read "
           "OPENBLAS_CORETYPE); speedup = torch s / step s; paired = the median of that policy's step / mpx's step, "
           "step by step, and their range; bf16-master+amx = bf16-master with backend.cpu.bf16_gemm = \"amx\"\n",
           BATCH * SEQ);
    json[0] = 0;
    snprintf(json, sizeof json, "%s/config.json", dir);
    unlink(json);
    rmdir(dir);
    return rc;
}

int main(int argc, char **argv)
{
    char *ovr[MAX_OVR];
    const char *plugin_dir = "build/plugins";
    const char *torch_json = NULL;
    int n_ovr = 0, steps = 5, with_torch = 1, kernels = 2, is_case = argc >= 6 && strcmp(argv[1], "--case") == 0;
    if (argc == 2 && strcmp(argv[1], "--corename") == 0) {   /* the kernels, then whether they are right */
        char msg[256];
        int bad = sgemm_check((int)sysconf(_SC_NPROCESSORS_ONLN), msg, sizeof msg);
        printf("%s\n%s\n", openblas_get_corename(), msg);
        return bad ? 1 : 0;
    }
    for (int i = is_case ? 6 : 1; i < argc; i++) {
        if (strcmp(argv[i], "--steps") == 0 && i + 1 < argc) steps = atoi(argv[++i]);
        else if (strcmp(argv[i], "--no-torch") == 0) with_torch = 0;
        else if (strcmp(argv[i], "--torch") == 0 && i + 1 < argc && is_case) torch_json = argv[++i];
        else if (strcmp(argv[i], "--kernels") == 0 && i + 1 < argc) {
            const char *k = argv[++i];
            kernels = strcmp(k, "env") == 0 ? 0 : strcmp(k, "detected") == 0 ? 1 : strcmp(k, "both") == 0 ? 2 : -1;
            if (kernels < 0) {
                fprintf(stderr, "bench_step: --kernels %s: env, detected or both\n", k);
                return 2;
            }
        }
        else if (strcmp(argv[i], "--pad") == 0 && i + 1 < argc) g_pad = atof(argv[++i]);
        else if (strcmp(argv[i], "--plugin-dir") == 0 && i + 1 < argc) plugin_dir = argv[++i];
        else if (strcmp(argv[i], "-s") == 0 && i + 1 < argc && n_ovr < MAX_OVR) ovr[n_ovr++] = argv[++i];
        else {
            fprintf(stderr, "usage: bench_step [--steps N] [--no-torch] [--kernels env|detected|both] [--pad F] [--plugin-dir DIR] [-s KEY=VALUE]...\n"
                            "       bench_step --case NAME CHECKPOINT PRECISION STEPS [--pad F] [--plugin-dir DIR] [--torch CONFIG_JSON] [-s KEY=VALUE]...\n");
            return 2;
        }
    }
    if (!(g_pad >= 0.0 && g_pad <= 0.9)) {
        fprintf(stderr, "bench_step: --pad %g must be in [0, 0.9]\n", g_pad);
        return 2;
    }
    if (is_case)
        return run_case(argv[2], argv[3], argv[4], atoi(argv[5]), plugin_dir, (const char *const *)ovr, (size_t)n_ovr,
                        torch_json);
    if (steps < 1) steps = 1;
    return run_all(argv[0], steps, with_torch, kernels, plugin_dir, ovr, n_ovr);
}
