/* mpx sweep --executor slurm: the sweep's unfinished cells as one Slurm job array. The
 * array index of a task is the cell's index in the sweep (sweep.json lists them), each
 * task runs the same `mpx run ... --out CELL` the serial executor runs (a cell with
 * run.ranks > 1 through `srun --mpi=pmix -n RANKS`, below), and writes the same record;
 * the cell's output goes to CELL/mpx.log. Each submission is appended to
 * <sweep>/slurm.json, which is how `--status` and the next submission find the cells'
 * array tasks (sweep_slurm_query.c).
 *
 * Resources come from the sweep file's `slurm` group:
 *   slurm = { cpus = 4; memory = "8G"; time = "04:00:00"; gpus = 0; partition = ""; mpi = "pmix"; };
 *
 * How a multi-rank cell starts its ranks (slurm.mpi). srun starts them, each an `mpx run`
 * that joins the launch, and OpenMPI's MPI_Init in each needs srun's PMI server: Slurm's
 * MpiDefault is "none" unless the site sets it (Debian's slurm-wlm ships no slurm.conf;
 * Slurm's own default is none), and without it MPI_Init aborts with "OMPI was not built
 * with SLURM's PMI support". So the script names one: --mpi=pmix, which a stock Slurm
 * (Debian's slurm-wlm-basic-plugins: mpi_pmix.so) and a stock OpenMPI 4 (PMIx built in
 * or Debian's libpmix2) both have; pmi2 does not work with Debian's OpenMPI (built
 * without Slurm's PMI-2 library). A site with another plugin names it (`srun --mpi=list`);
 * one without PMIx at all sets slurm.mpi = "mpirun": the task runs `mpx run` itself,
 * which starts its ranks with mpirun in the batch step, as on a workstation, and the job
 * asks for one node, since that launch is for one machine (shared memory only,
 * docs/RANKS.md). srun is the default because it keeps Slurm's own placement, limits and
 * accounting of each rank, on any number of nodes. */
#include "sweep_slurm.h"
#include "../config/config.h"

#include <errno.h>
#include <libconfig.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../record/fsutil.h"
#include "../record/record.h"

#define THREADS_SENTINEL "backend.cpu.threads=@MPX_THREADS@"

static int fail(char *err, size_t errlen, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
    return -1;
}

