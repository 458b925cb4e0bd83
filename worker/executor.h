/* executor: runs one attempt of a step. It prepares the step's folders
 * (workspace, in, out), starts the command through a backend, captures
 * stdout/stderr under a cap, enforces the timeout, and hands back the
 * outcome with the collected output and effects. All on the caller's
 * event loop; no database access.
 *
 * On the host, an attempt lives in WORK_DIR/RUN_ID/STEP_ID/: workspace/
 * (kept across attempts of the step on this worker, removed when the step
 * succeeds), in/ and out/ (fresh for each attempt, removed after it) and
 * ctl. in/ holds input.json (the run input), NEED.json for each step it
 * needs, and .done-effects (the effect keys already committed for this
 * step, one per line). The sandbox mounts them at /workspace, /cairn/in,
 * /cairn/out and /cairn/ctl.
 *
 * A step whose spec names "secrets" gets a copy of just those files of the
 * operator's secrets folder in a fresh per-attempt folder (0700, files
 * 0400), bound read-only at /cairn/secrets and removed after the attempt;
 * a name with no file fails the step (reason "missing_secret"). Secret
 * values are never logged.
 *
 * The step's environment is exactly: its declared "env" (names starting
 * with CAIRN_ are ignored), then PATH=/usr/local/bin:/usr/bin:/bin and
 * HOME=/workspace unless it declares them, then CAIRN_WORKSPACE, CAIRN_IN,
 * CAIRN_OUT, CAIRN_CTL, CAIRN_RUN_ID, CAIRN_STEP_ID, CAIRN_ATTEMPT,
 * CAIRN_IDEMPOTENCY_KEY (RUN_ID:STEP_ID, the same for every attempt) and
 * CAIRN_DONE_EFFECTS (the path of .done-effects), then the step's env_extra
 * (CAIRN_RESUMED_FROM for an attempt restored from a checkpoint). Nothing
 * of the worker's own environment reaches the step. Its working directory
 * is /workspace. A fifo at ctl is left as it is: a step with checkpoints
 * has its control fifo there (worker/ckpt_job.h). */
#ifndef CAIRN_EXECUTOR_H
#define CAIRN_EXECUTOR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <jansson.h>

#include "sandbox.h"
#include "util.h"

struct event_base;
struct executor;
struct exec_job;

/* What a backend starts. Everything is borrowed for the call. */
struct exec_spawn {
	char *const *argv;
	char *const *envp;
	/* Host paths of the step's folders and control file. */
	const char *workspace, *in_dir, *out_dir, *ctl;
	/* Write ends of the stdout / stderr pipes; the backend dups them. */
	int stdout_fd, stderr_fd;
	/* spec.sandbox (may be NULL). */
	const json_t *sandbox;
	/* Operator bind mounts. */
	const struct sandbox_mount *mounts;
	size_t nmounts;
	/* Host folder of the attempt's secrets (bound read-only at
	 * /cairn/secrets), or NULL when the step names none. */
	const char *secrets_dir;
	/* The loop an egress proxy runs on, and where its decisions go (one
	 * line each, for the step's stderr log). */
	struct event_base *base;
	void (*proxy_log)(void *arg, const char *line);
	void *proxy_arg;
};

/* How the step's main process ended, as the backend sees it. */
struct exec_outcome {
	const char *reason;            /* "exit", "signal", or a backend reason (static) */
	char message[320];
	int exit_code;                 /* -1 when it did not exit */
	int signo;                     /* 0 when not killed by a signal */
	bool retryable;                /* for backend reasons */
};

/* A way to start a step's processes. The executor does everything else. */
struct exec_backend {
	const char *name;
	/* Paths as the step sees them (NULL: the host paths). */
	const char *workspace_path, *in_path, *out_path, *ctl_path;
	/* Starts sp; returns 0 with *proc (backend state) and *pid (the process
	 * whose exit ends the step, a child of the caller), or -1 with err. */
	int (*spawn)(const struct exec_spawn *sp, void **proc, pid_t *pid,
		     char *err, size_t errlen);
	/* Optional: a spawn may return before the command runs. setup_fd
	 * gives the fd that becomes readable when the set-up has ended (-1:
	 * the command already runs); setup_finish then returns 0 once it
	 * runs, 1 when not yet, -1 with err when the set-up failed (nothing
	 * is left running). */
	int (*setup_fd)(void *proc);
	int (*setup_finish)(void *proc, char *err, size_t errlen);
	/* SIGTERM asks the step to stop; SIGKILL kills every process of it. */
	void (*kill)(void *proc, int sig);
	/* Tells the backend why the executor is about to stop the step, so
	 * that outcome can say so: the timeout, or the output cap. */
	void (*note)(void *proc, bool timed_out, bool output_capped);
	/* Reaps the main process without blocking: 1 and *wstatus when it has
	 * exited, 0 while it runs, -1 on error. */
	int (*reap)(void *proc, int *wstatus);
	/* Why the step ended, from the wait status of its main process. */
	void (*outcome)(void *proc, int wstatus, struct exec_outcome *o);
	/* Kills what is left, reaps, frees proc. */
	void (*release)(void *proc);
};

