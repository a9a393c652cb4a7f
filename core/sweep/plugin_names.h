/* The plugin names mpx defines (DESIGN's built-in table, the planned ones included). A
 * sweep cell whose plugin is one of these but not installed here is skipped with the
 * reason; a name that is neither known nor installed is a typo, and an error before any
 * cell runs. */
#ifndef MPX_PLUGIN_NAMES_H
#define MPX_PLUGIN_NAMES_H

#include <stddef.h>

#include "../engine/registry.h"

int mpx_plugin_name_known(mpx_kind kind, const char *name);

/* The nearest installed or known name of that kind within a few edits, or NULL. */
const char *mpx_plugin_name_suggest(const mpx_registry *reg, mpx_kind kind, const char *name);

#endif
