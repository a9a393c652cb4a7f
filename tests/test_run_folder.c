/* The run folder against a hostile user (issue: names, links): no name reaches a shell, and
 * nothing is deleted through a symbolic link.
 *  - a run.name holding a quote and a command substitution trains, saves its model under
 *    exactly that folder name, and runs no command (before: `rm -rf '<dir>/checkpoint'`
 *    through system() ran it, and a name with a quote failed after training);
 *  - a file or folder mpx writes in the run folder that is a link to the user's files is
 *    refused before anything changes (before: a train_state.old or checkpoint link had its
 *    target emptied by the end-of-run cleanup), and what mpx deletes it deletes without
 *    following a link;
 *  - run.name and sweep names: control characters and over-long names refused at check,
 *    quotes and spaces accepted. */
#include <criterion/criterion.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include "support/shell.h"
#include "../core/record/fsutil.h"

TestSuite(run_folder, .timeout = 120);

static int is_link(const char *path)
{
    struct stat st;
    return lstat(path, &st) == 0 && S_ISLNK(st.st_mode);
}

Test(run_folder, a_run_name_is_never_a_shell_command)
{
    char *dir = ts_tmpdir("rf-name"), out[16384], path[4096];
    /* the folder name is a'$(touch mpx-rf-pwned)'b (no '/': one folder name); a shell would
     * create mpx-rf-pwned in the working directory, the repository root */
    unlink("mpx-rf-pwned");
    int rc = ts_sh(out, sizeof out, "build/bin/mpx run configs/tiny_squad.cfg -s train.max_steps=2 "
                   "-s train.save_model=true -s 'run.output_dir=\"%s\"' "
                   "-s \"run.name=\\\"a'\\$(touch mpx-rf-pwned)'b\\\"\" 2>&1", dir);
    cr_assert_eq(rc, 0, "%s", out);
    cr_expect_neq(access("mpx-rf-pwned", F_OK), 0, "the run name ran a command: mpx-rf-pwned exists");
    unlink("mpx-rf-pwned");
    snprintf(path, sizeof path, "%s/a'$(touch mpx-rf-pwned)'b/checkpoint/model.safetensors", dir);
    cr_expect_eq(access(path, F_OK), 0, "no saved model at %s:\n%s", path, out);
    snprintf(path, sizeof path, "%s/a'$(touch mpx-rf-pwned)'b/run.json", dir);
    json_t *rec = ts_load_json(path);
    cr_expect_str_eq(json_string_value(json_object_get(rec, "status")), "finished");
    json_decref(rec);
    ts_sh(NULL, 0, "rm -rf %s", dir);
}

/* A file or folder mpx writes in the run folder, planted as a link to the user's files:
 * the run is refused before it changes anything, naming the link; the link stays a link
 * and what it points to keeps its bytes (before: a train_state.old or checkpoint link
 * had its target emptied by the end-of-run cleanup, a diagnostics.csv link truncated its
 * target, and run.json was replaced before a metrics.csv link was refused). */
Test(run_folder, a_link_in_the_run_folder_is_refused_before_anything_changes)
{
    static const char *const names[] = { "train_state.old", "train_state.tmp", "train_state", "checkpoint",
                                         "checkpoint.tmp", "run.json", "metrics.csv", "diagnostics.csv",
                                         "predictions.json", "mpx.lock", "rank-1.error" };
    for (size_t i = 0; i < sizeof names / sizeof *names; i++) {
        char *dir = ts_tmpdir("rf-link"), out[16384], path[8192];
        /* the target: the user's folder (for a folder name) or file */
        int folder = !strchr(names[i], '.') || strstr(names[i], "train_state.") || !strcmp(names[i], "checkpoint.tmp");
        cr_assert_eq(ts_sh(NULL, 0, "mkdir -p %s/victim %s/run && echo precious > %s/victim/thesis.tex && "
                           "echo '{\"status\": \"killed\"}' > %s/run/keep.json && ln -s %s/victim%s %s/run/%s",
                           dir, dir, dir, dir, dir, folder ? "" : "/thesis.tex", dir, names[i]), 0);
        cr_assert_eq(ts_sh(NULL, 0, "cp -a %s/run %s/before", dir, dir), 0);
        int rc = ts_sh(out, sizeof out, "build/bin/mpx run configs/toy.cfg --out %s/run -s train.max_steps=2 "
                       "-s train.save_model=true 2>&1", dir);
        cr_expect_eq(rc, 1, "%s: exit %d:\n%s", names[i], rc, out);
        snprintf(path, sizeof path, "%s is a symbolic link", names[i]);
        cr_expect(strstr(out, path) && strstr(out, "nothing was changed"), "%s: the error does not name it:\n%s",
                  names[i], out);
        cr_expect_eq(ts_sh(out, sizeof out, "diff -r --no-dereference %s/before %s/run 2>&1 && "
                           "test \"$(ls %s/victim)\" = thesis.tex && grep -qx precious %s/victim/thesis.tex",
                           dir, dir, dir, dir), 0, "%s: the folder or the user's file changed: %s", names[i], out);
        ts_sh(NULL, 0, "rm -rf %s", dir);
    }
}