/* Characters allowed in a value that goes onto an #SBATCH line. */
static int plain_value(const char *s, const char *extra)
{
    for (; *s; s++)
        if (!((*s >= '0' && *s <= '9') || (*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') || strchr(extra, *s)))
            return 0;
    return 1;
}

static int load_string(const config_setting_t *m, const char *key, char *dst, size_t cap, const char *allowed,
                       const char *what, const char *file, char *err, size_t errlen)
{
    int line = config_setting_source_line(m);
    if (config_setting_type(m) != CONFIG_TYPE_STRING)
        return fail(err, errlen, "%s:%d: slurm.%s must be a string (%s)", file, line, key, what);
    const char *v = config_setting_get_string(m);
    if (strlen(v) >= cap || !plain_value(v, allowed) || (!v[0] && strcmp(key, "partition")))
        return fail(err, errlen, "%s:%d: slurm.%s = \"%s\": expected %s", file, line, key, v, what);
    snprintf(dst, cap, "%s", v);
    return 0;
}

static int load_int(const config_setting_t *m, const char *key, int *dst, int lo, int hi, const char *file,
                    char *err, size_t errlen)
{
    int line = config_setting_source_line(m);
    if (config_setting_type(m) != CONFIG_TYPE_INT && config_setting_type(m) != CONFIG_TYPE_INT64)
        return fail(err, errlen, "%s:%d: slurm.%s must be an integer", file, line, key);
    long long v = config_setting_get_int64(m);
    if (v < lo || v > hi)
        return fail(err, errlen, "%s:%d: slurm.%s = %lld: must be in [%d, %d]", file, line, key, v, lo, hi);
    *dst = (int)v;
    return 0;
}

int mpx_sweep_load_slurm(mpx_slurm_resources *r, const config_setting_t *g, const char *file,
                         char *err, size_t errlen)
{
    memset(r, 0, sizeof *r);
    r->cpus = 4;
    snprintf(r->memory, sizeof r->memory, "8G");
    snprintf(r->time, sizeof r->time, "04:00:00");
    snprintf(r->mpi, sizeof r->mpi, "pmix");
    if (!g) return 0;
    if (!config_setting_is_group(g))
        return fail(err, errlen, "%s:%d: slurm must be a group { cpus = ...; memory = \"...\"; ... }", file,
                    config_setting_source_line(g));
    for (int i = 0; i < config_setting_length(g); i++) {
        const config_setting_t *m = config_setting_get_elem(g, (unsigned)i);
        const char *k = config_setting_name(m);
        int rc;
        if (!strcmp(k, "cpus")) rc = load_int(m, k, &r->cpus, 1, 4096, file, err, errlen);
        else if (!strcmp(k, "gpus")) rc = load_int(m, k, &r->gpus, 0, 64, file, err, errlen);
        else if (!strcmp(k, "memory"))
            rc = load_string(m, k, r->memory, sizeof r->memory, "", "a size such as \"8G\" or \"500M\"", file, err, errlen);
        else if (!strcmp(k, "time"))
            rc = load_string(m, k, r->time, sizeof r->time, ":-", "a Slurm time such as \"04:00:00\" or \"1-00:00:00\"",
                             file, err, errlen);
        else if (!strcmp(k, "partition"))
            rc = load_string(m, k, r->partition, sizeof r->partition, "_-.,", "a partition name", file, err, errlen);
        else if (!strcmp(k, "mpi"))
            rc = load_string(m, k, r->mpi, sizeof r->mpi, "_", "an srun MPI plugin such as \"pmix\" or \"pmix_v4\" "
                             "(srun --mpi=list), or \"mpirun\"", file, err, errlen);
        else
            rc = fail(err, errlen, "%s:%d: unknown key '%s' in slurm (allowed: cpus, memory, time, gpus, partition, mpi)",
                      file, config_setting_source_line(m), k);
        if (rc) return rc;
    }
    return 0;
}

/* A word for the shell, single-quoted unless it is plain. */
static void put_word(FILE *f, const char *s)
{
    if (s[0] && plain_value(s, "/._-=+,:@")) {
        fputs(s, f);
        return;
    }
    fputc('\'', f);
    for (; *s; s++) {
        if (*s == '\'') fputs("'\\''", f);
        else fputc(*s, f);
    }
    fputc('\'', f);
}

/* The cell's run.ranks (issue 13's key); 1 when the configuration has none. */
static long cell_ranks(const mpx_sweep_cell *c)
{
    json_t *r = json_object_get(json_object_get(c->effective, "run"), "ranks");
    return json_is_integer(r) && json_integer_value(r) > 1 ? (long)json_integer_value(r) : 1;
}

/* "0,2-5,9": the array indices of the cells to submit. */
static void array_spec(const int *todo, size_t n, char *buf, size_t len)
{
    size_t used = 0;
    buf[0] = 0;
    for (size_t i = 0; i < n; i++) {
        if (!todo[i]) continue;
        size_t j = i;
        while (j + 1 < n && todo[j + 1]) j++;
        int w = j > i ? snprintf(buf + used, len - used, "%s%zu-%zu", used ? "," : "", i, j)
                      : snprintf(buf + used, len - used, "%s%zu", used ? "," : "", i);
        if (w < 0 || (size_t)w >= len - used) return;
        used += (size_t)w;
        i = j;
    }
}

static void put_task(FILE *f, const mpx_sweep *sw, const mpx_sweep_cell *c, const char *mpx,
                     const char *const *dirs, size_t n_dirs)
{
    char probe[64];
    const char *extra[1] = { THREADS_SENTINEL };
    size_t n_extra = (size_t)mpx_sweep_threads_override(c, 1, probe, sizeof probe);
    char **argv = mpx_sweep_child_argv(sw, c, extra, n_extra, dirs, n_dirs);
    long ranks = cell_ranks(c);
    fprintf(f, "%zu)  # %s\n    cell=", c->index, c->name);
    put_word(f, c->dir);
    fputs("\n    mkdir -p \"$cell\" || exit 1\n    exec ", f);
    /* with "mpirun", mpx run starts the ranks itself, as it does outside Slurm */
    if (ranks > 1 && strcmp(sw->slurm.mpi, "mpirun"))
        fprintf(f, "srun --mpi=%s -n %ld --cpus-per-task=\"$threads\" ", sw->slurm.mpi, ranks);
    put_word(f, mpx);
    for (size_t k = 1; argv && argv[k]; k++) {
        fputc(' ', f);
        if (!strcmp(argv[k], THREADS_SENTINEL)) fputs("\"backend.cpu.threads=$threads\"", f);
        else if (argv[k] == c->dir) fputs("\"$cell\"", f);
        else put_word(f, argv[k]);
    }
    fputs(" >\"$cell/mpx.log\" 2>&1 ;;\n", f);
    free(argv);
}

int mpx_slurm_script(FILE *f, const mpx_sweep *sw, const mpx_sweep_cell *cells, const int *todo,
                     const char *const *dirs, size_t n_dirs, const char *sweep_dir, char *err, size_t errlen)
{
    char mpx[PATH_MAX], cwd[PATH_MAX], spec[8192];
    if (!realpath("/proc/self/exe", mpx)) return fail(err, errlen, "cannot resolve /proc/self/exe: %s", strerror(errno));
    if (!getcwd(cwd, sizeof cwd)) return fail(err, errlen, "getcwd: %s", strerror(errno));
    size_t m = 0;
    long ranks = 1;
    for (size_t i = 0; i < sw->n_cells; i++) {
        if (!todo[i]) continue;
        m++;
        if (cell_ranks(&cells[i]) > ranks) ranks = cell_ranks(&cells[i]);
    }
    array_spec(todo, sw->n_cells, spec, sizeof spec);
    if (!m) return fail(err, errlen, "no cell to submit");
    if (strlen(spec) + 1 >= sizeof spec) return fail(err, errlen, "too many cells for one --array line");
    const mpx_slurm_resources *r = &sw->slurm;
    fprintf(f, "#!/bin/bash\n# mpx sweep %s through Slurm: %zu of its %zu cells; the array index is the cell's\n"
               "# index in %s/sweep.json. Written by mpx sweep --executor slurm.\n",
            sw->name, m, sw->n_cells, sweep_dir);
    fprintf(f, "#SBATCH --job-name=mpx-%s\n#SBATCH --array=%s\n#SBATCH --ntasks=%ld\n#SBATCH --cpus-per-task=%d\n"
               "#SBATCH --mem=%s\n#SBATCH --time=%s\n",
            sw->name, spec, ranks, r->cpus, r->memory, r->time);
    if (r->gpus) fprintf(f, "#SBATCH --gpus-per-task=%d\n", r->gpus);
    if (r->partition[0]) fprintf(f, "#SBATCH --partition=%s\n", r->partition);
    if (ranks > 1 && !strcmp(r->mpi, "mpirun")) fputs("#SBATCH --nodes=1\n", f);
    char out[2 * PATH_MAX + 32];
    snprintf(out, sizeof out, "%s%s%s/slurm", sweep_dir[0] == '/' ? "" : cwd, sweep_dir[0] == '/' ? "" : "/", sweep_dir);
    if (!plain_value(out, "/._-+,:@=") || !plain_value(cwd, "/._-+,:@="))
        return fail(err, errlen, "%s: Slurm's #SBATCH lines cannot hold this folder name (use letters, digits "
                    "and /._-+,:@= only)", strpbrk(cwd, " \t'\"\\") ? cwd : out);
    fprintf(f, "#SBATCH --output=%s/%%A_%%a.out\n#SBATCH --chdir=%s\n", out, cwd);
    fputs("\n# the cpu backend uses the cores Slurm gave the task\n"
          "threads=${SLURM_CPUS_PER_TASK:-1}\n"
          "case \"${SLURM_ARRAY_TASK_ID:?not run as a Slurm array task}\" in\n", f);
    for (size_t i = 0; i < sw->n_cells; i++)
        if (todo[i]) put_task(f, sw, &cells[i], mpx, dirs, n_dirs);
    fputs("*)  echo \"mpx: array task $SLURM_ARRAY_TASK_ID is not a cell of this submission\" >&2; exit 2 ;;\nesac\n", f);
    return ferror(f) ? fail(err, errlen, "cannot write the job script") : 0;
}

/* Append one submission to <sweep_dir>/slurm.json. */
static int record_submission(const mpx_sweep *sw, const mpx_sweep_cell *cells, const int *todo, const char *sweep_dir,
                             const char *job_id, const char *script)
{
    char path[PATH_MAX + 16], when[32];
    snprintf(path, sizeof path, "%s/slurm.json", sweep_dir);
    json_t *j = access(path, F_OK) == 0 ? json_load_file(path, 0, NULL) : NULL;
    if (!j) j = json_pack("{s:i, s:s, s:[]}", "schema_version", 1, "sweep", sw->name, "submissions");
    json_t *subs = json_object_get(j, "submissions");
    if (!json_is_array(subs)) json_object_set_new(j, "submissions", subs = json_array());
    json_t *list = json_array();
    for (size_t i = 0; i < sw->n_cells; i++)
        if (todo[i]) json_array_append_new(list, json_pack("{s:I, s:s, s:s}", "index", (json_int_t)i,
                                                           "name", cells[i].name, "dir", cells[i].dir));
    json_array_append_new(subs, json_pack("{s:s, s:s, s:s, s:o}", "job_id", job_id, "submitted",
                                          mpx_now_iso(when, sizeof when), "script", script, "cells", list));
    int rc = mpx_write_json_atomic(path, j);
    json_decref(j);
    return rc;
}

/* Run sbatch --parsable on the script (no shell: args is split at blanks, each word one
 * argument, quotes not interpreted); its job id into id. */
static int sbatch(const char *script, const char *args, char *id, size_t idlen, char *err, size_t errlen)
{
    enum { MAX_ARGS = 64 };
    char words[4096], out[4096];
    char *argv[MAX_ARGS + 4];
    int n = 0;
    argv[n++] = "sbatch";
    argv[n++] = "--parsable";
    snprintf(words, sizeof words, "%s", args ? args : "");
    if (args && strlen(args) >= sizeof words) return fail(err, errlen, "--sbatch-args: longer than %zu bytes", sizeof words - 1);
    for (char *w = strtok(words, " \t\n"); w; w = strtok(NULL, " \t\n")) {
        if (n >= MAX_ARGS + 2) return fail(err, errlen, "--sbatch-args: more than %d arguments", MAX_ARGS);
        argv[n++] = w;
    }
    argv[n++] = (char *)script;
    argv[n] = NULL;
    int st = 0;
    if (mpx_run_capture(argv, 1, out, sizeof out, &st) != 0) return fail(err, errlen, "cannot run sbatch: %s", strerror(errno));
    size_t used = strlen(out);
    while (used && (out[used - 1] == '\n' || out[used - 1] == ' ')) out[--used] = 0;
    /* the job id is the last line: "12345" or "12345;cluster" */
    char *last = strrchr(out, '\n');
    last = last ? last + 1 : out;
    if (st != 0 || !last[0] || last[0] < '0' || last[0] > '9')
        return fail(err, errlen, "sbatch %s failed (exit %d): %s", script, WIFEXITED(st) ? WEXITSTATUS(st) : -1,
                    out[0] ? out : "no output");
    snprintf(id, idlen, "%.*s", (int)strcspn(last, ";"), last);
    return 0;
}

int mpx_slurm_submit(const mpx_sweep *sw, const mpx_sweep_cell *cells, const int *todo, const char *const *dirs,
                     size_t n_dirs, const char *sbatch_args, const char *sweep_dir, char *job_id, size_t idlen,
                     char *err, size_t errlen)
{
    char folder[PATH_MAX + 16], script[PATH_MAX + 96], when[32];
    snprintf(folder, sizeof folder, "%s/slurm", sweep_dir);
    if (mpx_mkdirs(folder) != 0) return fail(err, errlen, "cannot create %s: %s", folder, strerror(errno));
    mpx_now_iso(when, sizeof when);
    for (char *p = when; *p; p++) if (*p == ':') *p = '-';
    snprintf(script, sizeof script, "%s/submit-%s-%ld.sh", folder, when, (long)getpid());
    FILE *f = mpx_fopen_nofollow(script, 0);
    if (!f) return fail(err, errlen, "cannot write %s: %s", script, strerror(errno));
    int rc = mpx_slurm_script(f, sw, cells, todo, dirs, n_dirs, sweep_dir, err, errlen);
    if (fclose(f) != 0 && !rc) rc = fail(err, errlen, "cannot write %s", script);
    if (rc) return rc;
    if (sbatch(script, sbatch_args, job_id, idlen, err, errlen)) return -1;
    if (record_submission(sw, cells, todo, sweep_dir, job_id, script))
        return fail(err, errlen, "job %s submitted, but %s/slurm.json could not be written: cancel it "
                    "(scancel %s) and submit again", job_id, sweep_dir, job_id);
    return 0;
}
