/* Where a run came from, the parts that need no session: the build's git commit, the
 * CPU, file checksums (the session's part is engine/session_provenance.c). */
#include "provenance.h"

#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "../../datasets/sha256.h"

#ifndef MPX_GIT_COMMIT
#define MPX_GIT_COMMIT "unknown"
#endif

const char *mpx_git_commit(void) { return MPX_GIT_COMMIT; }

void mpx_provenance_cpu_model(char *buf, size_t len)
{
    snprintf(buf, len, "unknown");
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (!f) return;
    char line[512];
    while (fgets(line, sizeof line, f)) {
        if (strncmp(line, "model name", 10) != 0) continue;
        char *colon = strchr(line, ':');
        if (colon) {
            snprintf(buf, len, "%s", colon + 2);
            buf[strcspn(buf, "\n")] = 0;
        }
        break;
    }
    fclose(f);
}

void mpx_provenance_add_file(json_t *obj, const char *path)
{
    char hex[65], err[512];
    if (mpx_sha256_file(path, hex, err, sizeof err) == 0) json_object_set_new(obj, path, json_string(hex));
    else json_object_set_new(obj, path, json_sprintf("unreadable: %s", err));
}
