# worker/: cairn-worker, and libcairnworker.a (executor, sandbox,
# checkpoints) which the cairn CLI links too for `cairn sandbox`.
noinst_LIBRARIES += worker/libcairnworker.a
worker_libcairnworker_a_SOURCES = \
	worker/executor.c worker/executor.h \
	worker/collect.c worker/collect.h
include worker/sandbox.mk
include worker/checkpoint.mk
WORKER_LIBS = worker/libcairnworker.a $(SECCOMP_LIBS) $(LZ4_LIBS)

bin_PROGRAMS += worker/cairn-worker
worker_cairn_worker_SOURCES = worker/main.c worker/lease.c worker/lease.h
worker_cairn_worker_LDADD = $(WORKER_LIBS) $(CAIRN_LIBS)
