/* Notes printed and kept for the record (notes.h). */
#include "notes.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>

static pthread_mutex_t notes_lock = PTHREAD_MUTEX_INITIALIZER;
static json_t *notes;        /* array of strings, at most MPX_NOTES_KEPT */
static size_t notes_dropped; /* past that */

void mpx_note(const char *fmt, ...)
{
    char buf[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    fprintf(stderr, "mpx: note: %s\n", buf);
    pthread_mutex_lock(&notes_lock);
    if (!notes) notes = json_array();
    if (notes && json_array_size(notes) < MPX_NOTES_KEPT) {
        if (json_array_append_new(notes, json_string(buf)) != 0) notes_dropped++; /* not UTF-8, or no memory */
    } else {
        notes_dropped++;
    }
    pthread_mutex_unlock(&notes_lock);
}

json_t *mpx_notes_copy(void)
{
    json_t *out = NULL;
    pthread_mutex_lock(&notes_lock);
    if ((notes && json_array_size(notes)) || notes_dropped) {
        out = notes ? json_deep_copy(notes) : json_array();
        if (out && notes_dropped) {
            char more[96];
            snprintf(more, sizeof more, "(%zu more notes, not kept)", notes_dropped);
            json_array_append_new(out, json_string(more));
        }
    }
    pthread_mutex_unlock(&notes_lock);
    return out;
}
