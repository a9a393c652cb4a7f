/* Running one cell: the mpx binary itself as a child (`mpx run ... --out DIR`), so a
 * crash or a leak in one cell cannot touch the others. Its output goes to DIR/mpx.log;
 * on a terminal the parent draws a progress line from the child's metrics.csv. */
#include "sweep.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "../record/record.h"
#include "../engine/train_state.h"
#include "../record/fsutil.h"

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

char **mpx_sweep_child_argv(const mpx_sweep *sw, const mpx_sweep_cell *c, const char *const *extra, size_t n_extra,
                            const char *const *dirs, size_t n_dirs)
{
    size_t n = 0, cap = 8 + 2 * (c->n_overrides + n_extra) + 2 * n_dirs;
    char **argv = calloc(cap, sizeof *argv);
    if (!argv) return NULL;
    argv[n++] = "mpx";
    argv[n++] = "run";
    argv[n++] = sw->base;
    for (size_t i = 0; i < c->n_overrides; i++) {
        argv[n++] = "-s";
        argv[n++] = c->overrides[i];
    }
    for (size_t i = 0; i < n_extra; i++) {
        argv[n++] = "-s";
        argv[n++] = (char *)extra[i];
    }
    argv[n++] = "--out";
    argv[n++] = (char *)c->dir;
    char state[PATH_MAX];
    if (mpx_train_state_find(c->dir, state, sizeof state) == 0) { /* an interrupted cell continues */
        argv[n++] = "--resume";
        argv[n++] = (char *)c->dir;
    }
    for (size_t i = 0; i < n_dirs; i++) {
        argv[n++] = "--plugin-dir";
        argv[n++] = (char *)dirs[i];
    }
    argv[n] = NULL;
    return argv;
}

static void draw_progress(const mpx_sweep_cell *c, const char *label, mpx_cell_progress *p)
{
    if (mpx_sweep_read_progress(c->dir, p) != 0) {
        fprintf(stderr, "\r\033[K%s  starting", label);
        return;
    }
    double eta = mpx_cell_progress_eta(p);
    fprintf(stderr, "\r\033[K%s  step %ld/%ld  loss %.4f  ETA %d:%02d", label, p->step + 1, p->total, p->loss,
            (int)(eta / 60), (int)eta % 60);
}

static int spawn(char **argv, const char *log, pid_t *pid, char *err, size_t errlen)
{
    int fd = open(log, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0666);
    if (fd < 0) {
        snprintf(err, errlen, "cannot write %s: %s", log, strerror(errno));
        return -1;
    }
    fflush(NULL);
    *pid = fork();
    if (*pid < 0) {
        snprintf(err, errlen, "fork: %s", strerror(errno));
        close(fd);
        return -1;
    }
    if (*pid == 0) {
        dup2(fd, STDOUT_FILENO);
        dup2(fd, STDERR_FILENO);
        execv("/proc/self/exe", argv);
        fprintf(stderr, "mpx sweep: cannot run /proc/self/exe: %s\n", strerror(errno));
        _exit(127);
    }
    close(fd);
    return 0;
}

int mpx_sweep_spawn(const mpx_sweep *sw, const mpx_sweep_cell *c, const char *const *extra, size_t n_extra,
                    const char *const *plugin_dirs, size_t n_dirs, pid_t *pid, char *err, size_t errlen)
{
    char log[PATH_MAX + 16];
    if (mpx_mkdirs(c->dir) != 0) {
        snprintf(err, errlen, "cannot create %s: %s", c->dir, strerror(errno));
        return -1;
    }
    snprintf(log, sizeof log, "%s/mpx.log", c->dir);
    char **argv = mpx_sweep_child_argv(sw, c, extra, n_extra, plugin_dirs, n_dirs);
    if (!argv) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    int rc = spawn(argv, log, pid, err, errlen);
    free(argv);
    return rc;
}

