#include "launch.h"

#include <errno.h>
#include <jansson.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <time.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../record/fsutil.h"
#include "../record/record.h"

static int env_int(const char *name)
{
    const char *v = getenv(name);
    return v && *v ? atoi(v) : -1;
}

int mpx_launch_world(int *rank)
{
    static const char *const pairs[][2] = {
        { "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_RANK" },
        { "PMI_SIZE", "PMI_RANK" },
        { "SLURM_STEP_NUM_TASKS", "SLURM_PROCID" },
    };
    for (size_t i = 0; i < sizeof pairs / sizeof *pairs; i++) {
        int w = env_int(pairs[i][0]);
        if (w < 1) continue;
        int r = env_int(pairs[i][1]);
        *rank = r < 0 ? 0 : r;
        return w;
    }
    *rank = 0;
    return 0;
}

void mpx_launch_rank_error(const char *dir, int rank, const char *msg)
{
    char path[PATH_MAX + 32];
    if (mpx_mkdirs(dir) != 0) return;
    snprintf(path, sizeof path, "%s/rank-%d.error", dir, rank);
    FILE *f = mpx_fopen_nofollow(path, 0);
    if (!f) return;
    fprintf(f, "%s\n", msg);
    fclose(f);
}

/* Every rank-R.error beside the record, into rec["rank_errors"]; the lowest rank's
 * message in *first (borrowed from the record). */
static void collect_rank_errors(const char *dir, int ranks, json_t *rec, const char **first)
{
    json_t *errs = json_object();
    *first = NULL;
    for (int r = 0; r < ranks; r++) {
        char path[PATH_MAX + 32], key[16];
        snprintf(path, sizeof path, "%s/rank-%d.error", dir, r);
        FILE *f = fopen(path, "r");
        if (!f) continue;
        char msg[8192];
        size_t n = fread(msg, 1, sizeof msg - 1, f);
        fclose(f);
        while (n && (msg[n - 1] == '\n')) n--;
        msg[n] = 0;
        snprintf(key, sizeof key, "%d", r);
        json_object_set_new(errs, key, json_string(msg));
        if (!*first) *first = json_string_value(json_object_get(errs, key));
    }
    json_object_set_new(rec, "rank_errors", errs);
}

/* The signals that stop a process from outside (kill -9, the OOM killer; OpenMPI 4's
 * mpirun catches SIGTERM, SIGINT and SIGHUP and exits with status 1 instead), by name;
 * NULL for the others (a crash). */
static const char *stop_signal_name(int sig)
{
    switch (sig) {
    case SIGTERM: return "SIGTERM";
    case SIGINT: return "SIGINT";
    case SIGHUP: return "SIGHUP";
    case SIGKILL: return "SIGKILL";
    default: return NULL;
    }
}

/* run.json as it was before mpirun started: what the ranks wrote since is told from what
 * an earlier launch left (a resumed cell's "killed") by the file itself, which every write
 * replaces (mpx_write_json_atomic renames a new one in). */
typedef struct record_stamp {
    int exists;
    dev_t dev;
    ino_t ino;
    struct timespec mtime;
} record_stamp;

static void stamp_record(const char *dir, record_stamp *t)
{
    char path[PATH_MAX + 16];
    struct stat st;
    snprintf(path, sizeof path, "%s/run.json", dir);
    memset(t, 0, sizeof *t);
    if (lstat(path, &st) != 0) return;
    t->exists = 1;
    t->dev = st.st_dev;
    t->ino = st.st_ino;
    t->mtime = st.st_mtim;
}

static int record_is_new(const char *dir, const record_stamp *before)
{
    record_stamp now;
    stamp_record(dir, &now);
    return now.exists && (!before->exists || now.dev != before->dev || now.ino != before->ino ||
                          now.mtime.tv_sec != before->mtime.tv_sec || now.mtime.tv_nsec != before->mtime.tv_nsec);
}

/* After a launch that did not finish: the record says "failed" with the failing rank's
 * error; or, where mpirun itself was killed by a signal from outside (kill -9) and no rank
 * left an error, "killed" (a sweep runs the cell again from its checkpoint, as it does
 * when the whole run is killed). `status` is mpirun's wait status; what rank 0 said is
 * read only from a record written during this launch (`before`). */
