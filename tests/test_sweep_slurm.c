/* The sweep executors beyond the serial one, held against the serial executor's matrix:
 * --jobs 2 gives the matrix of --jobs 1, each cell in its own folder and log, the cores
 * split; the Slurm job script has one array task per unfinished cell with the sweep file's
 * resources; --status reads Slurm's states (hand-written squeue/sacct answers) and a new
 * submission leaves out the queued, running and finished cells; and, where Slurm is installed, a one-node cluster on loopback (munged,
 * slurmctld, slurmd started by tests/slurm/cluster.sh in a temp folder) runs the sweep to
 * the serial matrix, and after one array task is cancelled with scancel a second
 * submission holds that cell only; a cell of two ranks starts them there (srun
 * --mpi=pmix under the MpiDefault=none of a stock slurm.conf, or mpx's own mpirun with
 * slurm.mpi = "mpirun") and records both. Every daemon the test starts is stopped, in .fini and
 * by a watcher should the test process die. */
#include <criterion/criterion.h>
#include <jansson.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "support/keep.h"
#include "support/shell.h"

#define LR_SEED "{ key = \"optimizer.lr\"; values = (0.05, 0.1); },\n  { key = \"run.seed\"; values = (1, 2); }"

/* A toy sweep in dir (absolute base) over the axes, with the slurm group given. */
static char *sweep_file(const char *dir, const char *axes, const char *slurm)
{
    char base[PATH_MAX], text[2 * PATH_MAX], *path = ts_keep(malloc(PATH_MAX));
    cr_assert_not_null(realpath("configs/toy.cfg", base));
    snprintf(text, sizeof text, "name = \"toy\";\nbase = \"%s\";\naxes = ( %s );\n%s\n", base, axes, slurm);
    snprintf(path, PATH_MAX, "%s/toy.cfg", dir);
    ts_write_file(path, text);
    return path;
}

#define SWEEP "build/bin/mpx sweep %s -s 'run.output_dir=\"%s/%s\"' -s train.epochs=2"

static void matrix_of(const char *dir, const char *out_name, char *out, size_t len)
{
    int rc = ts_sh(out, len, "build/bin/mpx matrix %s/%s/toy --rows optimizer.lr --cols run.seed "
                   "--metric final_loss,accuracy", dir, out_name);
    cr_assert_eq(rc, 0, "mpx matrix %s/%s/toy: %s", dir, out_name, out);
    cr_assert(strstr(out, "| 0.05 |") && strstr(out, "| 0.1 |"), "%s", out);
}

static json_t *load(const char *path)
{
    json_error_t e;
    json_t *j = json_load_file(path, 0, &e);
    cr_assert_not_null(j, "%s: %s (line %d)", path, e.text, e.line);
    return j;
}

static long cores(void)
{
    char out[64];
    cr_assert_eq(ts_sh(out, sizeof out, "nproc"), 0);
    return strtol(out, NULL, 10);
}