/* The sandbox (worker/sandbox.h): the only way a step runs. */
extern const struct exec_backend exec_backend_sandbox;

struct executor_opts {
	const char *work_dir;          /* borrowed, must exist */
	const struct exec_backend *backend; /* borrowed; NULL = the sandbox */
	const struct sandbox_mount *mounts; /* borrowed, operator bind mounts */
	size_t nmounts;
	size_t log_max;                /* cap per stream, bytes */
	size_t doc_max;                /* cap of output.json / effects.jsonl */
	int64_t kill_grace_ms;         /* SIGTERM → SIGKILL on timeout */
	/* log_max applies unless the step's sandbox profile sets a smaller
	 * "output"; the step is killed at the cap (reason "output_cap")
	 * unless its "on_output_cap" is "truncate". */
	const char *secrets_dir;       /* borrowed; NULL = steps may name no secret */
	/* What a step's own sandbox profile may ask of the host: its "mounts"
	 * and "rootfs" must resolve under one of these comma-separated
	 * folders (borrowed; NULL = none), and "unix_sockets" needs
	 * step_unix_sockets. Anything else fails the step (forbidden_sandbox). */
	const char *step_host_paths;
	bool step_unix_sockets;
};

/* One attempt, as claimed. Borrowed for the call to executor_start. */
struct exec_step {
	const char *run_id, *step_id;
	int attempt;
	const json_t *spec;            /* normalized step spec */
	const json_t *input;           /* run input */
	const json_t *needs_output;    /* {step_id: output} */
	const json_t *done_effects;    /* array of keys already committed */
	const json_t *env_extra;       /* more CAIRN_* variables ({name: string}), or NULL */
};

struct exec_result {
	bool success;
	/* On failure: reason ("exit", "signal", "timeout", "bad_output",
	 * "bad_effects", "spawn", "bad_spec", "prepare", "missing_secret",
	 * "bad_secret", "forbidden_sandbox", a sandbox reason such
	 * as "oom" or "seccomp", or the kill reason), a message, and whether
	 * another attempt may help. */
	const char *reason;
	char message[512];
	bool retryable;
	int exit_code;                 /* -1 when the process did not exit */
	int signo;                     /* 0 when not killed by a signal */
	int64_t started_at_ms;         /* wall clock */
	int64_t duration_ms;
	/* Borrowed, valid during the callback: output (success), effects
	 * (success, array), logs ([{stream, data, truncated}]). */
	json_t *output, *effects, *logs;
};

/* Called once per started job, from the loop. The job is freed after the
 * callback returns: do not keep the pointer. */
typedef void (*exec_done_cb)(struct exec_job *job, const struct exec_result *res, void *arg);

/* Returns new; caller frees with executor_free (after every job is done). */
struct executor *executor_new(struct event_base *base, const struct executor_opts *opts);
void executor_free(struct executor *ex);

/* Starts one attempt. Returns the job, or NULL with err set when it could
 * not be prepared or started; then *fail_reason (static) and
 * *fail_retryable say how the step fails, and cb is never called. */
struct exec_job *executor_start(struct executor *ex, const struct exec_step *step,
				exec_done_cb cb, void *arg,
				const char **fail_reason, bool *fail_retryable,
				char *err, size_t errlen);

/* Kills the job's processes now; its result fails with reason (a static
 * string) and retryable. Safe to call more than once before the callback. */
void executor_kill(struct exec_job *job, const char *reason, bool retryable);

/* Pid of the job's main process (for logs and start info). */
pid_t executor_job_pid(const struct exec_job *job);

/* The folder the steps' folders live in (borrowed). */
const char *executor_work_dir(const struct executor *ex);

/* Number of jobs not yet finished. */
int executor_running(const struct executor *ex);

/* Removes the step's folder (workspace included) and the run's folder
 * when it is left empty: for steps that will not run here again. Not for
 * a step with a job running. */
void executor_forget(struct executor *ex, const char *run_id, const char *step_id);

/* Checks the operator's secrets folder: a folder no one but its owner may
 * enter, holding files no one but their owner may read. Returns 0, or -1
 * with a message naming the offending path. */
int executor_check_secrets(const char *dir, char *err, size_t errlen) WARN_UNUSED;

/* Removes dir and everything below it without following symlinks. */
int executor_rmtree(const char *dir) WARN_UNUSED;

#endif