static void mark_unfinished(const char *dir, int ranks, int status, const record_stamp *before)
{
    int code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    const char *stopped = WIFSIGNALED(status) ? stop_signal_name(WTERMSIG(status)) : NULL;
    char path[PATH_MAX + 16];
    snprintf(path, sizeof path, "%s/run.json", dir);
    int fresh = record_is_new(dir, before);
    json_error_t je;
    json_t *rec = json_load_file(path, 0, &je);
    if (!rec) rec = json_object();
    const char *st = json_string_value(json_object_get(rec, "status"));
    if (st && !strcmp(st, "finished")) { json_decref(rec); return; }
    if (!fresh) {   /* an earlier launch's word, not this one's */
        st = NULL;
        json_object_del(rec, "signal");
    }
    const char *first;
    collect_rank_errors(dir, ranks, rec, &first);
    const char *own = json_string_value(json_object_get(rec, "error"));
    json_t *sig0 = json_object_get(rec, "signal");
    int own_failed = st && !strcmp(st, "failed") && own, killed = 0;
    char msg[9000], by[64] = "";
    if (json_is_integer(sig0)) snprintf(by, sizeof by, " with signal %lld", (long long)json_integer_value(sig0));
    if (own_failed) snprintf(msg, sizeof msg, "rank 0: %s", own);
    else if (first) {
        json_t *errs = json_object_get(rec, "rank_errors");
        const char *key;
        json_t *v;
        json_object_foreach(errs, key, v) {
            if (json_string_value(v) == first) { snprintf(msg, sizeof msg, "rank %s: %s", key, first); break; }
        }
    } else if (stopped) {
        killed = 1;
        snprintf(msg, sizeof msg, "mpirun was stopped by %s from outside mpx run, and its ranks with it (a sweep "
                 "runs the cell again, from its checkpoint if it has one)", stopped);
    } else if (WIFSIGNALED(status)) {
        snprintf(msg, sizeof msg, "mpirun died of signal %d; see its output", WTERMSIG(status));
    } else if (st && !strcmp(st, "killed")) {
        /* rank 0 was stopped by mpirun: mpirun was told to stop (a SIGTERM to it ends it
         * with status 1), or another rank died without a word */
        snprintf(msg, sizeof msg, "mpirun exited with status %d after stopping rank 0%s: mpirun was stopped from "
                 "outside mpx run, or a rank died without leaving an error; see mpirun's output (`mpx sweep "
                 "--retry-failed` runs the cell again, from its checkpoint if it has one)", code, by);
    } else {
        snprintf(msg, sizeof msg, "a rank died (mpirun exited with status %d) before it could say why; "
                 "see mpirun's output", code);
    }
    json_object_set_new(rec, "status", json_string(killed ? "killed" : "failed"));
    if (killed) json_object_set_new(rec, "signal", json_integer(WTERMSIG(status)));
    json_object_set_new(rec, "error", json_string(msg));
    json_object_set_new(rec, "mpirun_status", json_integer(code));
    mpx_write_json_atomic(path, rec);
    json_decref(rec);
    fprintf(stderr, "mpx run: %s\n", msg);
}

/* The mpirun this process waits for: a signal to us (a sweep stopping its cells, ^C) is
 * passed on, so that mpirun ends its ranks rather than leaving them orphaned. */
static volatile sig_atomic_t mpirun_pid, got_signal;

static void forward_signal(int sig)
{
    got_signal = sig;
    if (mpirun_pid > 0) kill((pid_t)mpirun_pid, sig);
}

/* Stopped by a signal: the record says "killed" (unfinished: a sweep runs it again). */
static void mark_killed(const char *dir, int sig)
{
    char path[PATH_MAX + 16];
    snprintf(path, sizeof path, "%s/run.json", dir);
    json_error_t je;
    json_t *rec = json_load_file(path, 0, &je);
    if (!rec) return;
    json_object_set_new(rec, "status", json_string("killed"));
    json_object_set_new(rec, "signal", json_integer(sig));
    json_object_set_new(rec, "error", json_string("mpx run was stopped by a signal; mpirun and its ranks were stopped with it"));
    mpx_write_json_atomic(path, rec);
    json_decref(rec);
}

/* Sends sig to each child of this (single-threaded) process: after mpirun has ended, the
 * ranks it left, which OpenMPI puts each in a process group of its own. */
static void signal_children(int sig)
{
    char path[64], buf[4096];
    snprintf(path, sizeof path, "/proc/self/task/%ld/children", (long)getpid());
    FILE *f = fopen(path, "r");
    size_t n = f ? fread(buf, 1, sizeof buf - 1, f) : 0;
    if (f) fclose(f);
    buf[n] = 0;
    for (char *p = buf, *end; *p; p = end) {
        long pid = strtol(p, &end, 10);
        if (end == p) break;
        if (pid > 0) kill((pid_t)pid, sig);
    }
}

/* After mpirun has ended: its ranks may outlive it for a moment (mpirun killed), and, the
 * launcher being their subreaper, they are its children then. Wait for every one to end
 * (after 10 s, SIGTERM; after 20 s, SIGKILL), so that no rank writes the record after the
 * launcher's final word on it. */
