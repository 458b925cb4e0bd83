# worker/: checkpoint
worker_libcairnworker_a_SOURCES += worker/checkpoint.c worker/checkpoint.h
