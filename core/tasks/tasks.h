/* core/tasks: the data tasks behind the engine's task interface (engine/task.h). The
 * command line opens the task a configuration names; the engine sees only mpx_task. */
#ifndef MPX_TASKS_H
#define MPX_TASKS_H

#include "../engine/task.h"

/* The task named by data.task; need_train = 0 skips the training data (mpx eval). */
int mpx_task_open(mpx_task *t, mpx_session *s, int need_train, char *err, size_t errlen);

int mpx_task_toy_open(mpx_task *t, mpx_session *s, char *err, size_t errlen);
int mpx_task_squad_open(mpx_task *t, mpx_session *s, int need_train, char *err, size_t errlen);

#endif