Test(sweep_jobs, two_at_a_time_gives_the_matrix_of_one_at_a_time)
{
    char *dir = ts_tmpdir("jobs"), *file = sweep_file(dir, LR_SEED, ""), out[8192], m1[8192], m2[8192];
    cr_assert_eq(ts_sh(out, sizeof out, SWEEP " --jobs 1 2>/dev/null", file, dir, "one"), 0, "%s", out);
    cr_assert_eq(ts_sh(out, sizeof out, SWEEP " --jobs 2 2>&1", file, dir, "two"), 0, "%s", out);
    cr_expect(strstr(out, "4 finished"), "%s", out);
    matrix_of(dir, "one", m1, sizeof m1);
    matrix_of(dir, "two", m2, sizeof m2);
    cr_expect_str_eq(m2, m1);
    /* each cell its own folder and log; the cores split between the two running cells */
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/two/toy/sweep.json", dir);
    json_t *index = load(path), *c;
    size_t i;
    long want = cores() / 2 > 0 ? cores() / 2 : 1;
    json_array_foreach(json_object_get(index, "cells"), i, c) {
        const char *cell = json_string_value(json_object_get(c, "dir"));
        snprintf(path, sizeof path, "%s/run.json", cell);
        json_t *r = load(path);
        json_t *eff = json_object_get(json_object_get(r, "config"), "effective");
        cr_expect_str_eq(json_string_value(json_object_get(r, "status")), "finished", "%s", cell);
        cr_expect_eq(json_integer_value(json_object_get(json_object_get(json_object_get(eff, "backend"), "cpu"),
                                                        "threads")), want, "%s", cell);
        snprintf(path, sizeof path, "%s/mpx.log", cell);
        char *log = ts_slurp(path, NULL);
        cr_expect(strstr(log, cell), "%s: %s", path, log); /* its own record, nobody else's */
        free(log);
        json_decref(r);
    }
    cr_expect_eq(i, 4);
    json_decref(index);
    /* a second run has nothing left to do */
    cr_assert_eq(ts_sh(out, sizeof out, SWEEP " --jobs 2 2>/dev/null", file, dir, "two"), 0, "%s", out);
    cr_expect(strstr(out, "ran 0 now"), "%s", out);
}

Test(sweep_jobs, a_terminated_sweep_loses_only_the_running_cells)
{
    /* two short cells first, then two long ones, so that SIGTERM finds the long ones running */
    char *dir = ts_tmpdir("jobs-kill"), out[8192];
    char *file = sweep_file(dir, "{ key = \"train.epochs\"; values = (2, 2000); },\n  { key = \"run.seed\"; values = (1, 2); }", "");
    cr_assert_eq(ts_sh(out, sizeof out,
                       "build/bin/mpx sweep %s -s 'run.output_dir=\"%s/out\"' --jobs 2 >%s/log 2>&1 & pid=$!; "
                       "for i in $(seq 200); do [ $(cat %s/out/toy/2000_*/run.json 2>/dev/null | "
                       "grep -c '\"status\": \"running\"') -ge 2 ] && break; sleep 0.1; done; "
                       "kill -TERM $pid; wait $pid; echo $?", file, dir, dir, dir), 0);
    cr_expect_eq(strtol(out, NULL, 10), 1, "a terminated sweep exits 1: %s", out);
    cr_assert_eq(ts_sh(out, sizeof out, "build/bin/mpx sweep %s -s 'run.output_dir=\"%s/out\"' --dry-run", file, dir), 0);
    cr_expect(strstr(out, "finished  2_1 ") && strstr(out, "finished  2_2 "), "the short cells keep their records:\n%s", out);
    cr_expect(strstr(out, "todo      2000_1 ") && strstr(out, "todo      2000_2 "), "%s", out);
    cr_assert_eq(ts_sh(out, sizeof out, "grep -l '\"status\": \"killed\"' %s/out/toy/2000_*/run.json | wc -l", dir), 0);
    cr_expect_eq(strtol(out, NULL, 10), 2, "the two running cells say killed");
}

