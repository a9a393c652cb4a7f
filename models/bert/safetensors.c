/* safetensors reader and writer (format: see safetensors.h). */
#include "safetensors.h"

#include <mpx/numerics.h>
#include <errno.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define ST_MAX_HEADER (100u << 20)  /* the reference implementation's limit */

static size_t dtype_bytes(st_dtype d)
{
    switch (d) {
    case ST_F32: return 4;
    case ST_F16: case ST_BF16: return 2;
    case ST_I64: return 8;
    default: return 0;
    }
}

static st_dtype parse_dtype(const char *s)
{
    if (!strcmp(s, "F32")) return ST_F32;
    if (!strcmp(s, "F16")) return ST_F16;
    if (!strcmp(s, "BF16")) return ST_BF16;
    if (!strcmp(s, "I64")) return ST_I64;
    return ST_OTHER;
}

uint64_t st_numel(const st_tensor *t)
{
    uint64_t n = 1;
    for (int d = 0; d < t->ndim; d++) n *= (uint64_t)t->shape[d];
    return n;
}

static int parse_shape(mpx_env *env, const char *path, const char *name, json_t *shape, st_tensor *t)
{
    if (!json_is_array(shape) || json_array_size(shape) > ST_MAX_DIMS)
        return MPX_FAIL(env, "%s: tensor '%s': bad \"shape\"", path, name);
    t->ndim = (int)json_array_size(shape);
    for (int d = 0; d < t->ndim; d++) {
        json_t *v = json_array_get(shape, (size_t)d);
        if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) > (1ll << 40))
            return MPX_FAIL(env, "%s: tensor '%s': bad dimension %d in \"shape\"", path, name, d);
        t->shape[d] = json_integer_value(v);
    }
    return 0;
}

static int parse_offsets(mpx_env *env, const char *path, const char *name, json_t *off, st_tensor *t)
{
    json_t *b = json_array_get(off, 0), *e = json_array_get(off, 1);
    if (!json_is_array(off) || json_array_size(off) != 2 || !json_is_integer(b) || !json_is_integer(e)
        || json_integer_value(b) < 0 || json_integer_value(e) < json_integer_value(b))
        return MPX_FAIL(env, "%s: tensor '%s': bad \"data_offsets\"", path, name);
    t->begin = (uint64_t)json_integer_value(b);
    t->end = (uint64_t)json_integer_value(e);
    return 0;
}

static int parse_entry(mpx_env *env, st_file *sf, const char *name, json_t *v, st_tensor *t)
{
    json_t *dt = json_object_get(v, "dtype");
    if (!json_is_object(v) || !json_is_string(dt))
        return MPX_FAIL(env, "%s: tensor '%s': no \"dtype\"", sf->path, name);
    snprintf(t->dtype_name, sizeof t->dtype_name, "%s", json_string_value(dt));
    t->dtype = parse_dtype(t->dtype_name);
    MPX_TRY(parse_shape(env, sf->path, name, json_object_get(v, "shape"), t));
    MPX_TRY(parse_offsets(env, sf->path, name, json_object_get(v, "data_offsets"), t));
    size_t es = dtype_bytes(t->dtype);
    uint64_t numel = 1;
    for (int d = 0; d < t->ndim; d++) {
        if (t->shape[d] && numel > (UINT64_C(1) << 60) / (uint64_t)t->shape[d])
            return MPX_FAIL(env, "%s: tensor '%s': shape too large", sf->path, name);
        numel *= (uint64_t)t->shape[d];
    }
    if (es && t->end - t->begin != st_numel(t) * es)
        return MPX_FAIL(env, "%s: tensor '%s': %llu data bytes for %llu %s elements", sf->path, name,
                        (unsigned long long)(t->end - t->begin), (unsigned long long)st_numel(t),
                        t->dtype_name);
    if (sf->data_start + t->end > sf->file_size)
        return MPX_FAIL(env, "%s: truncated: tensor '%s' ends at byte %llu but the file has %llu bytes",
                        sf->path, name, (unsigned long long)(sf->data_start + t->end),
                        (unsigned long long)sf->file_size);
    t->name = strdup(name);
    return t->name ? 0 : MPX_FAIL(env, "out of memory");
}

static int by_begin(const void *a, const void *b)
{
    const st_tensor *x = *(const st_tensor *const *)a, *y = *(const st_tensor *const *)b;
    return x->begin < y->begin ? -1 : x->begin > y->begin ? 1 : x->end < y->end ? -1 : x->end > y->end;
}

/* As the reference implementation (safetensors' validate): sorted by offset, each
 * tensor's data starts where the previous one's ends (no overlap, no gap), from 0 to
 * the end of the file. */