void mpx_sweep_outcome(int status, double seconds, mpx_cell_outcome *out)
{
    out->seconds = seconds;
    out->interrupted = 0;
    out->exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    out->signal = WIFSIGNALED(status) ? WTERMSIG(status) : 0;
}

/* The fault hook's "cell" and "orphan" points: the child stops itself at a step (train.c's
 * hook, told so through its environment only), and the sweep dies there. */
static int fault_during(size_t nth)
{
    int kill_cell = mpx_sweep_fault_at("cell", nth);
    if (!kill_cell && !mpx_sweep_fault_at("orphan", nth)) return 0;
    char step[32];
    snprintf(step, sizeof step, "%lld", mpx_sweep_fault_step());
    if (setenv("MPX_FAULT_AT_STEP", step, 1) || setenv("MPX_FAULT_SIGNAL", "STOP", 1)) return 0;
    return kill_cell ? 1 : 2;
}

static void fault_now(int during, pid_t pid)
{
    if (during == 1) kill(pid, SIGKILL);
    else kill(pid, SIGCONT);
    mpx_sweep_fault_die(during == 1 ? "with its running cell" : "(its running cell goes on)");
}

/* SIGINT, SIGTERM or SIGHUP to the sweep while a cell runs: passed on to the cell, whose
 * `mpx run` records itself killed (keeping its checkpoint) and dies of it, and the sweep
 * stops after it (before, the cell went on alone, holding its folder's lock). */
static volatile sig_atomic_t got_signal;
static void on_signal(int sig) { got_signal = sig; }

int mpx_sweep_exec(const mpx_sweep *sw, const mpx_sweep_cell *c, const char *const *plugin_dirs,
                   size_t n_dirs, const char *label, int tty, size_t nth, mpx_cell_outcome *out,
                   char *err, size_t errlen)
{
    memset(out, 0, sizeof *out);
    pid_t pid;
    int during = fault_during(nth);
    struct sigaction sa, old[3];
    const int sigs[3] = { SIGINT, SIGTERM, SIGHUP };
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;   /* no SA_RESTART: the wait below wakes on a signal */
    sigemptyset(&sa.sa_mask);
    got_signal = 0;
    for (int k = 0; k < 3; k++) sigaction(sigs[k], &sa, &old[k]);   /* the child starts with the defaults */
    int spawned = mpx_sweep_spawn(sw, c, NULL, 0, plugin_dirs, n_dirs, &pid, err, errlen);
    if (during) {
        unsetenv("MPX_FAULT_AT_STEP");
        unsetenv("MPX_FAULT_SIGNAL");
    }
    if (spawned) {
        for (int k = 0; k < 3; k++) sigaction(sigs[k], &old[k], NULL);
        return -1;
    }
    double t0 = now_s();
    mpx_cell_progress prog = { 0 };
    int status = 0, passed_on = 0;
    for (;;) {
        if (got_signal && !passed_on) {
            kill(pid, got_signal);
            passed_on = 1;
        }
        /* polled, so that a signal arriving between the check above and the wait is
         * passed on within 0.2 s */
        pid_t w = waitpid(pid, &status, WNOHANG | (during ? WUNTRACED : 0));
        if (w == pid && WIFSTOPPED(status)) fault_now(during, pid);
        if (w == pid) break;
        if (w < 0 && errno != EINTR) {
            snprintf(err, errlen, "waitpid: %s", strerror(errno));
            for (int k = 0; k < 3; k++) sigaction(sigs[k], &old[k], NULL);
            return -1;
        }
        if (tty) draw_progress(c, label, &prog);
        nanosleep(&(struct timespec){ 0, 200000000 }, NULL);
    }
    for (int k = 0; k < 3; k++) sigaction(sigs[k], &old[k], NULL);
    if (tty) fputs("\r\033[K", stderr);
    mpx_sweep_outcome(status, now_s() - t0, out);
    out->interrupted = passed_on;   /* the sweep stops after it, whatever became of the cell */
    return 0;
}
