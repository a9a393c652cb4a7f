/* mpx plugins --compat: the compatibility of every installed plugin pair, from the
 * plugins' own declarations — each pair is configured and put through the same check
 * `mpx check` and `mpx sweep` use (incompatibility tables and check callbacks), with
 * every other kind at its default; a pair that fails so is tried again with each other
 * plugin of one third kind (comm/nccl with backend/cuda), and shows as ok with a note
 * naming it when one passes. Nothing here is written by hand. */
#include "compat.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Whether KIND_A/a with KIND_B/b (and KIND_C/c when c is not NULL) passes; the reasons in
 * why otherwise. */
static int pair_ok(mpx_session *s, int ka, const char *a, int kb, const char *b, int kc, const char *c, char *why,
                   size_t len)
{
    char o1[256], o2[256], o3[256];
    snprintf(o1, sizeof o1, "%s.plugin=\"%s\"", mpx_kind_name((mpx_kind)ka), a);
    snprintf(o2, sizeof o2, "%s.plugin=\"%s\"", mpx_kind_name((mpx_kind)kb), b);
    if (c) snprintf(o3, sizeof o3, "%s.plugin=\"%s\"", mpx_kind_name((mpx_kind)kc), c);
    const char *ov[3] = { o1, o2, o3 };
    why[0] = 0;
    int ok = mpx_session_configure(s, "/dev/null", ov, c ? 3 : 2, why, len) == 0 &&
             mpx_session_check_compat(s, why, len) == 0;
    mpx_session_unconfigure(s);
    for (char *p = why; *p; p++) if (*p == '\n' || *p == '|') *p = *p == '|' ? '/' : ' ';
    return ok;
}

int mpx_compat_print(mpx_session *s, FILE *f)
{
    int n_bad = 0;
    fputs("Compatibility of every installed plugin pair (mpx plugins --compat): each pair selected\n"
          "together, every other kind at its default, through the checks of `mpx check`; \"ok [n]\":\n"
          "it passes once one other kind takes another plugin (note n names it).\n", f);
    for (int ka = 0; ka < MPX_KIND_COUNT; ka++) {
        for (int kb = ka + 1; kb < MPX_KIND_COUNT; kb++) {
            size_t na = mpx_registry_count(&s->reg, (mpx_kind)ka), nb = mpx_registry_count(&s->reg, (mpx_kind)kb);
            if (!na || !nb) continue;
            fprintf(f, "\n| %s \\ %s |", mpx_kind_name((mpx_kind)ka), mpx_kind_name((mpx_kind)kb));
            for (size_t j = 0; j < nb; j++) fprintf(f, " %s |", mpx_registry_get(&s->reg, (mpx_kind)kb, j)->desc.name);
            fputs("\n|---|", f);
            for (size_t j = 0; j < nb; j++) fputs("---|", f);
            fputc('\n', f);
            char notes[16384] = "";
            int n_notes = 0;
            for (size_t i = 0; i < na; i++) {
                const char *a = mpx_registry_get(&s->reg, (mpx_kind)ka, i)->desc.name;
                fprintf(f, "| %s |", a);
                for (size_t j = 0; j < nb; j++) {
                    const char *b = mpx_registry_get(&s->reg, (mpx_kind)kb, j)->desc.name;
                    char why[2048], again[2048];
                    if (pair_ok(s, ka, a, kb, b, -1, NULL, why, sizeof why)) {
                        fputs(" ok |", f);
                        continue;
                    }
                    /* one other plugin of a third kind may be all the pair needs */
                    const char *with = NULL;
                    int with_kind = 0;
                    for (int kc = 0; kc < MPX_KIND_COUNT && !with; kc++) {
                        if (kc == ka || kc == kb) continue;
                        for (size_t c = 0; c < mpx_registry_count(&s->reg, (mpx_kind)kc) && !with; c++) {
                            const char *cn = mpx_registry_get(&s->reg, (mpx_kind)kc, c)->desc.name;
                            if (pair_ok(s, ka, a, kb, b, kc, cn, again, sizeof again)) {
                                with = cn;
                                with_kind = kc;
                            }
                        }
                    }
                    if (with) {
                        fprintf(f, " ok [%d] |", ++n_notes);
                        size_t used = strlen(notes);
                        snprintf(notes + used, sizeof notes - used, "[%d] %s/%s + %s/%s: ok with %s/%s (with the "
                                 "default: %s)\n", n_notes, mpx_kind_name((mpx_kind)ka), a,
                                 mpx_kind_name((mpx_kind)kb), b, mpx_kind_name((mpx_kind)with_kind), with, why);
                        continue;
                    }
                    n_bad++;
                    fprintf(f, " no [%d] |", ++n_notes);
                    size_t used = strlen(notes);
                    snprintf(notes + used, sizeof notes - used, "[%d] %s/%s + %s/%s: %s\n", n_notes,
                             mpx_kind_name((mpx_kind)ka), a, mpx_kind_name((mpx_kind)kb), b, why);
                }
                fputc('\n', f);
            }
            if (n_notes) fprintf(f, "\n%s", notes);
        }
    }
    fprintf(f, "\n%d incompatible pair%s.\n", n_bad, n_bad == 1 ? "" : "s");
    return ferror(f) ? -1 : 0;
}
