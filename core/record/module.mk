# core/record: atomic run records, notes, provenance (README.md here).
LIB_SRCS += $(wildcard core/record/*.c)
