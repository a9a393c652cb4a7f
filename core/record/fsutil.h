/* File-system and process helpers that never go through a shell and never follow a
 * symbolic link where they delete: names come from users (run.name, sweep names, folders
 * on the command line), so none of them is ever parsed by /bin/sh (docs/CONFIG.md, what
 * run.name may hold). */
#ifndef MPX_FSUTIL_H
#define MPX_FSUTIL_H

#include <stddef.h>
#include <stdio.h>

/* Removes path and, when it is a real folder, everything under it, depth first, without
 * following a symbolic link anywhere: a link is removed itself, never what it points
 * to. 0 also when path does not exist; -1 with errno on the first failure. */
int mpx_remove_tree(const char *path);

/* fopen(path, "w") or (append) "a", except that a symbolic link at path is refused
 * (ELOOP) instead of followed: what a run writes in its folder lands in its folder. */
FILE *mpx_fopen_nofollow(const char *path, int append);

/* Takes the lock of a run or sweep folder for this process: DIR/mpx.lock (created, not
 * through a link), flock'd exclusively without waiting, this pid written into it. Returns
 * the lock's descriptor, kept open (close-on-exec) until the process ends, when the
 * kernel releases the lock whatever the way it ended; or -1 with err saying that
 * another process holds DIR, naming its pid, or why the lock file could not be taken. */
int mpx_lock_folder(const char *dir, char *err, size_t errlen);

/* Refuses a run folder in which a file or folder mpx writes (run.json, metrics.csv,
 * diagnostics.csv, predictions.json, nbest_predictions.json, question_scores.csv,
 * mpx.log, mpx.lock, checkpoint, train_state, rank-N.error, and their .tmp/.old
 * siblings) is a symbolic link: mpx writes its files in the folder itself, never
 * through a link, and says so before it changes anything. 0 when there is none (or
 * no folder yet); -1 with err naming the first link. */
int mpx_refuse_run_folder_links(const char *dir, char *err, size_t errlen);

/* Runs argv[0] (looked up in PATH) with argv as its arguments, no shell; its standard
 * output (and standard error when merge_err, else /dev/null) into out (NUL-terminated,
 * truncated to outlen - 1 bytes; the rest is read and dropped). *status gets the wait
 * status. Returns 0 when the program ran (whatever its exit), -1 with errno when it
 * could not be started. */
int mpx_run_capture(char *const argv[], int merge_err, char *out, size_t outlen, int *status);

#endif
