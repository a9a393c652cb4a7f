/* Where a run came from, the session's part (run.json's machine, plugins and precision);
 * the rest (git commit, file checksums) is record/provenance.h. */
#ifndef MPX_SESSION_PROVENANCE_H
#define MPX_SESSION_PROVENANCE_H

#include <jansson.h>

#include "session_types.h"

json_t *mpx_provenance_machine(mpx_session *s);
json_t *mpx_provenance_plugins(const mpx_session *s);
json_t *mpx_provenance_precision(const mpx_precision_desc *d, const struct mpx_format_table *fmts);

#endif
