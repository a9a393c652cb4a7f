#define _XOPEN_SOURCE 700 /* nftw */
#include "fsutil.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <spawn.h>
#include <stdio.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

/* FTW_PHYS: links are reported as links (FTW_SL) and not walked into; FTW_DEPTH: a
 * folder after its contents. */
static int remove_one(const char *path, const struct stat *st, int type, struct FTW *ftw)
{
    (void)st;
    (void)ftw;
    return type == FTW_DP ? rmdir(path) : unlink(path);
}

int mpx_remove_tree(const char *path)
{
    struct stat st;
    if (lstat(path, &st) != 0) return errno == ENOENT ? 0 : -1;
    if (!S_ISDIR(st.st_mode)) return unlink(path);
    return nftw(path, remove_one, 16, FTW_DEPTH | FTW_PHYS | FTW_MOUNT) == 0 ? 0 : -1;
}

int mpx_lock_folder(const char *dir, char *err, size_t errlen)
{
    char path[4200];
    snprintf(path, sizeof path, "%s/mpx.lock", dir);
    int fd = open(path, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0666);
    if (fd < 0) {
        snprintf(err, errlen, "cannot take the lock %s: %s", path, strerror(errno));
        return -1;
    }
    if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
        int e = errno;
        char pid[32] = "";
        ssize_t n = e == EWOULDBLOCK ? pread(fd, pid, sizeof pid - 1, 0) : -1;
        pid[n > 0 ? (size_t)n : 0] = 0;
        pid[strcspn(pid, "\n")] = 0;
        close(fd);
        if (e == EWOULDBLOCK)
            snprintf(err, errlen, "%s is in use by another mpx process (pid %s, holding %s); wait for it to end "
                     "or stop it", dir, pid[0] ? pid : "unknown", path);
        else
            snprintf(err, errlen, "cannot lock %s: %s", path, strerror(e));
        return -1;
    }
    char pid[32];
    int len = snprintf(pid, sizeof pid, "%ld\n", (long)getpid());
    if (ftruncate(fd, 0) != 0 || pwrite(fd, pid, (size_t)len, 0) != len) {
        snprintf(err, errlen, "cannot write %s: %s", path, strerror(errno));
        close(fd);
        return -1;
    }
    return fd;
}

FILE *mpx_fopen_nofollow(const char *path, int append)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_NOFOLLOW | O_CLOEXEC | (append ? O_APPEND : O_TRUNC), 0666);
    if (fd < 0) return NULL;
    FILE *f = fdopen(fd, append ? "a" : "w");
    if (!f) {
        int e = errno;
        close(fd);
        errno = e;
    }
    return f;
}

int mpx_run_capture(char *const argv[], int merge_err, char *out, size_t outlen, int *status)
{
    int fd[2];
    if (outlen) out[0] = 0;
    if (pipe(fd) != 0) return -1;
    /* neither end leaks into other children; the child's dup2 copies are not close-on-exec */
    if (fcntl(fd[0], F_SETFD, FD_CLOEXEC) != 0 || fcntl(fd[1], F_SETFD, FD_CLOEXEC) != 0) {
        close(fd[0]);
        close(fd[1]);
        return -1;
    }
    posix_spawn_file_actions_t fa;
    int rc = posix_spawn_file_actions_init(&fa);
    if (!rc) rc = posix_spawn_file_actions_adddup2(&fa, fd[1], STDOUT_FILENO);
    if (!rc) rc = merge_err ? posix_spawn_file_actions_adddup2(&fa, fd[1], STDERR_FILENO)
                            : posix_spawn_file_actions_addopen(&fa, STDERR_FILENO, "/dev/null", O_WRONLY, 0);
    pid_t pid = -1;
    fflush(NULL);
    if (!rc) rc = posix_spawnp(&pid, argv[0], &fa, NULL, argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    close(fd[1]);
    if (rc) {
        close(fd[0]);
        errno = rc;
        return -1;
    }
    size_t used = 0;
    char drop[4096];
    for (;;) {
        int room = outlen > used + 1;
        ssize_t n = room ? read(fd[0], out + used, outlen - 1 - used) : read(fd[0], drop, sizeof drop);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) break;
        if (room) used += (size_t)n;
    }
    if (outlen) out[used] = 0;
    close(fd[0]);
    while (waitpid(pid, status, 0) < 0)
        if (errno != EINTR) return -1;
    return 0;
}

/* A name mpx writes in a run folder: one of these, or one of them with a suffix
 * (".tmp", ".old", ".tmp.PID"), or rank-N.error. */
static int run_folder_name(const char *name)
{
    static const char *const bases[] = { "run.json", "metrics.csv", "diagnostics.csv", "predictions.json",
                                         "nbest_predictions.json", "question_scores.csv", "mpx.log", "mpx.lock",
                                         "checkpoint", "train_state" };
    for (size_t i = 0; i < sizeof bases / sizeof *bases; i++) {
        size_t n = strlen(bases[i]);
        if (!strncmp(name, bases[i], n) && (name[n] == 0 || name[n] == '.')) return 1;
    }
    return !strncmp(name, "rank-", 5) && strstr(name, ".error") != NULL;
}

int mpx_refuse_run_folder_links(const char *dir, char *err, size_t errlen)
{
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) {
        if (errno == ENOENT) return 0;
        snprintf(err, errlen, "cannot open the run folder %s: %s", dir, strerror(errno));
        return -1;
    }
    DIR *d = fdopendir(fd);
    if (!d) {
        snprintf(err, errlen, "cannot read the run folder %s: %s", dir, strerror(errno));
        close(fd);
        return -1;
    }
    int rc = 0;
    struct dirent *e;
    while (!rc && (e = readdir(d)) != NULL) {
        struct stat st;
        if (!run_folder_name(e->d_name) || fstatat(fd, e->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0) continue;
        if (S_ISLNK(st.st_mode)) {
            snprintf(err, errlen, "%s/%s is a symbolic link: mpx writes its files in the run folder itself, never "
                     "through a link (nothing was changed; remove the link or choose another folder)", dir, e->d_name);
            rc = -1;
        }
    }
    closedir(d);
    return rc;
}
