/* Benchmark (not a test): the memory of a bert-base-shaped training step (random init,
 * no checkpoint) per precision policy — the host's counted bytes by role and the
 * process's peak resident set (VmHWM of /proc/self/status), each per parameter. One
 * small batch (1 x 128 tokens) keeps the activations small beside the model state.
 *
 *   bench_memory [--steps N] [--plugin-dir DIR] [POLICY[:KEY=VALUE,...]]...
 *
 * Each case runs in its own child process (its own VmHWM); with no cases given:
 * fp32, pure-bf16, pure-bf16 with train.update_chunk = 0 (the whole-model fp32 gradient
 * and update), pure-bf16 with Kahan. train.diagnostics is off (its fp32 gradient shadow
 * is whole-model by nature; docs/PRECISION-POLICIES.md). Run from the repository root. */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../core/engine/session.h"
#include "../core/engine/update_window.h"
#include "../core/engine/train.h"
#include "bench_util.h"

#define BATCH 1
#define SEQ 128
#define MAX_OVR 16


typedef struct synth {
    int32_t ids[BATCH * SEQ], seg[BATCH * SEQ], mask[BATCH * SEQ], start[BATCH], end[BATCH];
    mpx_itensor t[5];
} synth;

static int synth_next(mpx_task *t, mpx_session *s, int rows, mpx_batch *out, int64_t *tokens, char *err,
                      size_t errlen)
{
    (void)s;
    if (rows != BATCH) { snprintf(err, errlen, "bench_memory: train.batch_size must be %d", BATCH); return -1; }
    synth *d = t->self;
    *out = (mpx_batch){ .size = sizeof *out, .tensors = d->t, .n_tensors = 5, .training = 1 };
    *tokens = BATCH * SEQ;
    return 0;
}

static void synth_init(synth *d)
{
    uint32_t x = 777;
    for (int i = 0; i < BATCH * SEQ; i++) {
        x = x * 1664525u + 1013904223u;
        d->ids[i] = 1000 + (int32_t)((x >> 8) % 29000u);
        d->seg[i] = i % SEQ >= SEQ / 4;
        d->mask[i] = 1;
    }
    for (int b = 0; b < BATCH; b++) { d->start[b] = 5 + b; d->end[b] = 9 + b; }
    d->t[0] = (mpx_itensor){ "input_ids", d->ids, 2, { BATCH, SEQ } };
    d->t[1] = (mpx_itensor){ "segment_ids", d->seg, 2, { BATCH, SEQ } };
    d->t[2] = (mpx_itensor){ "input_mask", d->mask, 2, { BATCH, SEQ } };
    d->t[3] = (mpx_itensor){ "start_positions", d->start, 1, { BATCH, 0 } };
    d->t[4] = (mpx_itensor){ "end_positions", d->end, 1, { BATCH, 0 } };
}

/* VmHWM (peak resident set) in bytes, or -1. */
static long vm_hwm(void)
{
    FILE *f = fopen("/proc/self/status", "r");
    if (!f) return -1;
    char line[256];
    long kb = -1;
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "VmHWM: %ld kB", &kb) == 1) break;
    fclose(f);
    return kb < 0 ? -1 : kb * 1024;
}

