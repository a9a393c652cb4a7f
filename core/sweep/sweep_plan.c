/* Planning a sweep's cells in-process: each cell's configuration is loaded and checked
 * with the same session code `mpx run` uses, so that a cell whose plugin is missing or
 * declared incompatible is recorded as skipped instead of being run to fail. */
#include "sweep.h"
#include "plugin_names.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../datasets/sha256.h"
#include "../config/core_schema.h"
#include "plugin_names.h"

static char *xstrdup(const char *s)
{
    char *d = malloc(strlen(s) + 1);
    if (d) strcpy(d, s);
    return d;
}

/* A folder-safe rendering of a label: [A-Za-z0-9.+-] kept, anything else '_'. */
static void sanitise_append(char *buf, size_t len, const char *label)
{
    size_t used = strlen(buf);
    for (const char *p = label; *p && used + 1 < len; p++) {
        char ch = *p;
        int ok = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
                 ch == '.' || ch == '+' || ch == '-';
        buf[used++] = ok ? ch : '_';
    }
    buf[used] = 0;
}

static int build_cell(const mpx_sweep *sw, size_t cell, const char *const *user_ov, size_t n_user,
                      mpx_sweep_cell *c)
{
    size_t idx[64];
    memset(c, 0, sizeof *c);
    c->index = cell;
    mpx_sweep_cell_index(sw, cell, idx);
    c->overrides = calloc(n_user + sw->n_set + sw->n_axes, sizeof *c->overrides);
    c->axes = json_object();
    if (!c->overrides || !c->axes) return -1;
    for (size_t i = 0; i < n_user; i++)
        if (!(c->overrides[c->n_overrides++] = xstrdup(user_ov[i]))) return -1;
    for (size_t i = 0; i < sw->n_set; i++)
        if (!(c->overrides[c->n_overrides++] = xstrdup(sw->set[i]))) return -1;
    for (size_t a = 0; a < sw->n_axes; a++) {
        const mpx_sweep_axis *ax = &sw->axes[a];
        size_t need = strlen(ax->key) + strlen(ax->literal[idx[a]]) + 2;
        char *ov = malloc(need);
        if (!ov) return -1;
        snprintf(ov, need, "%s=%s", ax->key, ax->literal[idx[a]]);
        c->overrides[c->n_overrides++] = ov;
        json_object_set(c->axes, ax->key, ax->value[idx[a]]);
        if (a) sanitise_append(c->name, 96, "_");
        sanitise_append(c->name, 96, ax->label[idx[a]]);
    }
    return 0;
}

/* sha256 of the requested configuration (what the base file and the overrides set, as
 * validated; schema defaults left out, so that a key added to mpx later does not move
 * every finished cell of a long study) with run.output_dir blanked and
 * train.checkpoint_every, train.update_chunk and train.update_threads left out (where a
 * run writes, how often it saves its training state, how large its optimizer's update
 * windows are and on how many threads the update runs do not change what it computes:
 * tests/test_resume.c, tests/test_update_window.c, tests/test_update_threads.c; so a
 * sweep resumed with another value finds its finished cells); first 8 hex digits.
 * backend.cpu.threads, which mpx matrix also ignores, stays in: the committed studies
 * set it in their files, and leaving it out would rename every one of their cells. */
static void hash_config(mpx_config *cfg, char id[32])
{
    char err[512], *text = NULL;
    size_t len = 0;
    uint8_t digest[32];
    mpx_config_set(cfg, "run.output_dir=\"\"", err, sizeof err); /* best effort */
    mpx_config_remove(cfg, "train.checkpoint_every");
    mpx_config_remove(cfg, "train.update_chunk");
    mpx_config_remove(cfg, "train.update_threads");
    FILE *f = open_memstream(&text, &len);
    if (!f || mpx_config_write_requested(cfg, f) != 0) len = 0;
    if (f) fclose(f);
    mpx_sha256(text ? text : "", len, digest);
    mpx_sha256_hex(digest, 4, id);
    free(text);
}

/* When even the unvalidated configuration cannot be read: hash what was asked for. */
static void hash_request(const mpx_sweep *sw, const mpx_sweep_cell *c, char id[32])
{
    mpx_sha256_ctx h;
    uint8_t digest[32];
    mpx_sha256_init(&h);
    mpx_sha256_update(&h, sw->base, strlen(sw->base) + 1);
    for (size_t i = 0; i < c->n_overrides; i++) mpx_sha256_update(&h, c->overrides[i], strlen(c->overrides[i]) + 1);
    mpx_sha256_final(&h, digest);
    mpx_sha256_hex(digest, 4, id);
}

/* Which selected plugins are not installed; "" when all are. Returns -1 (the reason in
 * why) when one is no plugin mpx knows either: a typo, not a skipped cell. */
