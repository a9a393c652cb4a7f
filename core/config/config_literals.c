/* Integer literals libconfig 1.5 would wrap: it reads an integer without the L suffix
 * into 32 bits silently (`seed = 4294967338` becomes 42), so the text is scanned before
 * libconfig sees it and every such literal is refused with its key and line — in the
 * file and in every file it `@include`s (as libconfig finds them: relative to the one
 * include folder, to nesting depth 10), keys dotted from the group around the include. */
#include <ctype.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "config_literals.h"

enum { MAX_INCLUDE_DEPTH = 10 }; /* libconfig 1.5's scanner */

typedef struct scan_ctx {
    const char *file, *fixed_where, *fixed_key;
    const char *prefix;      /* the dotted groups around this file's @include, "" at the top */
    const char *include_dir; /* NULL: relative to the working folder */
    int depth;               /* of @include; MAX_INCLUDE_DEPTH: do not follow */
} scan_ctx;

static void scan_file(const char *path, const scan_ctx *outer, const char *prefix, mpx_errs *e);

static int is_name_start(int c) { return isalpha(c) || c == '*'; }
static int is_name_char(int c) { return isalnum(c) || c == '_' || c == '-' || c == '*'; }

/* Skips a comment or a string at p (counting lines); returns the new position, or p. */
static const char *skip_non_code(const char *p, int *line)
{
    if (*p == '#' || (p[0] == '/' && p[1] == '/')) {
        while (*p && *p != '\n') p++;
        return p;
    }
    if (p[0] == '/' && p[1] == '*') {
        for (p += 2; *p && !(p[0] == '*' && p[1] == '/'); p++) *line += *p == '\n';
        return *p ? p + 2 : p;
    }
    if (*p == '"') {
        for (p++; *p && *p != '"'; p++) {
            if (*p == '\\' && p[1]) p++;
            *line += *p == '\n';
        }
        return *p ? p + 1 : p;
    }
    return p;
}

/* An integer token at p (sign included); its end in *end, or NULL if p starts a float. */
static int int_token(const char *p, const char **end, long long *v, int *overflow)
{
    const char *q = p + (*p == '-' || *p == '+');
    int hex = q[0] == '0' && (q[1] == 'x' || q[1] == 'X');
    const char *d = q + (hex ? 2 : 0);
    while (hex ? isxdigit((unsigned char)*d) : isdigit((unsigned char)*d)) d++;
    *end = d;
    if (!hex && (*d == '.' || *d == 'e' || *d == 'E')) return 0; /* a float */
    errno = 0;
    *v = strtoll(p, NULL, hex ? 16 : 10);
    *overflow = errno == ERANGE;
    return 1;
}

/* `@include "NAME"` at p, which starts a line (blanks before it): NAME into buf and the
 * position after the closing quote, or NULL when p is no include. */
static const char *include_at(const char *p, char *buf, size_t len)
{
    if (strncmp(p, "@include", 8) || (p[8] != ' ' && p[8] != '\t')) return NULL;
    p += 8;
    while (*p == ' ' || *p == '\t') p++;
    if (*p++ != '"') return NULL;
    size_t n = 0;
    for (; *p && *p != '"' && *p != '\n'; p++) {
        if (*p == '\\' && p[1]) p++;
        if (n + 1 < len) buf[n++] = *p;
    }
    buf[n] = 0;
    return *p == '"' ? p + 1 : NULL;
}

static void dotted_groups(char groups[][128], int depth, const char *prefix, char *out, size_t len)
{
    snprintf(out, len, "%s", prefix);
    for (int g = 0; g < depth && g < 8; g++)
        if (groups[g][0]) snprintf(out + strlen(out), len - strlen(out), "%s.", groups[g]);
}

/* Newlines in the first n bytes of text. */
static int line_of(const char *text, size_t n)
{
    int lines = 0;
    for (size_t i = 0; i < n; i++) lines += text[i] == '\n';
    return lines;
}

/* A file libconfig may read: a missing one it reports itself, but reading a folder
 * ends the process inside its scanner ("input in flex scanner failed", exit 2), so a
 * folder is refused here, before libconfig sees it. The config itself may be a device
 * (/dev/null is a fine empty config: mpx plugins --compat checks pairs on it); what it
 * @includes must be a regular file (not /dev/stdin, a tty or a pipe to wait on). */
static int readable_kind(const char *path, int include)
{
    struct stat st;
    return stat(path, &st) != 0 || (include ? S_ISREG(st.st_mode) : !S_ISDIR(st.st_mode));
}

static void follow_include(const char *name, const scan_ctx *c, char groups[][128], int depth, int line, mpx_errs *e)
{
    char path[4096], prefix[1200];
    if (c->depth >= MAX_INCLUDE_DEPTH) return; /* libconfig refuses it */
    int n = c->include_dir && name[0] != '/' ? snprintf(path, sizeof path, "%s/%s", c->include_dir, name)
                                             : snprintf(path, sizeof path, "%s", name);
    if (n < 0 || (size_t)n >= sizeof path) return; /* libconfig cannot open it either */
    if (!name[0] || !readable_kind(path, 1)) {
        mpx_errs_add(e, "%s:%d: @include \"%.200s\": %.300s is not a regular file (a folder, a device, a pipe?)",
                     c->file, line, name, path);
        return;
    }
    dotted_groups(groups, depth, c->prefix, prefix, sizeof prefix);
    scan_file(path, c, prefix, e);
}

