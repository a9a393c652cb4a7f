/* Standalone squad-eval: the same code as `mpx squad-eval`, for tests and users
 * without the mpx binary. */
#include "squad_metric.h"

int main(int argc, char **argv) { return mpx_squad_eval_main(argc, argv); }