Test(sweep_slurm, the_job_script_holds_one_task_per_unfinished_cell_and_the_resources)
{
    char *dir = ts_tmpdir("slurm-script"), out[16384];
    char *file = sweep_file(dir, LR_SEED, "slurm = { cpus = 3; memory = \"700M\"; time = \"00:20:00\"; gpus = 1; "
                                 "partition = \"short\"; };");
    cr_assert_eq(ts_sh(out, sizeof out, SWEEP " 2>/dev/null", file, dir, "out"), 0, "%s", out);
    cr_assert_eq(ts_sh(out, sizeof out, "rm %s/out/toy/0.1_1-*/run.json", dir), 0);
    cr_assert_eq(ts_sh(out, sizeof out, SWEEP " --executor slurm --dry-run", file, dir, "out"), 0, "%s", out);
    const char *want[] = { "#!/bin/bash\n", "\n#SBATCH --array=2\n", "\n#SBATCH --ntasks=1\n",
                           "\n#SBATCH --cpus-per-task=3\n", "\n#SBATCH --mem=700M\n", "\n#SBATCH --time=00:20:00\n",
                           "\n#SBATCH --gpus-per-task=1\n", "\n#SBATCH --partition=short\n",
                           "-s optimizer.lr=0.1 -s run.seed=1 -s \"backend.cpu.threads=$threads\" --out \"$cell\"",
                           "threads=${SLURM_CPUS_PER_TASK:-1}\n" };
    for (size_t i = 0; i < sizeof want / sizeof *want; i++) cr_expect(strstr(out, want[i]), "no %s in:\n%s", want[i], out);
    cr_expect(strstr(out, "/toy/0.1_1-") && !strstr(out, "/toy/0.05_1-"), "only the unfinished cell:\n%s", out);
    size_t tasks = 0;
    for (const char *p = out; (p = strstr(p, "exec ")); p++) tasks++;
    cr_expect_eq(tasks, 1, "%s", out);
    /* the script runs the cell as the serial executor would: run it by hand as task 2 */
    char script[PATH_MAX];
    snprintf(script, sizeof script, "%s/job.sh", dir);
    ts_write_file(script, out);
    cr_assert_eq(ts_sh(out, sizeof out, "SLURM_ARRAY_TASK_ID=2 SLURM_CPUS_PER_TASK=1 bash %s && "
                       "grep -c '\"status\": \"finished\"' %s/out/toy/0.1_1-*/run.json", script, dir), 0, "%s", out);
    cr_expect_eq(ts_sh(out, sizeof out, "SLURM_ARRAY_TASK_ID=1 bash %s 2>&1", script), 2, "%s", out);
    /* a dry run submits nothing and a bad slurm group names the file and line */
    cr_expect_eq(ts_sh(out, sizeof out, "ls %s/out/toy/slurm.json 2>/dev/null", dir), 2);
    file = sweep_file(dir, LR_SEED, "slurm = { cpus = 2;\n  memroy = \"1G\"; };");
    cr_expect_eq(ts_sh(out, sizeof out, SWEEP " --executor slurm --dry-run 2>&1", file, dir, "out"), 2);
    cr_expect(strstr(out, "toy.cfg:6: unknown key 'memroy' in slurm"), "%s", out);
}

/* A cell of run.ranks N > 1 runs through `srun --mpi=pmix -n N` (a stock Slurm's MpiDefault
 * is none, under which OpenMPI's MPI_Init cannot start), and the allocation holds N tasks;
 * slurm.mpi names another srun MPI plugin, or "mpirun": mpx run starts the ranks itself,
 * on one node. */
