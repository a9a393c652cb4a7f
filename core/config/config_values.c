/* Checks on configuration values that the schema's types and ranges cannot express, so
 * that `mpx check` refuses what `mpx run` would: run.name must be one folder name inside
 * run.output_dir (at most 255 bytes, no control character); optimizer.no_decay holds at most 64 patterns, none empty (an empty one
 * would match every tensor). */
#include <string.h>

#include "config_values.h"

#define MAX_NO_DECAY 64

static void check_run_name(config_t *cfg, const char *path, mpx_errs *e)
{
    config_setting_t *s = config_lookup(cfg, "run.name");
    if (!s || config_setting_type(s) != CONFIG_TYPE_STRING) return;
    const char *v = config_setting_get_string(s);
    size_t n = strlen(v), ctrl = 0;
    while (ctrl < n && (unsigned char)v[ctrl] >= 0x20 && v[ctrl] != 0x7f) ctrl++;
    if (n && n <= 255 && ctrl == n && strcmp(v, ".") && strcmp(v, "..") && !strchr(v, '/')) return;
    char w[512];
    mpx_config_where(s, path, w, sizeof w);
    if (n > 255) {
        mpx_errs_add(e, "%s: 'run.name' is %zu bytes: a folder name holds at most 255", w, n);
        return;
    }
    if (ctrl < n) {   /* not echoed: the name itself would carry the control character */
        mpx_errs_add(e, "%s: 'run.name' holds a control character (byte 0x%02x at %zu): it names a folder", w,
                     (unsigned)(unsigned char)v[ctrl], ctrl);
        return;
    }
    mpx_errs_add(e, "%s: 'run.name' = \"%s\": must be one folder name inside run.output_dir "
                 "(not empty, not . or .., no /; quotes and spaces are fine)", w, v);
}

static void check_no_decay(config_t *cfg, const char *path, mpx_errs *e)
{
    config_setting_t *s = config_lookup(cfg, "optimizer.no_decay");
    if (!s || !(config_setting_is_list(s) || config_setting_is_array(s))) return;
    char w[512];
    mpx_config_where(s, path, w, sizeof w);
    int n = config_setting_length(s);
    if (n > MAX_NO_DECAY)
        mpx_errs_add(e, "%s: 'optimizer.no_decay' has %d patterns: at most %d", w, n, MAX_NO_DECAY);
    for (int i = 0; i < n; i++) {
        const char *v = config_setting_get_string_elem(s, i);
        if (v && !*v)
            mpx_errs_add(e, "%s: 'optimizer.no_decay' pattern %d is empty: it would match every tensor", w, i);
    }
}

int mpx_config_check_values(config_t *cfg, const char *path, mpx_errs *e)
{
    int before = e->n;
    check_run_name(cfg, path, e);
    check_no_decay(cfg, path, e);
    return e->n - before;
}
