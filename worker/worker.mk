# worker/: cairn-worker, and libcairnworker.a (executor, sandbox,
# checkpoints) which the cairn CLI links too for `cairn sandbox`.
noinst_LIBRARIES += worker/libcairnworker.a
worker_libcairnworker_a_SOURCES =
include worker/sandbox.mk
include worker/checkpoint.mk
WORKER_LIBS = worker/libcairnworker.a $(SECCOMP_LIBS) $(LZ4_LIBS)