Test(sweep_slurm, a_multi_rank_cell_runs_through_srun)
{
    char *dir = ts_tmpdir("slurm-ranks"), out[16384];
    char *file = sweep_file(dir, LR_SEED, "");
    if (ts_sh(out, sizeof out, "build/bin/mpx check configs/toy.cfg -s run.ranks=2 >/dev/null 2>&1") != 0)
        cr_skip_test("this build's mpx check refuses run.ranks=2 on the toy (no run.ranks yet, or no MPI "
                     "comm): the srun line is not checked");
    cr_assert_eq(ts_sh(out, sizeof out, SWEEP " -s run.ranks=2 --executor slurm --dry-run", file, dir, "out"), 0,
                 "%s", out);
    cr_expect(strstr(out, "\n#SBATCH --ntasks=2\n") && !strstr(out, "--nodes"), "%s", out);
    size_t srun = 0;
    for (const char *p = out; (p = strstr(p, "exec srun --mpi=pmix -n 2 --cpus-per-task=\"$threads\" ")); p++) srun++;
    cr_expect_eq(srun, 4, "%s", out);
    /* one rank: no srun */
    cr_assert_eq(ts_sh(out, sizeof out, SWEEP " --executor slurm --dry-run", file, dir, "out"), 0, "%s", out);
    cr_expect(!strstr(out, "srun") && !strstr(out, "--nodes"), "%s", out);

    file = sweep_file(dir, LR_SEED, "slurm = { mpi = \"pmix_v4\"; };");
    cr_assert_eq(ts_sh(out, sizeof out, SWEEP " -s run.ranks=2 --executor slurm --dry-run", file, dir, "out"), 0,
                 "%s", out);
    cr_expect(strstr(out, "exec srun --mpi=pmix_v4 -n 2 "), "%s", out);
    file = sweep_file(dir, LR_SEED, "slurm = { mpi = \"mpirun\"; };");
    cr_assert_eq(ts_sh(out, sizeof out, SWEEP " -s run.ranks=2 --executor slurm --dry-run", file, dir, "out"), 0,
                 "%s", out);
    cr_expect(strstr(out, "\n#SBATCH --ntasks=2\n#SBATCH --cpus-per-task=4\n") && strstr(out, "\n#SBATCH --nodes=1\n")
              && !strstr(out, "srun"), "%s", out);
    cr_expect(strstr(out, "exec /") && strstr(out, "/mpx run "), "%s", out);

    file = sweep_file(dir, LR_SEED, "slurm = {\n  mpi = \"pmix; rm\"; };");
    cr_expect_eq(ts_sh(out, sizeof out, SWEEP " --executor slurm --dry-run 2>&1", file, dir, "out"), 2, "%s", out);
    cr_expect(strstr(out, "toy.cfg:6: slurm.mpi = \"pmix; rm\": expected an srun MPI plugin"), "%s", out);
    file = sweep_file(dir, LR_SEED, "slurm = {\n  mpi = \"\"; };");
    cr_expect_eq(ts_sh(out, sizeof out, SWEEP " --executor slurm --dry-run 2>&1", file, dir, "out"), 2, "%s", out);
    cr_expect(strstr(out, "toy.cfg:6: slurm.mpi = \"\": expected"), "%s", out);
}

/* Slurm's answers, hand-written in the formats squeue/sacct print for the options mpx
 * passes, for a submission whose eight tasks ended every way a task can end. */
