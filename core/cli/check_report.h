/* What `mpx check` adds after the effective configuration: facts a user would otherwise
 * learn only by running (the lr schedule, keys that never act). */
#ifndef MPX_CHECK_REPORT_H
#define MPX_CHECK_REPORT_H

#include <stdio.h>

#include "../engine/session.h"

/* Returns 0, or non-zero when a problem was found (printed to err). */
int mpx_check_report(mpx_session *s, FILE *out, FILE *err);

#endif
