/* Test-only optimizer "nullstep": its vtable leaves step NULL (a required ABI 1.0 entry),
 * so the loader must refuse it and name the entry, never call it. Built again by
 * null_sgd.c under the name of the built-in "sgd" (NULL_STEP_NAME), which a run must
 * then use with a note that says why. */
#ifndef NULL_STEP_NAME
#define NULL_STEP_NAME "nullstep"
#endif
#include "mpx/mpx.h"

static int nullstep_create(mpx_env *env, void **self) { (void)env; *self = NULL; return MPX_OK; }
static void nullstep_destroy(void *self) { (void)self; }
static int nullstep_n_state(void *self) { (void)self; return 0; }
static const char *nullstep_state_name(void *self, int i) { (void)self; (void)i; return NULL; }

static const mpx_optimizer_vtable nullstep_vtable = {
    .size = sizeof(mpx_optimizer_vtable),
    .create = nullstep_create,
    .destroy = nullstep_destroy,
    .n_state = nullstep_n_state,
    .state_name = nullstep_state_name,
    .step = NULL,
};

static const mpx_plugin_desc nullstep_desc = {
    MPX_DESC_HEADER,
    .kind = MPX_KIND_OPTIMIZER,
    .name = NULL_STEP_NAME,
    .version = "1.0.0",
    .summary = "test only: an optimizer without a step",
    .vtable = &nullstep_vtable,
};

MPX_PLUGIN_ENTRY { (void)host; return &nullstep_desc; }