Test(sweep_slurm, status_reads_slurm_states_and_the_rerun_skips_queued_and_finished_cells)
{
    char *dir = ts_tmpdir("slurm-status"), out[16384], path[PATH_MAX];
    char *file = sweep_file(dir, "{ key = \"optimizer.lr\"; values = (0.05, 0.1); },\n"
                                 "  { key = \"run.seed\"; values = (1, 2, 3, 4); }", "");
    cr_assert_eq(ts_sh(out, sizeof out, SWEEP " 2>/dev/null", file, dir, "out"), 0, "%s", out);
    /* only 0.1_3 (index 6) keeps its finished record */
    cr_assert_eq(ts_sh(out, sizeof out, "cd %s/out/toy && for c in 0.05_1 0.05_2 0.05_3 0.05_4 0.1_1 0.1_2 0.1_4; do "
                       "rm $c-*/run.json; done", dir), 0, "%s", out);
    snprintf(path, sizeof path, "%s/out/toy/slurm.json", dir);
    ts_write_file(path, "{\"schema_version\": 1, \"submissions\": [{\"job_id\": \"7\", \"cells\": "
                        "[{\"index\": 0}, {\"index\": 1}, {\"index\": 2}, {\"index\": 3}, {\"index\": 4}, "
                        "{\"index\": 5}, {\"index\": 6}, {\"index\": 7}]}]}\n");
    cr_assert_eq(ts_sh(out, sizeof out,
                       "mkdir -p %s/bin && cd %s/bin && "
                       "printf '#!/bin/sh\\n[ \"$4\" = 7 ] || exit 1\\necho \"7_0|PENDING|Priority\"\\n"
                       "echo \"7_1|RUNNING|None\"\\n' > squeue && "
                       "printf '#!/bin/sh\\n[ \"$5\" = 7 ] || exit 1\\necho \"7_2|TIMEOUT|0:0|None\"\\n"
                       "echo \"7_3|PREEMPTED|0:15|None\"\\necho \"7_4|CANCELLED by 0|0:15|None\"\\n"
                       "echo \"7_5|OUT_OF_MEMORY|0:125|None\"\\necho \"7_6|COMPLETED|0:0|None\"\\n' > sacct && "
                       "chmod +x squeue sacct", dir, dir), 0, "%s", out);
    /* how far two cells trained: Slurm's running one, 10 of 40 steps in 20 s (so 60 s
     * left at that rate); the preempted one stopped after 5 steps, its total unknown */
    cr_assert_eq(ts_sh(out, sizeof out,
                       "cd %s/out/toy && h=step,loss,lr,grad_norm,loss_scale,skipped,tokens_per_s,elapsed_s && "
                       "printf '%%s\\n8,0.75,0.1,1,1,0,100,18.5\\n9,0.5,0.1,1,1,0,100,20\\n10,0.25' "
                       "$h > $(echo 0.05_2-*)/metrics.csv && "
                       "printf '{\"status\": \"running\", \"pid\": 0, \"progress\": {\"total_steps\": 40}}' "
                       "> $(echo 0.05_2-*)/run.json && "
                       "printf '%%s\\n4,1.5,0.1,1,1,0,100,9\\n' $h > $(echo 0.05_4-*)/metrics.csv", dir), 0, "%s", out);
    char env[PATH_MAX + 32];
    snprintf(env, sizeof env, "PATH=%s/bin:$PATH", dir);
    cr_assert_eq(ts_sh(out, sizeof out, "%s " SWEEP " --status", env, file, dir, "out"), 1, "%s", out);
    const char *want[] = {
        "  pending    0.05_1 ", "slurm 7_0: PENDING (Priority)\n",
        "  running    0.05_2 ", "slurm 7_1: RUNNING\n"
        "             step 10 of 40 (25 %), loss 0.5000, 20 s in, about 1 min 0 s of training left\n",
        "  failed     0.05_3 ", "slurm 7_2: TIMEOUT exit 0:0; its record: no record\n",
        "  preempted  0.05_4 ", "slurm 7_3: PREEMPTED exit 0:15;", "\n             stopped at step 5\n",
        "  cancelled  0.1_1 ", "slurm 7_4: CANCELLED exit 0:15;",
        "  failed     0.1_2 ", "slurm 7_5: OUT_OF_MEMORY exit 0:125;",
        "  finished   0.1_3 ",
        "  todo       0.1_4 ", "slurm 7_7: no longer queued",
        "sweep toy: 1 finished, 2 failed, 1 pending, 1 running, 1 preempted, 1 cancelled, 1 todo\n",
    };
    for (size_t i = 0; i < sizeof want / sizeof *want; i++) cr_expect(strstr(out, want[i]), "no '%s' in:\n%s", want[i], out);
    /* a new submission: neither the queued nor the running nor the finished cell */
    cr_assert_eq(ts_sh(out, sizeof out, "%s " SWEEP " --executor slurm --dry-run", env, file, dir, "out"), 0, "%s", out);
    cr_expect(strstr(out, "\n#SBATCH --array=2-5,7\n"), "%s", out);
}

/* ---- a one-node Slurm cluster on loopback --------------------------------------------- */

static char cluster_dir[PATH_MAX];

static void stop_cluster(void)
{
    char out[4096];
    if (cluster_dir[0]) ts_sh(out, sizeof out, "bash tests/slurm/cluster.sh stop %s", cluster_dir);
}