/* What mpx deletes (a checkpoint folder it replaces, the training state at the end) it
 * deletes without following a link anywhere: a link is removed itself, its target kept. */
Test(run_folder, removing_a_folder_never_follows_a_link)
{
    char *dir = ts_tmpdir("rf-tree"), path[4096];
    cr_assert_eq(ts_sh(NULL, 0, "mkdir -p %s/victim %s/t/sub && echo precious > %s/victim/thesis.tex && "
                       "ln -s %s/victim %s/t/sub/link && ln -s %s/victim %s/top",
                       dir, dir, dir, dir, dir, dir, dir), 0);
    snprintf(path, sizeof path, "%s/t", dir);
    cr_expect_eq(mpx_remove_tree(path), 0);
    cr_expect_neq(access(path, F_OK), 0, "the folder is still there");
    snprintf(path, sizeof path, "%s/top", dir);
    cr_expect_eq(mpx_remove_tree(path), 0);
    cr_expect(!is_link(path), "the link at the top is still there");
    snprintf(path, sizeof path, "%s/victim/thesis.tex", dir);
    char *text = ts_slurp(path, NULL);
    cr_expect_str_eq(text, "precious\n", "the user's file behind a link was removed or changed");
    free(text);
    ts_sh(NULL, 0, "rm -rf %s", dir);
}

static void expect_check(const char *args, int want_rc, const char *needle)
{
    char out[16384];
    int rc = ts_sh(out, sizeof out, "build/bin/mpx check configs/toy.cfg %s 2>&1 >/dev/null", args);
    cr_expect_eq(rc, want_rc, "mpx check %s exited %d:\n%s", args, rc, out);
    if (needle) cr_expect(strstr(out, needle), "mpx check %s:\n%s", args, out);
}

Test(run_folder, run_names_are_one_folder_name)
{
    expect_check("-s \"run.name=\\\"bob's run\\\"\"", 0, NULL);
    expect_check("-s 'run.name=\"a/b\"'", 1, "no /");
    expect_check("-s \"run.name=\\\"$(printf 'a\\tb')\\\"\"", 1, "control character (byte 0x09");
    char args[1024];
    snprintf(args, sizeof args, "-s 'run.name=\"%0256d\"'", 0);
    expect_check(args, 1, "256 bytes: a folder name holds at most 255");
    snprintf(args, sizeof args, "-s 'run.name=\"%0255d\"'", 0);
    expect_check(args, 0, NULL);
}

Test(run_folder, sweep_names_are_one_folder_name)
{
    char *dir = ts_tmpdir("rf-sweep"), out[16384], path[4096];
    snprintf(path, sizeof path, "%s/s.cfg", dir);
    char cwd[2048], text[4200];
    cr_assert_not_null(getcwd(cwd, sizeof cwd));
    /* a base that exists: the refusal is the name's, not the base's */
    snprintf(text, sizeof text, "name = \"a\\tb\";\nbase = \"%s/configs/toy.cfg\";\naxes = ( { key = \"run.seed\"; "
             "values = (1); } );\n", cwd);
    ts_write_file(path, text);
    int rc = ts_sh(out, sizeof out, "build/bin/mpx sweep %s --dry-run 2>&1", path);
    cr_expect_neq(rc, 0, "%s", out);
    cr_expect(strstr(out, "control character (byte 0x09)"), "%s", out);
    ts_sh(NULL, 0, "rm -rf %s", dir);
}

/* A record file planted as a link to the user's file (diagnostics.csv, metrics.csv) is
 * refused, naming it, and the user's file keeps its bytes (before: truncated). */
Test(run_folder, a_linked_record_file_is_refused_not_written)
{
    static const char *const names[] = { "diagnostics.csv", "metrics.csv" };
    for (size_t i = 0; i < 2; i++) {
        char *dir = ts_tmpdir("rf-file"), out[16384], path[4096];
        cr_assert_eq(ts_sh(NULL, 0, "mkdir -p %s/run && echo precious > %s/thesis.tex && ln -s %s/thesis.tex %s/run/%s",
                           dir, dir, dir, dir, names[i]), 0);
        int rc = ts_sh(out, sizeof out, "build/bin/mpx run configs/toy.cfg --out %s/run -s train.max_steps=2 2>&1", dir);
        cr_expect_neq(rc, 0, "%s: the run went on through the link:\n%s", names[i], out);
        cr_expect(strstr(out, names[i]), "%s: the error does not name it:\n%s", names[i], out);
        snprintf(path, sizeof path, "%s/thesis.tex", dir);
        char *text = ts_slurp(path, NULL);
        cr_expect_str_eq(text, "precious\n", "%s: the user's file behind the link was written", names[i]);
        free(text);
        ts_sh(NULL, 0, "rm -rf %s", dir);
    }
}

/* One process at a time: a run folder in use refuses a second `mpx run` (and `--resume`)
 * at once, naming the holder's pid, and the first run is not disturbed; a sweep folder
 * refuses a second `mpx sweep` the same way. The lock dies with its holder: after a
 * SIGKILL the folder can be used again. */
