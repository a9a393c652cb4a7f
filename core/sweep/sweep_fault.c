/* The sweep's own fault hook (tests): MPX_SWEEP_FAULT=POINT:K makes `mpx sweep` die on
 * SIGKILL at one point of the K-th cell it runs (1-based, counting only the cells this
 * sweep runs), so that a rerun can be checked to end with the same records and matrix
 * as an uninterrupted sweep. The points (sweep.h lists them) are where a kill -9 of the
 * sweep leaves different things behind. */
#include "sweep.h"

#include "../record/record.h"
#include "../record/fsutil.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int mpx_sweep_fault_at(const char *point, size_t k)
{
    const char *e = getenv("MPX_SWEEP_FAULT");
    size_t n = strlen(point);
    if (!e || strncmp(e, point, n) || e[n] != ':') return 0;
    char *end;
    long long want = strtoll(e + n + 1, &end, 10);
    return end != e + n + 1 && want >= 0 && (size_t)want == k;
}

long long mpx_sweep_fault_step(void)
{
    const char *e = getenv("MPX_SWEEP_FAULT_STEP");
    long long step = e && *e ? strtoll(e, NULL, 10) : 1;
    return step >= 0 ? step : 1;
}

void mpx_sweep_fault_die(const char *what)
{
    fprintf(stderr, "mpx sweep: MPX_SWEEP_FAULT: dying now (SIGKILL) %s\n", what);
    fflush(stderr);
    raise(SIGKILL);
    _exit(137); /* not reached */
}

void mpx_sweep_fault_torn_index(const char *sweep_dir)
{
    /* As if killed half-way through writing the temporary file: the rename never came. */
    static const char torn[] = "{\n  \"axes\": [\n    {\n      \"key\": \"run.se";
    char path[PATH_MAX + 32];
    snprintf(path, sizeof path, "%s/sweep.json.tmp.%ld", sweep_dir, (long)getpid());
    int fd = mpx_mkdirs(sweep_dir) == 0 ? open(path, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0666) : -1;
    if (fd >= 0) {
        ssize_t w = write(fd, torn, sizeof torn - 1);
        (void)w;
        fsync(fd);
        close(fd);
    }
    mpx_sweep_fault_die("while writing sweep.json");
}
