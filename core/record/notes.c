/* Notes printed and kept for the record (notes.h). */
#include "notes.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

static pthread_mutex_t notes_lock = PTHREAD_MUTEX_INITIALIZER;
static json_t *notes;        /* array of strings, at most MPX_NOTES_KEPT */
static size_t notes_dropped; /* past that, or not stored (out of memory) */

static void keep(char *text)
{
    for (utf8proc_uint8_t *p = (utf8proc_uint8_t *)text; *p;) {
        utf8proc_int32_t c;
        utf8proc_ssize_t n = utf8proc_iterate(p, -1, &c);
        if (n > 0) p += n;
        else *p++ = '?';   /* a path or pattern of another encoding: JSON holds UTF-8 only */
    }
    if (!notes) notes = json_array();
    if (!notes || json_array_size(notes) >= MPX_NOTES_KEPT || json_array_append_new(notes, json_string(text)) != 0)
        notes_dropped++;
}

void mpx_note_from(const char *prefix, const char *fmt, va_list ap)
{
    va_list again;
    va_copy(again, ap);
    int n = vsnprintf(NULL, 0, fmt, again);
    va_end(again);
    size_t pre = prefix ? strlen(prefix) + 2 : 0, len = n > 0 ? (size_t)n : 0;
    char *text = malloc(pre + len + 1);
    pthread_mutex_lock(&notes_lock);   /* stderr and the record in the same order */
    if (!text) {
        fprintf(stderr, "mpx: note: (out of memory for a note of %zu bytes)\n", pre + len);
        notes_dropped++;
    } else {
        if (prefix) snprintf(text, pre + 1, "%s: ", prefix);
        vsnprintf(text + pre, len + 1, fmt, ap);
        fprintf(stderr, "mpx: note: %s\n", text);
        keep(text);
        free(text);
    }
    pthread_mutex_unlock(&notes_lock);
}

void mpx_note(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    mpx_note_from(NULL, fmt, ap);
    va_end(ap);
}

json_t *mpx_notes_copy(size_t *dropped)
{
    pthread_mutex_lock(&notes_lock);
    json_t *out = notes && json_array_size(notes) ? json_deep_copy(notes) : NULL;
    *dropped = notes_dropped;
    pthread_mutex_unlock(&notes_lock);
    return out;
}
