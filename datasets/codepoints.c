#include "codepoints.h"

#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

int mpx_cps_decode(const char *s, mpx_cps *o)
{
    size_t len = strlen(s);
    o->n = 0;
    o->v = malloc(sizeof(int32_t) * (len + 1));
    if (!o->v) return -1;
    for (size_t i = 0; i < len;) {
        utf8proc_int32_t cp;
        utf8proc_ssize_t k = utf8proc_iterate((const utf8proc_uint8_t *)s + i, (utf8proc_ssize_t)(len - i), &cp);
        if (k < 0) k = 1, cp = 0xFFFD;
        o->v[o->n++] = cp;
        i += (size_t)k;
    }
    return 0;
}