static int run_case(const char *ckpt, const char *spec, int steps, const char *plugin_dir)
{
    char prec[512], cfg[256], err[8192] = "", buf[512];
    const char *ovr[MAX_OVR];
    char ovr_text[MAX_OVR][160];
    size_t n_ovr = 0;
    snprintf(buf, sizeof buf, "%s", spec);
    char *colon = strchr(buf, ':');
    if (colon) *colon = 0;
    snprintf(prec, sizeof prec, "%s", buf);
    for (char *kv = colon ? strtok(colon + 1, ",") : NULL; kv && n_ovr < MAX_OVR; kv = strtok(NULL, ",")) {
        snprintf(ovr_text[n_ovr], sizeof ovr_text[n_ovr], "%s", kv);
        ovr[n_ovr] = ovr_text[n_ovr];
        n_ovr++;
    }
    snprintf(cfg, sizeof cfg, "/tmp/mpx-bench-memory-%d.cfg", (int)getpid());
    FILE *f = fopen(cfg, "w");
    if (!f) return 1;
    fprintf(f, "run = { name = \"bench_memory\"; seed = 42; };\ndata = { task = \"toy\"; };\n"
               "model = { plugin = \"bert-qa\"; checkpoint = \"%s\"; };\n"
               "train = { batch_size = %d; gradient_clipping = 1.0; diagnostics = false; };\n"
               "precision = { plugin = \"%s\"; };\n"
               "optimizer = { plugin = \"adam\"; lr = 1e-4; adam = { weight_decay = 0.01; }; };\n",
            ckpt, BATCH, prec);
    if (fclose(f)) return 1;
    const char *dirs[] = { plugin_dir };
    mpx_session s;
    mpx_task t = { .name = "bench" };
    synth d;
    synth_init(&d);
    t.self = &d;
    t.next = synth_next;
    t.max_batch = BATCH;
    t.max_seq = SEQ;
    int rc = 1;
    long hwm_start = vm_hwm();
    if (mpx_session_open(&s, dirs, 1)) { unlink(cfg); return 1; }
    if (mpx_session_configure(&s, cfg, ovr, n_ovr, err, sizeof err) || mpx_session_check_compat(&s, err, sizeof err) ||
        mpx_session_start(&s, err, sizeof err) || mpx_session_alloc_state(&s, BATCH, SEQ, err, sizeof err))
        goto out;
    long hwm_init = vm_hwm();
    double loss = 0;
    int skipped = 0;
    for (int i = 0; i < steps; i++)
        if (mpx_train_one_step(&s, &t, i, 1e-4, 1.0, NULL, &loss, &skipped, err, sizeof err)) goto out;
    long hwm = vm_hwm();
    double n = (double)s.numel, state = 0;
    for (int r = 0; r < MPX_ROLE_SCRATCH; r++) state += (double)s.peak[r];
    size_t step_buf = mpx_update_buffer_bytes(&s);
    printf("%-34s %zu params  counted state %.3f B/param (weights %.1f, grads %.1f, grad_acc %.1f, master %.1f, "
           "opt_state %.1f, compensation %.1f)\n", spec, s.numel, state / n, s.peak[MPX_ROLE_WEIGHTS] / n,
           s.peak[MPX_ROLE_GRADS] / n, s.peak[MPX_ROLE_GRAD_ACC] / n, s.peak[MPX_ROLE_MASTER] / n,
           s.peak[MPX_ROLE_OPT_STATE] / n, s.peak[MPX_ROLE_COMPENSATION] / n);
    printf("%-34s core fp32 step buffers %zu bytes (%.4f B/param, window %zu elements); counted scratch peak "
           "%.3f B/param (activations and staging included)\n", "", step_buf, (double)step_buf / n, s.upd.chunk,
           s.peak[MPX_ROLE_SCRATCH] / n);
    printf("%-34s VmHWM %.1f MiB = %.3f B/param (before the session %.1f MiB, after allocation and init %.1f MiB); "
           "last loss %.6g\n", "", hwm / 1048576.0, hwm / n, hwm_start / 1048576.0, hwm_init / 1048576.0, loss);
    rc = 0;
out:
    if (rc) fprintf(stderr, "bench_memory %s: %s\n", spec, err[0] ? err : "failed");
    mpx_session_close(&s);
    unlink(cfg);
    return rc;
}

int main(int argc, char **argv)
{
    int steps = 2;
    const char *plugin_dir = "build/plugins";
    const char *cases[32];
    int n_cases = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--steps") && i + 1 < argc) steps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--plugin-dir") && i + 1 < argc) plugin_dir = argv[++i];
        else if (!strcmp(argv[i], "--case") && i + 2 < argc) return run_case(argv[i + 1], argv[i + 2], steps, plugin_dir);
        else if (n_cases < 32) cases[n_cases++] = argv[i];
    }
    if (!n_cases) {
        static const char *defaults[] = { "fp32", "pure-bf16", "pure-bf16:train.update_chunk=0",
                                          "pure-bf16:precision.rounding=\"kahan\"" };
        for (int i = 0; i < 4; i++) cases[n_cases++] = defaults[i];
    }
    char dir[] = "/tmp/mpx-bench-memory-XXXXXX", json[64];
    if (!mkdtemp(dir)) { perror("bench_memory: mkdtemp"); return 1; }
    snprintf(json, sizeof json, "%s/config.json", dir);
    FILE *f = fopen(json, "w");
    if (!f || fputs(bench_bert_base_json, f) < 0 || fclose(f)) { fprintf(stderr, "bench_memory: cannot write %s\n", json); return 1; }
    printf("bert-base shapes, random init, batch %d x %d, %d steps, Adam; one process per case\n", BATCH, SEQ, steps);
    int bad = 0;
    for (int c = 0; c < n_cases; c++) {
        fflush(stdout);
        pid_t pid = fork();
        if (pid < 0) { perror("bench_memory: fork"); return 1; }
        if (pid == 0) {
            char st[16];
            snprintf(st, sizeof st, "%d", steps);
            execl(argv[0], argv[0], "--steps", st, "--plugin-dir", plugin_dir, "--case", dir, cases[c], (char *)NULL);
            _exit(127);
        }
        int status;
        if (waitpid(pid, &status, 0) < 0 || !WIFEXITED(status) || WEXITSTATUS(status)) bad++;
    }
    unlink(json);
    rmdir(dir);
    return bad ? 1 : 0;
}