static int have_slurm(char *missing, size_t len)
{
    static const char *const tools[] = { "munged", "slurmctld", "slurmd", "sbatch", "squeue", "scancel", "scontrol",
                                         "sinfo" };
    char out[256];
    missing[0] = 0;
    for (size_t i = 0; i < sizeof tools / sizeof *tools; i++)
        if (ts_sh(out, sizeof out, "PATH=$PATH:/usr/sbin command -v %s >/dev/null", tools[i]) != 0) {
            snprintf(missing, len, "%s", tools[i]);
            return 0;
        }
    return 1;
}

/* Poll --status until no cell is pending or running (at most `secs`); its exit code. */
static int wait_for(const char *env, const char *file, const char *dir, int secs, char *out, size_t len)
{
    int rc = 1;
    for (int i = 0; i < secs * 5; i++) {
        rc = ts_sh(out, len, "%s " SWEEP " --status", env, file, dir, "slurm");
        if (!strstr(out, " pending ") && !strstr(out, " running ")) return rc;
        usleep(200000);
    }
    cr_assert_fail("cells still pending or running after %d s:\n%s", secs, out);
    return rc;
}

static long submitted_job(const char *out)
{
    const char *p = strstr(out, "submitted Slurm job ");
    cr_assert_not_null(p, "%s", out);
    return strtol(p + strlen("submitted Slurm job "), NULL, 10);
}

Test(sweep_slurm, a_one_node_cluster_runs_the_sweep_and_a_rerun_submits_only_the_cancelled_cell, .fini = stop_cluster)
{
    char missing[64];
    if (!have_slurm(missing, sizeof missing))
        cr_skip_test("%s not installed (apt-get install slurm-wlm munge): the Slurm executor test is skipped", missing);
    char *dir = ts_tmpdir("slurm"), out[16384], ref[8192], got[8192], env[PATH_MAX + 64];
    char *file = sweep_file(dir, LR_SEED, "slurm = { cpus = 1; memory = \"200M\"; time = \"00:05:00\"; };");
    snprintf(cluster_dir, sizeof cluster_dir, "%s/cluster", dir);
    snprintf(env, sizeof env, "PATH=$PATH:/usr/sbin SLURM_CONF=%s/slurm.conf", cluster_dir);
    int rc = ts_sh(out, sizeof out, "PATH=$PATH:/usr/sbin bash tests/slurm/cluster.sh start %s %d 2>&1", cluster_dir,
                   (int)getpid());
    cr_assert_eq(rc, 0, "the test cluster did not start: %s", out);

    /* the serial executor's matrix is the reference */
    cr_assert_eq(ts_sh(out, sizeof out, SWEEP " 2>/dev/null", file, dir, "serial"), 0, "%s", out);
    matrix_of(dir, "serial", ref, sizeof ref);

    /* all four cells as one held array; cancel one task, release the rest */
    cr_assert_eq(ts_sh(out, sizeof out, "%s " SWEEP " --executor slurm --sbatch-args '--hold'", env, file, dir, "slurm"),
                 0, "%s", out);
    long job = submitted_job(out);
    cr_expect(strstr(out, "4 cells"), "%s", out);
    cr_assert_eq(ts_sh(out, sizeof out, "%s " SWEEP " --status", env, file, dir, "slurm"), 1, "%s", out);
    cr_expect(strstr(out, "4 pending") && strstr(out, "JobHeldUser"), "%s", out);
    /* a second submission now would hold nothing: every cell is still queued */
    cr_assert_eq(ts_sh(out, sizeof out, "%s " SWEEP " --executor slurm", env, file, dir, "slurm"), 0, "%s", out);
    cr_expect(strstr(out, "no cell to submit (4 still queued"), "%s", out);
    cr_assert_eq(ts_sh(out, sizeof out, "%s scancel %ld_2 && %s scontrol release %ld", env, job, env, job), 0, "%s", out);
    cr_expect_eq(wait_for(env, file, dir, 40, out, sizeof out), 1, "one cell unfinished:\n%s", out);
    cr_expect(strstr(out, "3 finished, 1 todo"), "%s", out);
    cr_expect(strstr(out, "todo       0.1_1 "), "%s", out);

    /* the rerun submits that cell only */
    cr_assert_eq(ts_sh(out, sizeof out, "%s " SWEEP " --executor slurm", env, file, dir, "slurm"), 0, "%s", out);
    long job2 = submitted_job(out);
    cr_expect(strstr(out, "1 cell: 0.1_1 "), "%s", out);
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/slurm/toy/slurm.json", dir);
    json_t *sj = load(path);
    json_t *subs = json_object_get(sj, "submissions");
    cr_assert_eq(json_array_size(subs), 2);
    json_t *second = json_array_get(subs, 1);
    cr_expect_eq(strtol(json_string_value(json_object_get(second, "job_id")), NULL, 10), job2);
    cr_assert_eq(json_array_size(json_object_get(second, "cells")), 1);
    cr_expect_eq(json_integer_value(json_object_get(json_array_get(json_object_get(second, "cells"), 0), "index")), 2);
    json_decref(sj);
    cr_expect_eq(wait_for(env, file, dir, 40, out, sizeof out), 0, "every cell finished:\n%s", out);
    cr_expect(strstr(out, "4 finished"), "%s", out);

    /* the records give the serial executor's matrix */
    matrix_of(dir, "slurm", got, sizeof got);
    cr_expect_str_eq(got, ref);

    /* and the daemons are gone once stopped */
    char pids[256];
    cr_assert_eq(ts_sh(pids, sizeof pids, "cat %s/munged.pid %s/slurmctld.pid %s/slurmd.pid | tr '\\n' ' '",
                       cluster_dir, cluster_dir, cluster_dir), 0);
    stop_cluster();
    long pid[3];
    cr_assert_eq(sscanf(pids, "%ld %ld %ld", &pid[0], &pid[1], &pid[2]), 3, "%s", pids);
    for (int i = 0; i < 3; i++) {
        char stat[64];
        snprintf(stat, sizeof stat, "/proc/%ld/stat", pid[i]);
        int gone = kill((pid_t)pid[i], 0) != 0 || ts_sh(out, sizeof out, "grep -q ') Z' %s", stat) == 0;
        cr_expect(gone, "daemon %ld still runs after cluster.sh stop", pid[i]);
    }
}

