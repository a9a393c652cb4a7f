/* Where a run came from: git commit, machine, plugin versions, file checksums. */
#ifndef MPX_PROVENANCE_H
#define MPX_PROVENANCE_H

#include <jansson.h>

#include "../engine/session.h"

json_t *mpx_provenance_machine(mpx_session *s);
json_t *mpx_provenance_plugins(const mpx_session *s);
json_t *mpx_provenance_precision(const mpx_precision_desc *d, const struct mpx_format_table *fmts);
const char *mpx_git_commit(void);
/* {"path": sha256} for one file; "unreadable: ..." on error. */
void mpx_provenance_add_file(json_t *obj, const char *path);

#endif
