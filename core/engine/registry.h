/* Plugin discovery and loading (DESIGN, The plugin ABI / Discovery).
 * Folders are searched in order; a plugin found earlier shadows one of the same kind and
 * name found later; two in one folder are both refused. Nothing is ever dlclose'd. */
#ifndef MPX_REGISTRY_H
#define MPX_REGISTRY_H

#include "mpx/mpx.h"

typedef union mpx_any_vtable {
    uint32_t size;
    mpx_precision_vtable precision;
    mpx_optimizer_vtable optimizer;
    mpx_zero_vtable zero;
    mpx_model_vtable model;
    mpx_backend_vtable backend;
    mpx_comm_vtable comm;
} mpx_any_vtable;

typedef struct mpx_plugin_rec {
    char *path;              /* the .so file */
    int dir_index;           /* position of its folder in the search order */
    mpx_plugin_desc desc;    /* copy, fields past the plugin's declared size zeroed */
    mpx_any_vtable vt;       /* copy, likewise */
    int loaded;              /* desc and vt are valid */
    char *error;             /* why it was refused (NULL when loaded) */
    int shadowed_by;         /* index of the record that wins over it, or -1 */
} mpx_plugin_rec;

typedef struct mpx_registry {
    mpx_plugin_rec *recs;
    size_t n, cap;
    char **dirs;
    size_t n_dirs;
} mpx_registry;

/* The search order: each --plugin-dir, then $MPX_PLUGIN_PATH (colon-separated), then
 * <bindir>/../plugins (build tree) and <bindir>/../lib/mpx (installed). */
int mpx_registry_default_dirs(const char *const *cli_dirs, size_t n_cli, char ***dirs, size_t *n);

/* Load every *.so in `dirs`. Never fails as a whole: problems land in recs[i].error. */
int mpx_registry_scan(mpx_registry *r, char **dirs, size_t n_dirs, const mpx_host *host);
void mpx_registry_free(mpx_registry *r);

/* The active plugin of that kind and name (loaded, not shadowed), or NULL. */
const mpx_plugin_rec *mpx_registry_find(const mpx_registry *r, mpx_kind kind, const char *name);

/* Why a plugin file that declared this kind and name was refused ("PATH: reason", into
 * buf), or NULL when none was: a selector naming it is then told why, not only that no
 * such plugin is installed. */
const char *mpx_registry_refusal(const mpx_registry *r, mpx_kind kind, const char *name, char *buf, size_t len);
/* The first refused record that declared this kind and name, or NULL (the descriptor of a
 * plugin of another major ABI is not read, so it is never found here). */
const mpx_plugin_rec *mpx_registry_refused(const mpx_registry *r, mpx_kind kind, const char *name);

/* Parse "NAME" or "KIND/NAME"; *kind is -1 when no kind was given. */
int mpx_parse_plugin_ref(const char *ref, int *kind, char *name, size_t name_len);

const char *mpx_kind_name(mpx_kind k);
int mpx_kind_from_name(const char *s); /* -1 if unknown */

/* Active plugins of one kind, in name order: for listings and config validation. */
size_t mpx_registry_count(const mpx_registry *r, mpx_kind kind);
const mpx_plugin_rec *mpx_registry_get(const mpx_registry *r, mpx_kind kind, size_t i);

/* "name1, name2" of the active plugins of a kind, into buf. */
const char *mpx_registry_names(const mpx_registry *r, mpx_kind kind, char *buf, size_t len);

/* The search folders, joined with ", ", into buf (for "not found" messages). */
const char *mpx_registry_dirs_text(const mpx_registry *r, char *buf, size_t len);

#endif
