/* libFuzzer targets (make fuzz): the parsers take file paths, so each input is written
 * to a file in a per-process folder on /dev/shm (tmpfs) first. */
#ifndef MPX_FUZZ_INPUT_H
#define MPX_FUZZ_INPUT_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

static inline int mkdir_p(const char *dir) { return mkdir(dir, 0700) != 0 && access(dir, W_OK) != 0; }

/* This process's fuzz folder, made on the first call. */
static inline const char *fuzz_dir(void)
{
    static char dir[64];
    if (!dir[0]) {
        snprintf(dir, sizeof dir, "/dev/shm/mpx-fuzz-%ld", (long)getpid());
        if (mkdir_p(dir)) abort();
    }
    return dir;
}

/* `data` as the file NAME in this process's fuzz folder; returns its path (static). */
static inline const char *fuzz_file(const char *name, const uint8_t *data, size_t size)
{
    static char path[160];
    snprintf(path, sizeof path, "%s/%s", fuzz_dir(), name);
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(data, 1, size, f) != size || fclose(f) != 0) abort();
    return path;
}

#endif
