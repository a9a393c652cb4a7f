/* mpx plugins --compat (compat.c). */
#ifndef MPX_COMPAT_H
#define MPX_COMPAT_H

#include <stdio.h>

#include "../engine/session.h"

/* Markdown tables, one per pair of kinds, of which installed plugins combine. */
int mpx_compat_print(mpx_session *s, FILE *f);

#endif
