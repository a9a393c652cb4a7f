/* The scan for integer literals libconfig 1.5 would wrap (config_literals.c). Included
 * by config_load.c (the file and each override before libconfig reads them) and, outside
 * the folder, by the sweep (sweep.c: a sweep file). Not part of the core's interface. */
#ifndef MPX_CONFIG_LITERALS_H
#define MPX_CONFIG_LITERALS_H

#include "config_util.h"

/* Integer literals without the L suffix that do not fit 32 bits (libconfig 1.5 wraps
 * them), each an error naming "FILE:LINE" (or fixed_where) and the key (or fixed_key). */
void mpx_config_scan_int_literals(const char *text, const char *file, const char *fixed_where,
                                  const char *fixed_key, mpx_errs *e);
/* The same over a file and the files it @includes (include_dir as config_set_include_dir;
 * NULL: the working folder); -1 when any was found. */
int mpx_config_scan_file_int_literals(const char *path, const char *include_dir, mpx_errs *e);

#endif
