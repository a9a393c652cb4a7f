/* safetensors files: an 8-byte little-endian header length, a JSON header
 * {name: {dtype, shape, data_offsets: [begin, end]}, "__metadata__": {...}}, then the
 * data, offsets relative to its start. Reading checks every tensor's extent against the
 * file size, so a truncated or corrupt file is an error naming the tensor, never a crash. */
#ifndef MPX_BERT_SAFETENSORS_H
#define MPX_BERT_SAFETENSORS_H

#include <mpx/abi.h>
#include <stdint.h>
#include <stdio.h>

typedef enum st_dtype { ST_F32, ST_F16, ST_BF16, ST_I64, ST_OTHER } st_dtype;

#define ST_MAX_DIMS 8

typedef struct st_tensor {
    char *name;
    st_dtype dtype;
    char dtype_name[16];
    int ndim;
    int64_t shape[ST_MAX_DIMS];
    uint64_t begin, end;      /* byte offsets relative to the data section */
} st_tensor;

typedef struct st_file {
    char *path;
    FILE *f;
    uint64_t data_start, file_size;
    st_tensor *t;
    size_t n;
} st_file;

/* Parse the header and check every extent; the file stays open for st_read_f32. */
int st_open(mpx_env *env, const char *path, st_file *out);
void st_close(st_file *f);
const st_tensor *st_find(const st_file *f, const char *name);
uint64_t st_numel(const st_tensor *t);

/* 0 when `t` is F32, F16 or BF16 (what st_read_f32 reads), else an error naming the
 * file, the tensor and its dtype: checked from the header alone (mpx check). */
int st_check_float(mpx_env *env, const st_file *sf, const st_tensor *t);

/* Read an F32, F16 or BF16 tensor, widened exactly to fp32. */
int st_read_f32(mpx_env *env, st_file *f, const st_tensor *t, float *dst);

/* Write F32 tensors (header padded to 8 bytes) to `path` through a temp file + rename. */
typedef struct st_out {
    const char *name;
    int ndim;
    const int64_t *shape;
    const float *data;
} st_out;
int st_write_f32(mpx_env *env, const char *path, const st_out *t, size_t n);

#endif
