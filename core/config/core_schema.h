/* The core's configuration schema: the top-level groups, the core's own keys in each,
 * and the core-defined sub-schemas (data tasks, scheduler types). Plugin groups take
 * their sub-group schemas from the installed plugins. */
#ifndef MPX_CORE_SCHEMA_H
#define MPX_CORE_SCHEMA_H

#include "config.h"

extern const mpx_group_schema mpx_core_groups[];
extern const size_t mpx_n_core_groups;

#endif
