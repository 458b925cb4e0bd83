# worker/: checkpoint
worker_libcairnworker_a_SOURCES += worker/checkpoint.c worker/checkpoint.h

# The worker's side of checkpoints (restore, periodic and requested captures).
worker_libcairnworker_a_SOURCES += worker/ckpt_job.c worker/ckpt_job.h
