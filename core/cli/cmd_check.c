/* mpx check CONFIG [-s KEY=VALUE]... */
#include <stdio.h>
#include <unistd.h>

#include "check_report.h"
#include "../config/config.h"
#include "cli.h"
#include "../engine/session.h"

static const char check_usage[] =
    "usage: mpx check CONFIG [-s KEY=VALUE]... [--ranks N] [--plugin-dir DIR]...\n"
    "  validates CONFIG (unknown keys, types, ranges, plugins, incompatible combinations)\n"
    "  without running it, and prints the effective configuration with defaults filled in,\n"
    "  the data's size and the lr schedule over the steps it yields (first, peak and last\n"
    "  lr, any negative one), and a warning for every learning rate that never acts.\n"
    "  --ranks N is -s run.ranks=N, as for mpx run. It writes nothing: --out and --resume\n"
    "  are refused.\n"
    "  Exit 0 valid, 1 invalid, 2 on a wrong command line.\n";

/* What mpx run would refuse once the plugins exist: the model's shapes against its
 * checkpoint, sizes that overflow, a memory plan over the limit. Nothing is allocated.
 * Without the checkpoint folder (a config written for another machine) this is skipped,
 * with a note. */
static int check_model(mpx_session *s, char *err, size_t errlen)
{
    const char *ckpt = "";
    mpx_config_get_string(s->cfg, "model.checkpoint", &ckpt);
    if (ckpt[0] && access(ckpt, F_OK) != 0) {
        fprintf(stderr, "mpx check: note: model.checkpoint %s not found here: the model's shapes and the memory "
                "plan are not checked\n", ckpt);
        return 0;
    }
    return mpx_session_start(s, err, errlen) || mpx_session_plan(s, err, errlen) ? -1 : 0;
}

int mpx_cmd_check(int argc, char **argv)
{
    mpx_cli c;
    int rc = mpx_cli_parse(&c, argc, argv, check_usage);
    if (rc) return rc == 1 ? 0 : rc;
    if (c.out_dir || c.resume_dir) {   /* before: accepted and ignored */
        fprintf(stderr, "mpx check: %s: check writes nothing and resumes nothing (mpx run takes it)\n",
                c.out_dir ? "--out" : "--resume");
        return 2;
    }
    if (c.n_positional != 1) {
        fputs(check_usage, stderr);
        return 2;
    }
    mpx_session s;
    char err[8192];
    if (mpx_session_open(&s, c.plugin_dirs, c.n_plugin_dirs)) {
        fprintf(stderr, "mpx: cannot scan plugin folders\n");
        return 1;
    }
    rc = mpx_session_configure(&s, c.positional[0], c.overrides, c.n_overrides, err, sizeof err);
    if (!rc) rc = mpx_session_check_compat(&s, err, sizeof err);
    if (!rc) rc = mpx_session_precision(&s, err, sizeof err);
    if (rc) {
        fprintf(stderr, "mpx check: %s\n", err);
        mpx_session_close(&s);
        return 1;
    }
    if (!rc) rc = check_model(&s, err, sizeof err);
    if (rc) {
        fprintf(stderr, "mpx check: %s\n", err);
        mpx_session_close(&s);
        return 1;
    }
    mpx_config_write(s.cfg, stdout);
    rc = mpx_check_report(&s, stdout, stderr);
    mpx_session_close(&s);
    if (rc == 0) fprintf(stderr, "mpx check: %s is valid\n", c.positional[0]);
    return rc ? 1 : 0;
}