static int missing_plugins(const mpx_config *raw, const mpx_session *s, char *why, size_t len)
{
    char dirs[2048], names[512];
    why[0] = 0;
    for (int k = 0; k < MPX_KIND_COUNT; k++) {
        const char *name = mpx_config_selected(raw, mpx_kind_name((mpx_kind)k));
        if (!name || mpx_registry_find(&s->reg, (mpx_kind)k, name)) continue;
        char refusal[1536];
        if (mpx_registry_refusal(&s->reg, (mpx_kind)k, name, refusal, sizeof refusal)) {
            /* a broken plugin is an error to fix, not a cell to skip */
            snprintf(why, len, "%s.plugin = \"%s\": a plugin of that name was found but refused: %s",
                     mpx_kind_name((mpx_kind)k), name, refusal);
            return -1;
        }
        if (!mpx_plugin_name_known((mpx_kind)k, name)) {
            const char *best = mpx_plugin_name_suggest(&s->reg, (mpx_kind)k, name);
            snprintf(why, len, "%s.plugin = \"%s\": no %s plugin of that name is installed or known "
                     "(installed: %s)%s%s%s; a plugin of your own: give its folder with --plugin-dir or "
                     "$MPX_PLUGIN_PATH (searched: %s)", mpx_kind_name((mpx_kind)k), name, mpx_kind_name((mpx_kind)k),
                     mpx_registry_names(&s->reg, (mpx_kind)k, names, sizeof names),
                     best ? " — did you mean '" : "", best ? best : "", best ? "'?" : "",
                     mpx_registry_dirs_text(&s->reg, dirs, sizeof dirs));
            return -1;
        }
        size_t used = strlen(why);
        snprintf(why + used, len - used, "%s%s/%s not found (searched: %s)", used ? "; " : "",
                 mpx_kind_name((mpx_kind)k), name, mpx_registry_dirs_text(&s->reg, dirs, sizeof dirs));
    }
    return 0;
}

/* Multi-line reasons become one line: they go into tables and listings. */
static void one_line(char *s, size_t cap)
{
    char tmp[4096];
    size_t j = 0;
    for (size_t i = 0; s[i] && j + 3 < sizeof tmp; i++) {
        if (s[i] != '\n') { tmp[j++] = s[i]; continue; }
        if (!s[i + 1]) break;
        tmp[j++] = ';';
        tmp[j++] = ' ';
    }
    tmp[j] = 0;
    snprintf(s, cap, "%s", tmp);
}

/* Load, classify and hash one cell; sets plan, why, effective and id. Returns -1 (the
 * reason in why) when the cell names a plugin that does not exist. */
static int classify(const mpx_sweep *sw, mpx_session *s, mpx_sweep_cell *c, char *out_dir, size_t out_len)
{
    mpx_config *raw = NULL;
    const char *const *ov = (const char *const *)c->overrides;
    if (mpx_config_load(&raw, sw->base, ov, c->n_overrides, mpx_core_groups, mpx_n_core_groups, NULL,
                        c->why, sizeof c->why)) {
        c->plan = MPX_PLAN_BAD;
        hash_request(sw, c, c->id);
        return 0;
    }
    const char *od;
    if (!mpx_config_get_string(raw, "run.output_dir", &od)) snprintf(out_dir, out_len, "%s", od);
    if (missing_plugins(raw, s, c->why, sizeof c->why)) {
        mpx_config_free(raw);
        return -1;
    }
    if (c->why[0]) {
        c->plan = MPX_PLAN_SKIP;
        c->effective = mpx_config_to_json(raw);
        hash_config(raw, c->id);
        mpx_config_free(raw);
        return 0;
    }
    mpx_config_free(raw);
    if (mpx_session_configure(s, sw->base, ov, c->n_overrides, c->why, sizeof c->why)) {
        c->plan = MPX_PLAN_BAD;
        hash_request(sw, c, c->id);
        mpx_session_unconfigure(s);
        return 0;
    }
    c->plan = mpx_session_check_compat(s, c->why, sizeof c->why) ? MPX_PLAN_SKIP : MPX_PLAN_RUN;
    c->effective = mpx_config_to_json(s->cfg);
    hash_config(s->cfg, c->id);
    mpx_session_unconfigure(s);
    return 0;
}

int mpx_sweep_plan(const mpx_sweep *sw, mpx_session *s, const char *const *user_ov, size_t n_user,
                   mpx_sweep_cell *cells, char *err, size_t errlen)
{
    /* the base with the user's overrides, unvalidated against plugins: where records go */
    mpx_config *base = NULL;
    if (mpx_config_load(&base, sw->base, user_ov, n_user, mpx_core_groups, mpx_n_core_groups, NULL, err, errlen))
        return -1;
    char base_out[PATH_MAX] = "runs";
    const char *od;
    if (!mpx_config_get_string(base, "run.output_dir", &od)) snprintf(base_out, sizeof base_out, "%s", od);
    mpx_config_free(base);
    for (size_t i = 0; i < sw->n_cells; i++) {
        mpx_sweep_cell *c = &cells[i];
        if (build_cell(sw, i, user_ov, n_user, c)) {
            snprintf(err, errlen, "out of memory");
            return -1;
        }
        char out_dir[PATH_MAX];
        snprintf(out_dir, sizeof out_dir, "%s", base_out);
        if (classify(sw, s, c, out_dir, sizeof out_dir)) {
            snprintf(err, errlen, "cell %s: %s", c->name, c->why);
            return -1;
        }
        one_line(c->why, sizeof c->why);
        if (snprintf(c->dir, sizeof c->dir, "%s/%s/%s-%s", out_dir, sw->name, c->name, c->id) >= (int)sizeof c->dir) {
            snprintf(err, errlen, "cell folder name too long under %s", out_dir);
            return -1;
        }
        c->rec = mpx_sweep_read_state(c->dir, c->rec_why, sizeof c->rec_why);
    }
    return 0;
}

void mpx_sweep_cells_free(mpx_sweep_cell *cells, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        for (size_t j = 0; j < cells[i].n_overrides; j++) free(cells[i].overrides[j]);
        free(cells[i].overrides);
        json_decref(cells[i].axes);
        json_decref(cells[i].effective);
    }
}