static long wait_for(const char *path)
{
    for (int i = 0; i < 600; i++) {
        char *t = access(path, F_OK) == 0 ? ts_slurp(path, NULL) : NULL;
        long pid = t ? strtol(t, NULL, 10) : 0;
        free(t);
        if (pid > 0) return pid;
        usleep(50000);
    }
    return 0;
}

/* The command, run now, is refused because pid `holder` holds the folder. */
static void expect_refused_by(long holder, const char *cmd)
{
    char out[16384], want[128];
    int rc = ts_sh(out, sizeof out, "%s 2>&1", cmd);
    snprintf(want, sizeof want, "in use by another mpx process (pid %ld", holder);
    cr_expect_eq(rc, 1, "%s: exit %d:\n%s", cmd, rc, out);
    cr_expect(strstr(out, want), "%s: no '%s' in:\n%s", cmd, want, out);
}

Test(run_folder, a_folder_in_use_refuses_a_second_process, .timeout = 120)
{
    char *dir = ts_tmpdir("rf-lock"), out[16384], path[4096];
    cr_assert_eq(ts_sh(out, sizeof out, "build/bin/mpx run configs/toy.cfg --out %s/run -s train.max_steps=1000000 "
                       "-s backend.cpu.threads=1 -s train.checkpoint_every=5 >%s/first.log 2>&1 & echo $!", dir, dir), 0);
    long first = strtol(out, NULL, 10);
    snprintf(path, sizeof path, "%s/run/mpx.lock", dir);
    long holder = wait_for(path);
    cr_assert_eq(holder, first, "the lock %s names pid %ld, the run is %ld", path, holder, first);
    snprintf(path, sizeof path, "%s/run/train_state/state.json", dir);   /* something to resume from */
    for (int i = 0; i < 600 && access(path, F_OK) != 0; i++) usleep(50000);
    char cmd[4200];
    snprintf(cmd, sizeof cmd, "build/bin/mpx run configs/toy.cfg --out %s/run -s train.max_steps=2", dir);
    expect_refused_by(holder, cmd);
    snprintf(cmd, sizeof cmd, "build/bin/mpx run --resume %s/run", dir);
    expect_refused_by(holder, cmd);
    cr_expect_eq(kill((pid_t)first, 0), 0, "the first run died");
    /* killed without a chance to clean up, the lock goes with it */
    ts_sh(NULL, 0, "kill -9 %ld; while kill -0 %ld 2>/dev/null; do sleep 0.05; done", first, first);
    int rc = ts_sh(out, sizeof out, "build/bin/mpx run configs/toy.cfg --out %s/run -s train.max_steps=2 2>&1", dir);
    cr_expect_eq(rc, 0, "after the holder died: %s", out);
    ts_sh(NULL, 0, "rm -rf %s", dir);
}

Test(run_folder, a_sweep_folder_in_use_refuses_a_second_sweep, .timeout = 120)
{
    char *dir = ts_tmpdir("rf-sweeplock"), out[16384], path[4096];
    snprintf(path, sizeof path, "%s/s.cfg", dir);
    char text[2048];
    snprintf(text, sizeof text, "name = \"locked\";\nbase = \"%s/configs/toy.cfg\";\n"
             "set = (\"run.output_dir=\\\"%s\\\"\", \"train.max_steps=1000000\", \"backend.cpu.threads=1\");\n"
             "axes = ( { key = \"run.seed\"; values = (1, 2); } );\n", getcwd(out, sizeof out), dir);
    ts_write_file(path, text);
    cr_assert_eq(ts_sh(out, sizeof out, "build/bin/mpx sweep %s >%s/first.log 2>&1 & echo $!", path, dir), 0);
    long first = strtol(out, NULL, 10);
    char lock[4200];
    snprintf(lock, sizeof lock, "%s/locked/mpx.lock", dir);
    long holder = wait_for(lock);
    cr_assert_eq(holder, first, "the sweep's lock names pid %ld, the sweep is %ld", holder, first);
    char cmd[4200];
    snprintf(cmd, sizeof cmd, "build/bin/mpx sweep %s", path);
    expect_refused_by(holder, cmd);
    int rc = ts_sh(out, sizeof out, "build/bin/mpx sweep %s --dry-run 2>&1", path);
    cr_expect(rc == 0 && !strstr(out, "in use"), "--dry-run only reads, it takes no lock (exit %d): %s", rc, out);
    /* end the sweep (it passes SIGTERM on to its running cell), then whatever of the cell
     * is left */
    ts_sh(NULL, 0, "kill -TERM %ld; while kill -0 %ld 2>/dev/null; do sleep 0.05; done; "
          "pkill -TERM -f -- '[-]-out %s/locked/'; "
          "while pgrep -f -- '[-]-out %s/locked/' >/dev/null; do sleep 0.05; done", first, first, dir, dir);
    ts_sh(NULL, 0, "rm -rf %s", dir);
}
