/* The resume validator (mpx_train_state_precheck: what `mpx run --resume` checks before it
 * touches the run folder) on a hostile checkpoint. The input is a state.json, optionally
 * followed by "\n--state.bin--\n" and the bytes of state.bin; the checkpoint's other
 * files (metrics.csv, config.cfg, diagnostics.csv) and the folder's run.json are the seed
 * run's, fixed. When the input's first byte is odd and it parses, the harness recomputes
 * the checksums it names (state.bin's and state.json's own, as a forger would) so that
 * the fuzzer also reaches the checks behind them: the fields, the step, the policy, the
 * plugins, the buffer table, the file list and the data files. The session is the seed
 * run's configuration (configs/toy.cfg with the overrides below), configured once. */
#include <jansson.h>
#include <string.h>

#include "../../core/engine/session.h"
#include "../../core/engine/train_state.h"
#include "../../datasets/sha256.h"
#include "fuzz_input.h"

static const char *const overrides[] = {
    "train.max_steps=4", "train.checkpoint_every=2", "data.toy.vocab=4", "data.toy.seq_len=2", "data.toy.classes=2",
    "data.toy.examples=64", "model.toy.dim=2", "model.toy.hidden=2", "train.log_every=1",
};

/* tests/fuzz/corpus/train_state/seed-files: the seed run's fixed files, each as
 * "NAME\n<decimal length>\n<bytes>", written into the checkpoint folder (and its
 * parent, the run folder, for run.json) once. */
static mpx_session session;
static char folder[200], from[260];

static void setup(void)
{
    snprintf(folder, sizeof folder, "%s/run", fuzz_dir());
    snprintf(from, sizeof from, "%s/train_state", folder);
    if (mkdir_p(folder) || mkdir_p(from)) abort();
    FILE *f = fopen("tests/fuzz/seed-files/train_state.txt", "rb");
    if (!f) abort();
    char name[64];
    long n;
    while (fscanf(f, "%63s %ld", name, &n) == 2 && n >= 0 && n < (1 << 20)) {
        fgetc(f);   /* the newline after the length */
        char *b = malloc((size_t)n + 1), path[400];
        if (!b || fread(b, 1, (size_t)n, f) != (size_t)n) abort();
        snprintf(path, sizeof path, "%s/%s", strcmp(name, "run.json") ? from : folder, name);
        FILE *o = fopen(path, "wb");
        if (!o || fwrite(b, 1, (size_t)n, o) != (size_t)n || fclose(o) != 0) abort();
        free(b);
    }
    fclose(f);
    char err[8192];
    if (mpx_session_open(&session, NULL, 0) ||
        mpx_session_configure(&session, "configs/toy.cfg", overrides, sizeof overrides / sizeof *overrides, err,
                              sizeof err) ||
        mpx_session_precision(&session, err, sizeof err)) {
        fprintf(stderr, "fuzz_train_state: %s\n", err);
        abort();
    }
}

static void write_file(const char *name, const void *p, size_t n)
{
    char path[400];
    snprintf(path, sizeof path, "%s/%s", from, name);
    FILE *o = fopen(path, "wb");
    if (!o || (n && fwrite(p, 1, n, o) != n) || fclose(o) != 0) abort();
}

static void hex_of(const void *p, size_t n, char hex[65])
{
    uint8_t d[32];
    mpx_sha256(p, n, d);
    mpx_sha256_hex(d, 32, hex);
}

/* The forger's pass: state.bin's sha256 into files, then state.json's own. */
static void resum(const char *json, size_t n, const uint8_t *bin, size_t bin_n)
{
    json_t *st = json_loadb(json, n, 0, NULL);
    if (!json_is_object(st)) { json_decref(st); return; }
    char hex[65];
    json_t *files = json_object_get(st, "files");
    if (json_is_object(files)) {
        hex_of(bin, bin_n, hex);
        json_object_set_new(files, "state.bin", json_string(hex));
    }
    json_object_del(st, "state_sha256");
    char *text = json_dumps(st, JSON_COMPACT | JSON_SORT_KEYS | JSON_ENSURE_ASCII);
    if (text) {
        hex_of(text, strlen(text), hex);
        json_object_set_new(st, "state_sha256", json_string(hex));
        free(text);
        text = json_dumps(st, JSON_COMPACT | JSON_SORT_KEYS);
        if (text) write_file("state.json", text, strlen(text));
        free(text);
    }
    json_decref(st);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static int ready;
    if (!ready) { setup(); ready = 1; }
    static const char sep[] = "\n--state.bin--\n";
    const uint8_t *bin = NULL;
    size_t json_n = size, bin_n = 0;
    for (size_t i = 0; i + sizeof sep - 1 <= size; i++)
        if (!memcmp(data + i, sep, sizeof sep - 1)) {
            json_n = i;
            bin = data + i + sizeof sep - 1;
            bin_n = size - json_n - (sizeof sep - 1);
            break;
        }
    write_file("state.json", data, json_n);
    write_file("state.bin", bin, bin_n);
    if (size && (data[0] & 1)) resum((const char *)data, json_n, bin, bin_n);
    char err[8192];
    int rc = mpx_train_state_precheck(from, folder, &session, err, sizeof err);
    if (getenv("FUZZ_SHOW")) fprintf(stderr, "precheck: %s\n", rc ? err : "accepted");   /* to see a seed's verdict */
    return 0;
}
