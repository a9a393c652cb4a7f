/* Opens the task data.task names. */
#include "tasks.h"

#include <stdio.h>
#include <string.h>

#include "../config/config.h"

int mpx_task_open(mpx_task *t, mpx_session *s, int need_train, char *err, size_t errlen)
{
    memset(t, 0, sizeof *t);
    const char *task = mpx_config_selected(s->cfg, "data");
    if (task && strcmp(task, "toy") == 0) return mpx_task_toy_open(t, s, err, errlen);
    if (task && strcmp(task, "squad") == 0) return mpx_task_squad_open(t, s, need_train, err, errlen);
    snprintf(err, errlen, "data.task \"%s\": unknown task (toy, squad)", task ? task : "?");
    return -1;
}
