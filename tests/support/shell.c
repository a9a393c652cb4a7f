#include "shell.h"

#include "keep.h"

#include <criterion/criterion.h>
#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

char *ts_tmpdir(const char *tag)
{
    char *d = ts_keep(malloc(strlen(tag) + 32)); /* the harness frees it at exit */
    cr_assert_not_null(d);
    sprintf(d, "/tmp/mpx-%s-XXXXXX", tag);
    cr_assert_not_null(mkdtemp(d), "mkdtemp %s", d);
    return d;
}

int ts_sh(char *out, size_t len, const char *fmt, ...)
{
    char cmd[8192];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(cmd, sizeof cmd, fmt, ap);
    va_end(ap);
    FILE *p = popen(cmd, "r");
    cr_assert_not_null(p, "popen: %s", cmd);
    size_t used = 0;
    char buf[4096];
    for (size_t n; (n = fread(buf, 1, sizeof buf, p)) > 0;) {
        if (out && used + 1 < len) {
            size_t m = n < len - 1 - used ? n : len - 1 - used;
            memcpy(out + used, buf, m);
            used += m;
        }
    }
    if (out && len) out[used] = 0;
    int st = pclose(p);
    cr_assert(WIFEXITED(st), "%s: status %d", cmd, st);
    return WEXITSTATUS(st);
}

void ts_write_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    cr_assert_not_null(f, "cannot write %s", path);
    fputs(text, f);
    cr_assert_eq(fclose(f), 0, "cannot write %s", path);
}

char *ts_slurp(const char *path, size_t *n)
{
    FILE *f = fopen(path, "rb");
    cr_assert_not_null(f, "no %s", path);
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = malloc((size_t)len + 1);
    cr_assert_not_null(buf);
    size_t got = fread(buf, 1, (size_t)len, f);
    buf[got] = 0;
    fclose(f);
    if (n) *n = got;
    return buf;
}

json_t *ts_load_json(const char *path)
{
    json_error_t e;
    json_t *j = json_load_file(path, 0, &e);
    cr_assert_not_null(j, "%s:%d: %s", path, e.line, e.text);
    return j;
}

json_t *ts_sweep_cell(json_t *index, const char *name)
{
    size_t i;
    json_t *c;
    json_array_foreach(json_object_get(index, "cells"), i, c)
        if (!strcmp(json_string_value(json_object_get(c, "name")), name)) return c;
    cr_assert_fail("no cell %s in sweep.json", name);
    return NULL;
}

int ts_same_file(const char *dir, const char *a, const char *b, const char *file)
{
    char pa[1024], pb[1024];
    snprintf(pa, sizeof pa, "%s/%s/%s", dir, a, file);
    snprintf(pb, sizeof pb, "%s/%s/%s", dir, b, file);
    size_t na, nb;
    char *x = ts_slurp(pa, &na), *y = ts_slurp(pb, &nb);
    int same = na == nb && memcmp(x, y, na) == 0;
    free(x);
    free(y);
    return same;
}

char *ts_metrics_rows(const char *dir)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/metrics.csv", dir);
    char *text = ts_slurp(path, NULL), *out = calloc(strlen(text) + 1, 1), *o = out;
    cr_assert_not_null(out);
    for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n")) {
        int commas = 0;
        for (char *p = line; *p && commas < 6; p++) {
            if (*p == ',') commas++;
            if (commas < 6) *o++ = *p;
        }
        *o++ = '\n';
    }
    free(text);
    return out;
}
