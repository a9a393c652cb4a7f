/* Shared by the multi-rank suites: running mpx at N ranks and reading what it left. */
#ifndef MPX_TEST_RANKS_H
#define MPX_TEST_RANKS_H

#include <jansson.h>
#include <stddef.h>

/* OpenMPI as root on a small machine with no network (the child's environment only). */
/* Each launch in its own session folder: OpenMPI 4 races on a shared one. */
#define TR_MPIRUN "OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 " \
                  "OMPI_MCA_orte_tmpdir_base=$(mktemp -d /tmp/mpx-test-mpirun-XXXXXX) mpirun --oversubscribe " \
                  "--bind-to none --mca btl self,vader --mca btl_vader_single_copy_mechanism none "   \
                  "--mca mpi_yield_when_idle 1"

/* One run's record and final fp32 weights (MPX_DUMP_FINAL_WEIGHTS). */
typedef struct tr_run {
    json_t *rec;
    float *w;
    size_t n_w;
    double losses[64];
    size_t n_losses;
} tr_run;

/* mpx run CONFIG into DIR/NAME with the extra arguments, the final weights dumped;
 * asserts it finished. */
void tr_run_mpx(tr_run *r, const char *dir, const char *name, const char *config, const char *args);
void tr_free(tr_run *r);

/* The rank count of a run (its record's memory.per_rank). */
size_t tr_world(const tr_run *r);

/* At several ranks below stage 3: metrics.replica_divergence is 0 for every rank
 * (tr_run_mpx checks every run it starts). */
void tr_expect_replicas_agree(const tr_run *r, const char *what);

/* Bitwise equality of loss curves and final weights. */
int tr_bitwise_equal(const tr_run *a, const tr_run *b);

/* Largest |a - b| over the loss curves; ||a - b|| / ||b|| over the final weights. */
double tr_loss_diff(const tr_run *a, const tr_run *b);
double tr_weight_rel_diff(const tr_run *a, const tr_run *b);

/* A SQuAD-format file with the first article of `src` (test data, never committed). */
void tr_first_article(const char *src, const char *dst);

/* The tiny BERT on the first SQuAD article: writes its train and dev files into a fresh
 * folder (returned, for rm -rf) and puts into args the -s that point at them, then
 * `extra`. */
char *tr_tiny_squad_args(char *args, size_t len, const char *extra);

#endif
