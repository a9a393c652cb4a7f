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
#include <sys/stat.h>
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

/* The index's temporary, written whole by mpx_write_json_atomic: cut it to half, as a
 * kill half-way through writing it would leave it, and die before the rename. */
static void die_before_index_rename(const char *tmp, const char *path)
{
    size_t n = strlen(path);
    if (n < 11 || strcmp(path + n - 11, "/sweep.json")) return;   /* only the index's write */
    struct stat st;
    if (stat(tmp, &st) == 0 && truncate(tmp, st.st_size / 2) != 0) perror("mpx sweep: MPX_SWEEP_FAULT: truncate");
    mpx_sweep_fault_die("while writing sweep.json");
}

void mpx_sweep_fault_arm_index(void) { mpx_atomic_before_rename = die_before_index_rename; }
