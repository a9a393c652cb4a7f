/* The run's number formats: the built-in OCP ones at their fixed dtypes, then the ones
 * the precision policy declares (ABI 1.2), each given a dtype of its storage size. */
#ifndef MPX_FORMAT_TABLE_H
#define MPX_FORMAT_TABLE_H

#include <stddef.h>

#include "mpx/mpx.h"

#define MPX_N_FORMAT_SLOTS (MPX_FORMAT_END - MPX_FORMAT_FIRST)

typedef struct mpx_format_table {
    mpx_format f[MPX_N_FORMAT_SLOTS];
    unsigned char used[MPX_N_FORMAT_SLOTS];
} mpx_format_table;

/* The built-in formats only. */
void mpx_format_table_init(mpx_format_table *t);

/* Add the formats a policy declared (`who` names it in errors). A name equal to a
 * built-in with the same parameters is that built-in; other clashes are errors. */
int mpx_format_table_declare(mpx_format_table *t, const mpx_format *fmts, size_t n, const char *who,
                             char *err, size_t errlen);

/* NULL for fp32/fp16/bf16/int32 and unused values. */
const mpx_format *mpx_format_of(const mpx_format_table *t, mpx_dtype d);

/* fp32, fp16, bf16 or a format's name -> dtype; -1 if unknown. */
int mpx_dtype_parse(const mpx_format_table *t, const char *name, mpx_dtype *out);

/* A dtype's name (formats by their declared name). */
const char *mpx_dtype_label(const mpx_format_table *t, mpx_dtype d);

/* "E4M3, bias 7, subnormals, NaN only (fn), max 448, 1 byte" */
void mpx_format_describe(const mpx_format *f, char *buf, size_t len);

/* "delayed (amax_history_len 1024, amax_compute_algo max, margin 0)" */
void mpx_scaling_describe(const mpx_precision_desc *d, char *buf, size_t len);
/* "fp8-e4m3, second moment fp16 (per-tensor scaled)": the optimizer state's dtypes. */
void mpx_opt_state_describe(const mpx_format_table *t, const mpx_precision_desc *d, char *buf, size_t len);

/* "fp32, fp16, bf16, fp8-e4m3, ..." for error messages. */
void mpx_dtype_choices(const mpx_format_table *t, char *buf, size_t len);

#endif
