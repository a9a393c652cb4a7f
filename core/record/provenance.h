/* Where a run came from, the parts that need no session: the build's git commit, the
 * CPU's model name, file checksums (the session's part: engine/session_provenance.h). */
#ifndef MPX_PROVENANCE_H
#define MPX_PROVENANCE_H

#include <jansson.h>
#include <stddef.h>

const char *mpx_git_commit(void);
/* The CPU's model name from /proc/cpuinfo ("unknown" when it cannot be read). */
void mpx_provenance_cpu_model(char *buf, size_t len);
/* {"path": sha256} for one file; "unreadable: ..." on error. */
void mpx_provenance_add_file(json_t *obj, const char *path);

#endif
