/* The entries a plugin must fill (ABI 1.0's of its kind's vtable; a backend's ABI 1.0
 * ops), checked when it is loaded and when a backend hands over its instance's op table. */
#ifndef MPX_VTABLE_CHECK_H
#define MPX_VTABLE_CHECK_H

#include <stddef.h>

#include "mpx/mpx.h"

/* How many required entries of a `kind` vtable (its first field its size in bytes) are
 * NULL or beyond its size; their names, joined with ", ", into buf. */
size_t mpx_vtable_missing(mpx_kind kind, const void *vtable, char *buf, size_t len);

/* The same for the ABI 1.0 ops of a backend's op table. */
size_t mpx_ops_missing(const mpx_ops *ops, char *buf, size_t len);

#endif