static int check_layout(mpx_env *env, st_file *sf)
{
    const st_tensor **order = malloc((sf->n ? sf->n : 1) * sizeof *order);
    if (!order) return MPX_FAIL(env, "out of memory");
    for (size_t i = 0; i < sf->n; i++) order[i] = &sf->t[i];
    qsort(order, sf->n, sizeof *order, by_begin);
    uint64_t at = 0;
    int rc = 0;
    for (size_t i = 0; i < sf->n && !rc; i++) {
        const st_tensor *t = order[i];
        if (t->begin < at)
            rc = MPX_FAIL(env, "%s: tensor '%s' (bytes %llu-%llu) overlaps tensor '%s' (ending at %llu)", sf->path,
                          t->name, (unsigned long long)t->begin, (unsigned long long)t->end, order[i - 1]->name,
                          (unsigned long long)at);
        else if (t->begin > at)
            rc = MPX_FAIL(env, "%s: tensor '%s' starts at data byte %llu, leaving a gap after byte %llu", sf->path,
                          t->name, (unsigned long long)t->begin, (unsigned long long)at);
        at = t->end;
    }
    if (!rc && sf->data_start + at != sf->file_size)
        rc = MPX_FAIL(env, "%s: the tensors cover %llu data bytes but the file holds %llu", sf->path,
                      (unsigned long long)at, (unsigned long long)(sf->file_size - sf->data_start));
    free(order);
    return rc;
}

static int parse_header(mpx_env *env, st_file *sf, const char *text, size_t len)
{
    json_error_t jerr;
    /* the format's reference implementation refuses a name given twice */
    json_t *root = json_loadb(text, len, JSON_REJECT_DUPLICATES, &jerr);
    if (!root)
        return MPX_FAIL(env, "%s: corrupt header, JSON error at line %d column %d: %s",
                        sf->path, jerr.line, jerr.column, jerr.text);
    int rc = 0;
    if (!json_is_object(root)) rc = MPX_FAIL(env, "%s: corrupt header: not a JSON object", sf->path);
    sf->t = rc ? NULL : calloc(json_object_size(root) + 1, sizeof *sf->t);
    if (!rc && !sf->t) rc = MPX_FAIL(env, "out of memory");
    const char *name;
    json_t *v;
    json_object_foreach(root, name, v) {
        if (rc) break;
        if (!strcmp(name, "__metadata__")) continue;
        rc = parse_entry(env, sf, name, v, &sf->t[sf->n]);
        if (!rc) sf->n++;
    }
    json_decref(root);
    return rc ? rc : check_layout(env, sf);
}

static int read_header(mpx_env *env, st_file *sf)
{
    unsigned char lenb[8];
    if (sf->file_size < 8 || fread(lenb, 1, 8, sf->f) != 8)
        return MPX_FAIL(env, "%s: truncated: no 8-byte header length", sf->path);
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--) hlen = (hlen << 8) | lenb[i];
    if (hlen > ST_MAX_HEADER || 8 + hlen > sf->file_size)
        return MPX_FAIL(env, "%s: truncated or corrupt: header length %llu, file size %llu",
                        sf->path, (unsigned long long)hlen, (unsigned long long)sf->file_size);
    char *text = malloc(hlen ? hlen : 1);
    if (!text) return MPX_FAIL(env, "out of memory");
    if (fread(text, 1, hlen, sf->f) != hlen) {
        free(text);
        return MPX_FAIL(env, "%s: cannot read the %llu-byte header", sf->path, (unsigned long long)hlen);
    }
    sf->data_start = 8 + hlen;
    int rc = parse_header(env, sf, text, hlen);
    free(text);
    return rc;
}

int st_open(mpx_env *env, const char *path, st_file *sf)
{
    memset(sf, 0, sizeof *sf);
    sf->path = strdup(path);
    if (!sf->path) return MPX_FAIL(env, "out of memory");
    sf->f = fopen(path, "rb");
    struct stat st;
    if (!sf->f || fstat(fileno(sf->f), &st) != 0) {
        int rc = MPX_FAIL(env, "cannot open %s: %s", path, strerror(errno));
        st_close(sf);
        return rc;
    }
    sf->file_size = (uint64_t)st.st_size;
    int rc = read_header(env, sf);
    if (rc) st_close(sf);
    return rc;
}

void st_close(st_file *sf)
{
    if (sf->f) fclose(sf->f);
    for (size_t i = 0; i < sf->n; i++) free(sf->t[i].name);
    free(sf->t);
    free(sf->path);
    memset(sf, 0, sizeof *sf);
}

const st_tensor *st_find(const st_file *sf, const char *name)
{
    for (size_t i = 0; i < sf->n; i++)
        if (!strcmp(sf->t[i].name, name)) return &sf->t[i];
    return NULL;
}