static void scan(const char *text, const scan_ctx *c, mpx_errs *e)
{
    int line = 1, line_start = 1;
    char key[128] = "";
    char groups[8][128]; /* the enclosing group names, for the dotted key */
    int depth = 0;
    const char *p = text;
    char prev = 0; /* the last significant character */
    while (*p) {
        const char *q = skip_non_code(p, &line);
        if (q != p) { p = q; prev = ' '; line_start = 0; continue; }
        if (*p == '\n') { line++; p++; line_start = 1; continue; }
        if (isspace((unsigned char)*p)) { p++; continue; }
        if (*p == '@' && line_start) {
            char name[4096];
            const char *after = include_at(p, name, sizeof name);
            if (after) {
                follow_include(name, c, groups, depth, line, e);
                p = after;
                line_start = 0;
                continue;
            }
        }
        line_start = 0;
        if (is_name_start((unsigned char)*p)) {
            const char *s = p;
            while (is_name_char((unsigned char)*p)) p++;
            const char *after = p;
            while (*after == ' ' || *after == '\t') after++;
            if (*after == '=' || *after == ':') snprintf(key, sizeof key, "%.*s", (int)(p - s), s);
            prev = 'a';
            continue;
        }
        int starts_number = isdigit((unsigned char)*p) ||
                            ((*p == '-' || *p == '+') && isdigit((unsigned char)p[1]));
        if (*p == '{' || *p == '}') {
            if (*p == '{' && depth < 8) snprintf(groups[depth], sizeof groups[depth], "%s", key);
            depth += *p == '{' ? 1 : (depth > 0 ? -1 : 0);
            key[0] = 0;
            prev = *p++;
            continue;
        }
        if (starts_number && prev != '.' && prev != 'a') {
            const char *end;
            long long v;
            int overflow = 0;
            if (int_token(p, &end, &v, &overflow)) {
                int wide = *end == 'L' || *end == 'l';
                if (!wide && (overflow || v > INT32_MAX || v < INT32_MIN)) {
                    char where[4200];
                    if (c->fixed_where) snprintf(where, sizeof where, "%s", c->fixed_where);
                    else snprintf(where, sizeof where, "%s:%d", c->file, line);
                    char dotted[1400];
                    dotted_groups(groups, depth, c->prefix, dotted, sizeof dotted);
                    snprintf(dotted + strlen(dotted), sizeof dotted - strlen(dotted), "%s", key);
                    mpx_errs_add(e, "%s: '%s' = %.*s does not fit a 32-bit integer (libconfig would wrap it); "
                                 "write %.*sL for a 64-bit one", where, c->fixed_key ? c->fixed_key : dotted,
                                 (int)(end - p), p, (int)(end - p), p);
                }
                p = end + wide;
            } else {
                while (isalnum((unsigned char)*p) || *p == '.' || *p == '+' || *p == '-') p++; /* the float */
            }
            prev = '0';
            continue;
        }
        prev = *p++;
    }
}

void mpx_config_scan_int_literals(const char *text, const char *file, const char *fixed_where,
                                  const char *fixed_key, mpx_errs *e)
{
    scan_ctx c = { file, fixed_where, fixed_key, "", NULL, MAX_INCLUDE_DEPTH };
    scan(text, &c, e);
}

/* The file's text, NUL-terminated (malloc'd); NULL (no error) when it cannot be opened.
 * *nul: the text holds a NUL byte (never in a config file, and where the scan would stop
 * while libconfig reads on). */
static char *slurp(const char *path, int *too_big, int *nul)
{
    *too_big = *nul = 0;
    FILE *f = fopen(path, "rb");
    if (!f) return NULL; /* libconfig reports the unreadable file */
    size_t cap = 1 << 16, n = 0;
    char *text = malloc(cap);
    size_t r;
    while (text && (r = fread(text + n, 1, cap - n - 1, f)) > 0) {
        n += r;
        if (n + 1 == cap) {
            char *bigger = cap < ((size_t)64 << 20) ? realloc(text, cap * 2) : NULL;
            if (!bigger) { free(text); text = NULL; break; }
            text = bigger;
            cap *= 2;
        }
    }
    fclose(f);
    if (!text) *too_big = 1;
    else text[n] = 0;
    if (text && memchr(text, 0, n)) *nul = 1;
    return text;
}

static void scan_file(const char *path, const scan_ctx *outer, const char *prefix, mpx_errs *e)
{
    int too_big, nul;
    char *text = slurp(path, &too_big, &nul);
    if (too_big) mpx_errs_add(e, "%s: cannot read the config file (over 64 MiB or out of memory)", path);
    if (nul) {
        mpx_errs_add(e, "%s:%d: a NUL byte: not a text file", path, 1 + line_of(text, strlen(text)));
        free(text);
        return;
    }
    if (!text) return;
    scan_ctx c = { path, NULL, NULL, prefix, outer->include_dir, outer->depth + 1 };
    scan(text, &c, e);
    free(text);
}

int mpx_config_scan_file_int_literals(const char *path, const char *include_dir, mpx_errs *e)
{
    int before = e->n;
    scan_ctx top = { path, NULL, NULL, "", include_dir, -1 }; /* the file itself is depth 0 */
    if (!readable_kind(path, 0)) {
        mpx_errs_add(e, "%s: a folder, not a config file", path);
        return -1;
    }
    scan_file(path, &top, "", e);
    return e->n > before ? -1 : 0;
}
