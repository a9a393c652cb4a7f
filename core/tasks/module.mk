# core/tasks: the data tasks (SQuAD, toy) behind the engine's task interface (README.md here).
LIB_SRCS += $(wildcard core/tasks/*.c)
