/* A small stand-alone mpx_host for unit tests of single plugins (backend ops,
 * optimizers, models) without a whole run: options from a libconfig string, memory
 * counted by role, the CPU backend loaded from build/plugins/backend-cpu.so. */
#ifndef MPX_TEST_HOST_H
#define MPX_TEST_HOST_H

#include "mpx/mpx.h"

/* A new environment. `options` is libconfig text holding the plugin's own options as
 * top-level settings (NULL = none); dotted keys ("train.batch_size") are looked up in
 * `run_config` (libconfig text, NULL = none). `prec` NULL means all-fp32. */
mpx_env *th_env(const char *options, const char *run_config, const mpx_precision_desc *prec);
void th_env_free(mpx_env *env);

/* The last error set through host->error, "" if none (then cleared by th_clear). */
const char *th_error(mpx_env *env);
/* The last note a plugin gave through any test env (host->note), "" before the first. */
const char *th_last_note(void);
void th_clear(mpx_env *env);

/* Bytes currently allocated under each role. */
size_t th_bytes(mpx_env *env, mpx_role role);

/* Load a plugin .so and return its descriptor (NULL with the reason in *why). */
const mpx_plugin_desc *th_load(const char *path, const char **why);

/* The counts the last GEMM with a format as compute dtype reported (host->gemm_input_stats,
 * ABI 1.8) for its operands a and b; returns the number of such reports so far. */
int th_last_gemm_stats(mpx_env *env, mpx_quant_stats *a, mpx_quant_stats *b);

/* Make env use the CPU backend (build/plugins/backend-cpu.so) for host->ops and
 * host->alloc; returns 0 on success. */
int th_use_cpu_backend(mpx_env *env, const char *backend_options);

/* Make env use the backend plugin at `path`, created with `backend_options` (libconfig
 * text); returns 0, or -1 with the reason (the backend's own message) in th_error(env). */
int th_use_backend(mpx_env *env, const char *path, const char *backend_options);

/* The env's backend op table and instance (NULL until a backend is set). */
const mpx_ops *th_ops_of(mpx_env *env, void **be);

/* The env the backend was created with, where its error messages land (env itself
 * before a backend is set). */
mpx_env *th_backend_env(mpx_env *env);

/* Makes env use the backend instance of `from` (which keeps owning it). */
void th_share_backend(mpx_env *env, mpx_env *from);

/* What host->apply_update writes to: the step's flat param buffer (and the Kahan
 * compensation buffer, same indexing; comp.p NULL if none). */
void th_set_update_target(mpx_env *env, mpx_arg target, mpx_arg comp);

/* ABI 1.2: the env knows the built-in formats; declare more (0 or an error status). */
int th_declare_formats(mpx_env *env, const mpx_format *f, size_t n);
/* Roll the delayed-scaling histories (the core does it after each optimizer step). */
void th_scaling_end_step(mpx_env *env);

/* The fp32 all-true descriptor used when th_env gets NULL. */
mpx_precision_desc th_fp32_policy(void);

#endif
