/* lease: the worker's side of the store. Registers the worker on every
 * connect (the store takes a dead worker's leases back at once), claims
 * ready steps in batches, starts them through the executor, keeps their
 * leases alive, reports their outcome (with the steps a step adds,
 * normalized), and drains on shutdown. */
#ifndef CAIRN_LEASE_H
#define CAIRN_LEASE_H

#include <stdbool.h>
#include <stdint.h>

struct event_base;
struct pgq;
struct executor;
struct lease;

struct lease_opts {
	const char *name;              /* worker name, borrowed */
	const char *const *queues;     /* NULL-terminated, borrowed */
	int concurrency;
	int64_t lease_ms;
	int64_t poll_ms;               /* polling fallback period (± 20 % jitter) */
	int64_t drain_timeout_ms;
	/* Called once when a drain or stop has finished: no step left. */
	void (*done)(void *arg);
	void *done_arg;
};

/* Returns new. db carries the transitions; listen_db (may be the same)
 * LISTENs on cairn_ready. All borrowed; they must outlive the lease.
 * Caller frees with lease_free. */
struct lease *lease_new(struct event_base *base, struct pgq *db, struct pgq *listen_db,
			struct executor *ex, const struct lease_opts *opts);
/* Starts claiming. */
void lease_start(struct lease *l);
/* Stops claiming and lets running steps finish, for at most the drain
 * timeout; then stops them as lease_stop does. */
void lease_drain(struct lease *l);
/* Stops claiming and kills running steps now; they are reported failed
 * (reason "worker_shutdown", retryable). */
void lease_stop(struct lease *l);
/* Number of steps running or being reported. */
int lease_jobs(const struct lease *l);
void lease_free(struct lease *l);

#endif
