/* Where a run came from, the session's part: the machine and its backend, the plugins
 * loaded (name, version, path) and the effective precision descriptor, for run.json. */
#include "session_provenance.h"

#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "format_table.h"
#include "../record/provenance.h"

json_t *mpx_provenance_machine(mpx_session *s)
{
    char host[256] = "unknown", cpu[256];
    gethostname(host, sizeof host - 1);
    mpx_provenance_cpu_model(cpu, sizeof cpu);
    const mpx_instance *b = &s->inst[MPX_KIND_BACKEND];
    const char *desc = b->self && b->rec->vt.backend.describe ? b->rec->vt.backend.describe(b->self) : "";
    return json_pack("{s:s, s:s, s:I, s:s}", "hostname", host, "cpu", cpu,
                     "cores", (json_int_t)sysconf(_SC_NPROCESSORS_ONLN), "backend", desc ? desc : "");
}

json_t *mpx_provenance_plugins(const mpx_session *s)
{
    json_t *o = json_object();
    for (int k = 0; k < MPX_KIND_COUNT; k++) {
        const mpx_plugin_rec *r = s->inst[k].rec;
        if (!r) continue;
        json_object_set_new(o, mpx_kind_name((mpx_kind)k),
                            json_pack("{s:s, s:s, s:s}", "name", r->desc.name, "version", r->desc.version,
                                      "path", r->path));
    }
    return o;
}

json_t *mpx_provenance_precision(const mpx_precision_desc *d, const mpx_format_table *fmts)
{
    static const char *rounding[] = { "nearest", "stochastic", "kahan" };
    json_t *islands = json_array();
    static const char *island_names[] = { "layernorm", "softmax", "loss", "residual" };
    for (int i = 0; i < 4; i++)
        if (d->islands & (1u << i)) json_array_append_new(islands, json_string(island_names[i]));
    static const char *recipes[] = { "none", "delayed", "current", "mx" };
    json_t *o = json_pack("{s:s, s:s, s:s, s:s, s:s, s:s, s:s, s:s, s:s, s:o, s:s, s:s}",
                     "weights", mpx_dtype_label(fmts, d->weights), "gemm_in", mpx_dtype_label(fmts, d->gemm_in),
                     "act", mpx_dtype_label(fmts, d->act), "grads", mpx_dtype_label(fmts, d->grads),
                     "grad_acc", mpx_dtype_label(fmts, d->grad_acc), "master", mpx_dtype_label(fmts, d->master),
                     "opt_state", mpx_dtype_label(fmts, d->opt_state), "comm", mpx_dtype_label(fmts, d->comm),
                     "eval_logits", mpx_dtype_label(fmts, d->eval_logits), "islands", islands,
                     "loss_scale", d->loss_scale ? d->loss_scale : "none",
                     "rounding", (unsigned)d->rounding < 3 ? rounding[d->rounding] : "?");
    if (o)
        json_object_set_new(o, "upstream", json_pack("{s:s, s:b, s:s}",
            "master_init", d->upstream & MPX_UPSTREAM_MASTER_FROM_WEIGHTS ? "weights" : "checkpoint",
            "optimizer_init_step", (d->upstream & MPX_UPSTREAM_OPT_INIT_STEP) != 0,
            "unscale_with", d->upstream & MPX_UPSTREAM_UNSCALE_UPDATED ? "updated" : "used"));
    json_object_set_new(o, "opt_state_sq", json_string(mpx_dtype_label(fmts, mpx_opt_state_dtype(d, 1))));
    json_object_set_new(o, "grad_gemm_in", json_string(mpx_dtype_label(fmts, mpx_grad_gemm_dtype(d))));
    json_object_set_new(o, "scaling", json_string(recipes[d->scaling & 3]));
    if (d->scaling == MPX_SCALING_DELAYED || d->scaling == MPX_SCALING_CURRENT)
        json_object_set_new(o, "margin", json_integer(d->margin));
    if (d->scaling == MPX_SCALING_DELAYED) {
        json_object_set_new(o, "amax_history_len", json_integer(d->amax_history_len));
        json_object_set_new(o, "amax_compute_algo", json_string(d->amax_algo == MPX_AMAX_MOST_RECENT ? "most_recent" : "max"));
    }
    return o;
}
