/* ckpt_job: the checkpoints of one attempt of a step, on the worker's
 * loop. Before the step starts it fetches the step's checkpoint chain and
 * restores it into a fresh workspace; while the step runs it takes a
 * checkpoint every spec.checkpoint.every_ms and whenever the step writes
 * "checkpoint" to its control fifo; after a failed attempt it takes a last
 * one. Captures and restores run on a thread of their own, so the loop
 * (heartbeats) never waits on them; commits are fenced store calls.
 * The control protocol is described in docs/checkpoints.md. */
#ifndef CAIRN_CKPT_JOB_H
#define CAIRN_CKPT_JOB_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>
#include <jansson.h>

struct event_base;
struct pgq;
struct ckpt_job;

/* The step's checkpoint period in ms, or 0 when spec.checkpoint is null. */
int64_t ckpt_job_every_ms(const json_t *spec);

/* How the preparation ended. */
enum ckpt_ready {
	CKPT_READY = 0,		/* workspace ready (restored or left as it was) */
	CKPT_FAILED = -1,	/* the chain could not be read: fail the attempt, retryable */
	CKPT_FENCED = 1,	/* a newer attempt owns the step: drop it */
};
typedef void (*ckpt_ready_cb)(void *arg, enum ckpt_ready how, const char *message);
typedef void (*ckpt_done_cb)(void *arg);

/* Returns new. db is borrowed and must outlive the job. workspace and ctl
 * are the host paths of the step's workspace and control fifo; the parent
 * folders are created as needed. Caller frees with ckpt_job_free. */
struct ckpt_job *ckpt_job_new(struct event_base *base, struct pgq *db, const char *worker,
			      const char *run_id, const char *step_id, const char *epoch,
			      int attempt, int64_t every_ms, const char *workspace,
			      const char *ctl);

/* Fetches the chain; when there is one, restores the newest checkpoint
 * that verifies into an emptied workspace (saying so in the step's system
 * log when it had to fall back) and sets the resumed-from sequence. Also
 * creates the control fifo. Calls ready once, from the loop. */
void ckpt_job_prepare(struct ckpt_job *cj, ckpt_ready_cb ready, void *arg);

/* Sequence number of the checkpoint the workspace was restored from, or 0. */
int64_t ckpt_job_resumed_from(const struct ckpt_job *cj);

/* The step runs as pid (its sandbox's init; every process of the step
 * descends from it): start the period timer and read the control fifo. */
void ckpt_job_running(struct ckpt_job *cj, pid_t pid);

/* The step's processes are gone. Stops the timer and the control fifo;
 * when failed, takes a last checkpoint. Calls done once, from the loop,
 * when nothing is left to commit (at once when there is nothing to do). */
void ckpt_job_finish(struct ckpt_job *cj, bool failed, ckpt_done_cb done, void *arg);

/* Thaws the step if it is stopped for a capture, drops what is not yet
 * committed, and frees cj (later, once its thread and queries are done).
 * No callback is called after this. */
void ckpt_job_free(struct ckpt_job *cj);

#endif