/* Widen 16-bit little-endian values in place: the raw bytes sit in the first half of dst. */
static void widen16(float *dst, uint64_t n, st_dtype d)
{
    const unsigned char *raw = (const unsigned char *)dst;
    for (uint64_t i = n; i-- > 0;) {
        uint16_t h = (uint16_t)(raw[2 * i] | (raw[2 * i + 1] << 8));
        dst[i] = d == ST_F16 ? mpx_f16_to_f32(h) : mpx_bf16_to_f32(h);
    }
}

int st_check_float(mpx_env *env, const st_file *sf, const st_tensor *t)
{
    if (t->dtype != ST_F32 && t->dtype != ST_F16 && t->dtype != ST_BF16)
        return MPX_FAIL(env, "%s: tensor '%s' has dtype %s (F32, F16 or BF16 expected)",
                        sf->path, t->name, t->dtype_name);
    return 0;
}

int st_read_f32(mpx_env *env, st_file *sf, const st_tensor *t, float *dst)
{
    MPX_TRY(st_check_float(env, sf, t));
    uint64_t bytes = t->end - t->begin;
    if (fseeko(sf->f, (off_t)(sf->data_start + t->begin), SEEK_SET) != 0
        || fread(dst, 1, bytes, sf->f) != bytes)
        return MPX_FAIL(env, "%s: cannot read tensor '%s' (%llu bytes at %llu)", sf->path, t->name,
                        (unsigned long long)bytes, (unsigned long long)(sf->data_start + t->begin));
    if (t->dtype != ST_F32) widen16(dst, st_numel(t), t->dtype);
    /* The file is little-endian, as every host mpx runs on. */
    return 0;
}

/* ---- writing ------------------------------------------------------------------ */

static char *header_json(mpx_env *env, const st_out *t, size_t n, int *rc)
{
    json_t *root = json_object(), *meta = json_object();
    *rc = 0;
    if (!root || !meta) { json_decref(root); json_decref(meta); *rc = MPX_FAIL(env, "out of memory"); return NULL; }
    json_object_set_new(meta, "format", json_string("pt"));
    json_object_set_new(root, "__metadata__", meta);
    uint64_t at = 0;
    for (size_t i = 0; i < n && !*rc; i++) {
        json_t *shape = json_array(), *e = json_object();
        uint64_t numel = 1;
        for (int d = 0; d < t[i].ndim; d++) {
            json_array_append_new(shape, json_integer(t[i].shape[d]));
            numel *= (uint64_t)t[i].shape[d];
        }
        json_object_set_new(e, "dtype", json_string("F32"));
        json_object_set_new(e, "shape", shape);
        json_object_set_new(e, "data_offsets", json_pack("[II]", (json_int_t)at, (json_int_t)(at + 4 * numel)));
        if (json_object_set_new(root, t[i].name, e) != 0) *rc = MPX_FAIL(env, "out of memory");
        at += 4 * numel;
    }
    char *s = *rc ? NULL : json_dumps(root, JSON_COMPACT | JSON_PRESERVE_ORDER);
    json_decref(root);
    if (!s && !*rc) *rc = MPX_FAIL(env, "out of memory");
    return s;
}

static int write_all(FILE *f, const st_out *t, size_t n, const char *hdr)
{
    size_t hl = strlen(hdr), padded = (hl + 7) / 8 * 8;
    unsigned char lenb[8];
    for (int i = 0; i < 8; i++) lenb[i] = (unsigned char)((uint64_t)padded >> (8 * i));
    if (fwrite(lenb, 1, 8, f) != 8 || fwrite(hdr, 1, hl, f) != hl) return -1;
    for (size_t i = hl; i < padded; i++)
        if (fputc(' ', f) == EOF) return -1;
    for (size_t i = 0; i < n; i++) {
        uint64_t numel = 1;
        for (int d = 0; d < t[i].ndim; d++) numel *= (uint64_t)t[i].shape[d];
        if (fwrite(t[i].data, 4, numel, f) != numel) return -1;
    }
    return 0;
}

int st_write_f32(mpx_env *env, const char *path, const st_out *t, size_t n)
{
    int rc;
    char *hdr = header_json(env, t, n, &rc);
    if (!hdr) return rc;
    size_t pl = strlen(path) + 8;
    char *tmp = malloc(pl);
    if (!tmp) { free(hdr); return MPX_FAIL(env, "out of memory"); }
    snprintf(tmp, pl, "%s.tmp", path);
    FILE *f = fopen(tmp, "wb");
    if (!f) rc = MPX_FAIL(env, "cannot create %s: %s", tmp, strerror(errno));
    else {
        int wr = write_all(f, t, n, hdr);
        if (fclose(f) != 0 || wr != 0) rc = MPX_FAIL(env, "cannot write %s: %s", tmp, strerror(errno));
        else if (rename(tmp, path) != 0) rc = MPX_FAIL(env, "cannot rename %s to %s: %s", tmp, path, strerror(errno));
        if (rc) remove(tmp);
    }
    free(tmp);
    free(hdr);
    return rc;
}
