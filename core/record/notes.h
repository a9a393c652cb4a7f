/* Notes: what the core and the plugins tell the user that is not an error (tensors a
 * checkpoint holds that the model ignores, questions cut, a pattern that matches no
 * parameter). Each goes to standard error as it happens and into the run's record,
 * run.json "notes" in order, so that a run started by hand keeps them too. Every rank
 * prints its own; rank 0's record keeps rank 0's. */
#ifndef MPX_NOTES_H
#define MPX_NOTES_H

#include <jansson.h>
#include <stdarg.h>
#include <stddef.h>

#include "mpx/abi.h"

/* Prints "mpx: note: TEXT" on stderr and keeps TEXT, whole (bytes that are not UTF-8
 * kept as '?'); thread-safe. The first MPX_NOTES_KEPT are kept, then only counted. */
void mpx_note(const char *fmt, ...) MPX_PRINTF(1, 2);

/* The same with a "PREFIX: " before the text (a plugin's label). */
void mpx_note_from(const char *prefix, const char *fmt, va_list ap);

/* A copy of the notes kept so far (NULL when there are none, or out of memory; the caller
 * owns it), and in *dropped how many more there were. */
json_t *mpx_notes_copy(size_t *dropped);

#define MPX_NOTES_KEPT 256

#endif
