/* Test-only optimizer "sgd" without a step: null_step.c under a built-in's name (see there). */
#define NULL_STEP_NAME "sgd"
#include "null_step.c"