static void wait_for_ranks(const char *what)
{
    struct timespec t0, now;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    int stage = 0;
    for (;;) {
        pid_t p = waitpid(-1, NULL, WNOHANG);
        if (p < 0 && errno != EINTR) return;   /* ECHILD: none left */
        if (p > 0) continue;
        clock_gettime(CLOCK_MONOTONIC, &now);
        double waited = (double)(now.tv_sec - t0.tv_sec) + 1e-9 * (double)(now.tv_nsec - t0.tv_nsec);
        if (stage < 2 && waited > (stage ? 20.0 : 10.0)) {
            fprintf(stderr, "mpx %s: a rank outlived mpirun by %.0f s: sending it SIG%s\n", what, waited,
                    stage ? "KILL" : "TERM");
            signal_children(stage ? SIGKILL : SIGTERM);
            stage++;
        }
        struct timespec nap = { 0, 50 * 1000 * 1000 };
        nanosleep(&nap, NULL);
    }
}

int mpx_launch_ranks(int ranks, const char *what, int argc, char **argv, const char *dir)
{
    char np[16];
    snprintf(np, sizeof np, "%d", ranks);
    const char *fixed[] = { "mpirun", "-np", np, "--oversubscribe", "--bind-to", "none",
                            "--mca", "btl", "self,vader", "--mca", "btl_vader_single_copy_mechanism", "none",
                            "--mca", "mpi_yield_when_idle", "1",
                            /* on SIGTERM mpirun passes it on, then SIGKILLs ranks still there
                             * after this many seconds (default 1): on a loaded machine rank 0
                             * could be killed before its handler had written "killed" */
                            "--mca", "odls_base_sigkill_timeout", "5", "/proc/self/exe", what };
    size_t nf = sizeof fixed / sizeof *fixed;
    char **av = calloc(nf + (size_t)argc + 1, sizeof *av);
    if (!av) { fprintf(stderr, "mpx %s: out of memory\n", what); return 1; }
    for (size_t i = 0; i < nf; i++) av[i] = (char *)fixed[i];
    for (int i = 0; i < argc; i++) av[nf + (size_t)i] = argv[i];
    char self[PATH_MAX];
    ssize_t len = readlink("/proc/self/exe", self, sizeof self - 1);
    if (len > 0) { self[len] = 0; av[nf - 2] = self; }
    for (int r = 0; r < ranks; r++) { /* errors of an earlier launch into the same folder */
        char path[PATH_MAX + 32];
        snprintf(path, sizeof path, "%s/rank-%d.error", dir, r);
        unlink(path);
    }
    /* OpenMPI 4 races on its shared session folder when two mpiruns start at once (a
     * sweep, another user): each launch gets its own */
    char session[] = "/tmp/mpx-mpirun-XXXXXX";
    if (!mkdtemp(session)) { fprintf(stderr, "mpx %s: cannot create a folder for mpirun: %s\n", what, strerror(errno)); free(av); return 1; }
    fflush(NULL);
    record_stamp before;
    stamp_record(dir, &before);
    pid_t parent = getpid();
    /* ranks orphaned by mpirun's end become this process's children (wait_for_ranks) */
    prctl(PR_SET_CHILD_SUBREAPER, 1);
    pid_t pid = fork();
    if (pid < 0) { fprintf(stderr, "mpx %s: fork: %s\n", what, strerror(errno)); free(av); return 1; }
    if (pid == 0) {
        /* mpirun ends with the launcher, however it ends (SIGKILL too): SIGTERM on its
         * death, which mpirun passes on to the ranks; and if it died already, now */
        if (prctl(PR_SET_PDEATHSIG, SIGTERM) != 0 || getppid() != parent) _exit(128 + SIGTERM);
        /* OpenMPI refuses root unless told; only for this child */
        setenv("OMPI_ALLOW_RUN_AS_ROOT", "1", 1);
        setenv("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1", 1);
        setenv("OMPI_MCA_orte_tmpdir_base", session, 1);
        execvp("mpirun", av);
        fprintf(stderr, "mpx %s: cannot start mpirun for %d ranks: %s (install openmpi-bin)\n", what, ranks, strerror(errno));
        _exit(127);
    }
    free(av);
    mpirun_pid = pid;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = forward_signal;
    sigemptyset(&sa.sa_mask);
    static const int forwarded[] = { SIGTERM, SIGINT, SIGHUP };
    for (size_t i = 0; i < sizeof forwarded / sizeof *forwarded; i++) sigaction(forwarded[i], &sa, NULL);
    int status = 0;
    while (waitpid(pid, &status, 0) < 0)
        if (errno != EINTR) { fprintf(stderr, "mpx %s: waitpid: %s\n", what, strerror(errno)); return 1; }
    wait_for_ranks(what);
    if (mpx_remove_tree(session) != 0) fprintf(stderr, "mpx %s: note: cannot remove %s: %s\n", what, session, strerror(errno));
    if (WIFEXITED(status) && WEXITSTATUS(status) == 0) return 0;
    if (got_signal) {
        mark_killed(dir, (int)got_signal);
        return 128 + (int)got_signal;
    }
    mark_unfinished(dir, ranks, status, &before);
    return 1;
}