/* A two-rank cell through the job script on the one-node cluster, whose slurm.conf keeps
 * Slurm's default MpiDefault=none as a stock install does: its ranks start (srun
 * --mpi=pmix, or with slurm.mpi = "mpirun" mpx run's own mpirun in the batch step), rank 0
 * takes the cell's lock and writes the record, and the record says two ranks. */
static void two_rank_cell(const char *env, const char *dir, const char *mpi, const char *launch)
{
    char text[512], out[16384], path[PATH_MAX];
    snprintf(text, sizeof text, "set = (\"run.ranks=2\", \"comm.plugin=\\\"mpi\\\"\", \"data.toy.examples=256\");\n"
             "slurm = { cpus = 1; memory = \"1G\"; time = \"00:05:00\"; %s };", mpi);
    char *file = sweep_file(dir, "{ key = \"run.seed\"; values = (1); }", text);
    cr_assert_eq(ts_sh(out, sizeof out, SWEEP " --executor slurm --dry-run", file, dir, "slurm"), 0, "%s", out);
    cr_expect(strstr(out, "\n#SBATCH --ntasks=2\n") && strstr(out, launch), "no '%s' in:\n%s", launch, out);
    cr_assert_eq(ts_sh(out, sizeof out, "%s " SWEEP " --executor slurm", env, file, dir, "slurm"), 0, "%s", out);
    submitted_job(out);
    int rc = wait_for(env, file, dir, 50, out, sizeof out);
    snprintf(path, sizeof path, "%s/slurm/toy/sweep.json", dir);
    json_t *index = load(path);
    const char *cell = json_string_value(json_object_get(json_array_get(json_object_get(index, "cells"), 0), "dir"));
    cr_assert_not_null(cell, "%s", path);
    /* the cell's and Slurm's output, to say why when it did not finish */
    char why[8192];
    if (ts_sh(why, sizeof why, "cat %s/mpx.log %s/slurm/toy/slurm/*.out 2>&1 | tail -30", cell, dir) != 0)
        snprintf(why, sizeof why, "(no log in %s)", cell);
    cr_assert_eq(rc, 0, "the two-rank cell did not finish:\n%s\nits log:\n%s", out, why);
    snprintf(path, sizeof path, "%s/run.json", cell);
    json_t *r = load(path), *memory = json_object_get(r, "memory");
    json_t *eff = json_object_get(json_object_get(r, "config"), "effective");
    cr_expect_str_eq(json_string_value(json_object_get(r, "status")), "finished", "%s", why);
    cr_expect_eq(json_integer_value(json_object_get(memory, "ranks")), 2, "%s", path);
    cr_expect_eq(json_array_size(json_object_get(memory, "ranks_rss_peak_bytes")), 2, "%s", path);
    cr_expect_eq(json_integer_value(json_object_get(json_object_get(eff, "run"), "ranks")), 2, "%s", path);
    cr_expect_str_eq(json_string_value(json_object_get(json_object_get(eff, "comm"), "plugin")), "mpi", "%s", path);
    cr_expect_eq(ts_sh(out, sizeof out, "ls %s/rank-*.error 2>/dev/null", cell), 2, "a rank failed: %s", out);
    json_decref(r);
    json_decref(index);
}

