/* Notes: what the core and the plugins tell the user that is not an error (tensors a
 * checkpoint holds that the model ignores, questions cut, a pattern that matches no
 * parameter). Each goes to standard error as it happens and into the run's record,
 * run.json "notes" in order, so that a run started by hand keeps them too. */
#ifndef MPX_NOTES_H
#define MPX_NOTES_H

#include <jansson.h>

/* Prints "mpx: note: TEXT" on stderr and keeps TEXT (thread-safe; the first
 * MPX_NOTES_KEPT are kept, then only counted). */
void mpx_note(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* A copy of the notes kept so far, with a last entry saying how many more there were;
 * NULL when there are none (or out of memory). The caller owns it. */
json_t *mpx_notes_copy(void);

#define MPX_NOTES_KEPT 256

#endif
