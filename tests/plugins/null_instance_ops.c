/* Test-only backend "nullinstance": null_ops.c whose instance hands over an op table
 * without gelu_bwd (see there). */
#define NULL_OPS_INSTANCE
#include "null_ops.c"
