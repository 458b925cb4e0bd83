/* workflow: validation and normalization of workflow definitions
 * (DESIGN.md §8) into the form the store reads (sql/README.md,
 * "Normalized definition"). Pure functions over jansson values: no I/O
 * except workflow_load_file, no global state.
 *
 * Normalized root:
 *   name, description?, version?, input?, steps: [...],
 *   limits: {max_steps, max_duration_ms, max_attempts_total} (each int or null),
 *   defaults? (the validated "defaults" object as written, kept so that
 *              steps added at run time get the same defaults)
 *
 * Every normalized step has id, kind ("run" | "approval" | "sleep" |
 * "wait_signal" | "workflow"), needs, timeout_ms, queue, priority, retry
 * {max_attempts, backoff, initial_ms, max_ms, jitter, permanent_exit_codes},
 * and description when one was given. By kind:
 *   run:         run (argv array), env {}, secrets [], sandbox {},
 *                checkpoint null | {every_ms}, approve null | <approval>,
 *                concurrency null | {key, limit}, rate null | {key, per_minute}
 *   approval:    approval <approval>
 *   sleep:       sleep_ms
 *   wait_signal: signal {name, timeout_ms (int or null)}
 *   workflow:    workflow {definition (normalized) | name [, version]
 *                [, input]}: a child run (definitions nest at most 4 deep)
 * where <approval> is {prompt, timeout_ms (int or null), on_timeout
 * ("reject" | "approve" | "fail"), on_reject ("fail" | "skip"), quorum, show [step ids]}.
 *
 * Normalized sandbox keys: those the worker's sandbox reads (each present
 * only when set, by the step or by defaults.sandbox; the step's keys
 * override the defaults' one by one). Sizes are written "512M" or as bytes
 * and normalize to integer bytes; durations normalize to integer ms.
 *   network        "none" | {"allow": ["host:port", ...]}
 *   memory         bytes (cgroup memory limit), at least 4M
 *   pids           int 2..1000000 (cgroup pids limit)
 *   cpu            number of CPUs (real, 0.01..1024)
 *   rootfs         absolute path of the read-only root
 *   mounts         [{"src": abs path, "dst": abs path, "rw": bool}]
 *   seccomp        {"deny"|"enosys"|"kill": [syscall names]}: refusals added
 *                  to the default policy (a step cannot allow anything)
 *   output         bytes kept per stream, at least 1024 (also written "output_limit")
 *   on_output_cap  "kill" | "truncate"
 *   file_size      bytes (RLIMIT_FSIZE), at least 4096
 *   tmp_size       bytes of the /tmp tmpfs, at least 1M
 *   open_files     int 16..1048576 (RLIMIT_NOFILE; also written "nofile")
 *   cpu_time_ms    RLIMIT_CPU, from "cpu_time" (at least 1s)
 *   kill_grace_ms  SIGTERM to SIGKILL grace, from "kill_grace"
 *   unix_sockets   bool
 * A sandbox "timeout" is not kept: it lowers the step's timeout_ms.
 *
 * Durations are strings ("250ms", "2s", "1h30m") or plain numbers of
 * seconds; sizes are strings ("512M") or plain numbers of bytes. */
#ifndef CAIRN_WORKFLOW_H
#define CAIRN_WORKFLOW_H

#include <stddef.h>
#include <jansson.h>

#include "util.h"

#define WORKFLOW_MAX_STEPS 1000
/* Largest definition file workflow_load_file reads. */
#define WORKFLOW_MAX_FILE (1024 * 1024)
/* At most this many errors are listed; a last one says more were dropped. */
#define WORKFLOW_MAX_ERRORS 100

/* Validates def (borrowed). On success returns 0 and sets *out to a new
 * normalized definition (caller json_decref). On failure returns -1 and
 * sets *errors to a new JSON array of {"path": "$.steps[0].run", "message": "..."}
 * listing every problem found (not just the first). */
int workflow_normalize(json_t *def, json_t **out, json_t **errors) WARN_UNUSED;

/* Validates steps added at run time ({"cairn": {"add_steps": steps}}).
 * def is the run's normalized definition including the steps added so far
 * (borrowed); steps (borrowed) may need those steps and each other, and get
 * def's defaults. When def has no "steps" (the caller does not know every
 * step of the run), needs outside the batch are left for the store to
 * check. Errors have paths under "$.cairn.add_steps". On success
 * returns 0 and sets *out to a new array of normalized steps; on failure
 * returns -1 and sets *errors as workflow_normalize does. */
int workflow_normalize_steps(const json_t *def, json_t *steps, json_t **out,
			     json_t **errors) WARN_UNUSED;

/* Parses a JSON file of at most WORKFLOW_MAX_FILE bytes. Returns 0 and a new
 * value in *def (caller json_decref), or -1 with a message in err (with the
 * line and column of a syntax error). Duplicate object keys are refused. */
int workflow_load_file(const char *path, json_t **def, char *err, size_t errlen) WARN_UNUSED;

/* The same for a buffer (borrowed); name is used in messages. */
int workflow_load_buffer(const char *data, size_t len, const char *name, json_t **def,
			 char *err, size_t errlen) WARN_UNUSED;

/* Formats an errors array as "path: message" lines. Returns new; caller
 * frees with free(). */
char *workflow_errors_string(const json_t *errors);

#endif
