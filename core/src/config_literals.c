/* Integer literals libconfig 1.5 would wrap: it reads an integer without the L suffix
 * into 32 bits silently (`seed = 4294967338` becomes 42), so the text is scanned before
 * libconfig sees it and every such literal is refused with its key and line. */
#include <ctype.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config_internal.h"

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

void mpx_config_scan_int_literals(const char *text, const char *file, const char *fixed_where,
                                  const char *fixed_key, mpx_errs *e)
{
    int line = 1;
    char key[128] = "";
    char groups[8][128]; /* the enclosing group names, for the dotted key */
    int depth = 0;
    const char *p = text;
    char prev = 0; /* the last significant character */
    while (*p) {
        const char *q = skip_non_code(p, &line);
        if (q != p) { p = q; prev = ' '; continue; }
        if (*p == '\n') { line++; p++; continue; }
        if (isspace((unsigned char)*p)) { p++; continue; }
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
                    char where[512];
                    if (fixed_where) snprintf(where, sizeof where, "%s", fixed_where);
                    else snprintf(where, sizeof where, "%s:%d", file, line);
                    char dotted[1200] = "";
                    for (int g = 0; g < depth && g < 8; g++)
                        if (groups[g][0]) snprintf(dotted + strlen(dotted), sizeof dotted - strlen(dotted), "%s.", groups[g]);
                    snprintf(dotted + strlen(dotted), sizeof dotted - strlen(dotted), "%s", key);
                    mpx_errs_add(e, "%s: '%s' = %.*s does not fit a 32-bit integer (libconfig would wrap it); "
                                 "write %.*sL for a 64-bit one", where, fixed_key ? fixed_key : dotted,
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

int mpx_config_scan_file_int_literals(const char *path, mpx_errs *e)
{
    FILE *f = fopen(path, "rb");
    if (!f) return 0; /* libconfig reports the unreadable file */
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
    if (!text) {
        mpx_errs_add(e, "%s: cannot read the config file (over 64 MiB or out of memory)", path);
        return -1;
    }
    text[n] = 0;
    int before = e->n;
    mpx_config_scan_int_literals(text, path, NULL, NULL, e);
    free(text);
    return e->n > before ? -1 : 0;
}