Test(sweep_slurm, a_two_rank_cell_starts_its_ranks_on_a_stock_cluster, .fini = stop_cluster)
{
    char missing[64], out[4096], env[PATH_MAX + 64];
    if (!have_slurm(missing, sizeof missing))
        cr_skip_test("%s not installed (apt-get install slurm-wlm munge): the Slurm executor test is skipped", missing);
    if (ts_sh(out, sizeof out, "build/bin/mpx check configs/toy.cfg -s run.ranks=2 >/dev/null 2>&1") != 0)
        cr_skip_test("this build's mpx check refuses run.ranks=2 on the toy (no MPI comm): the two-rank Slurm "
                     "cell is not run");
    char *dir = ts_tmpdir("slurm-2ranks");
    snprintf(cluster_dir, sizeof cluster_dir, "%s/cluster", dir);
    snprintf(env, sizeof env, "PATH=$PATH:/usr/sbin SLURM_CONF=%s/slurm.conf", cluster_dir);
    int rc = ts_sh(out, sizeof out, "PATH=$PATH:/usr/sbin bash tests/slurm/cluster.sh start %s %d 2>&1", cluster_dir,
                   (int)getpid());
    cr_assert_eq(rc, 0, "the test cluster did not start: %s", out);
    /* the test's environment must not choose the MPI plugin for srun */
    cr_assert_eq(ts_sh(out, sizeof out, "grep -x MpiDefault=none %s/slurm.conf && echo \"${SLURM_MPI_TYPE-unset}\"",
                       cluster_dir), 0, "%s", out);
    cr_assert(strstr(out, "\nunset\n"), "SLURM_MPI_TYPE is set: %s", out);

    char sub[PATH_MAX];
    snprintf(sub, sizeof sub, "%s/srun", dir);
    cr_assert_eq(ts_sh(out, sizeof out, "mkdir %s", sub), 0);
    two_rank_cell(env, sub, "", "\n    exec srun --mpi=pmix -n 2 --cpus-per-task=\"$threads\" /");
    snprintf(sub, sizeof sub, "%s/mpirun", dir);
    cr_assert_eq(ts_sh(out, sizeof out, "mkdir %s", sub), 0);
    two_rank_cell(env, sub, "mpi = \"mpirun\";", "\n#SBATCH --nodes=1\n");
}
