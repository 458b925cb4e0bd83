/* duties: cairnd's background work on the store: re-queue steps whose
 * leases expired and fire durable timers (sleeps, retry backoff, approval
 * and signal timeouts). Every cairnd runs them; the SQL functions lock
 * rows with SKIP LOCKED, so several daemons against one database share the
 * work instead of repeating it. */
#ifndef CAIRN_DUTIES_H
#define CAIRN_DUTIES_H

#include <stdbool.h>
#include <stdint.h>

struct event_base;
struct duties;

/* Returns new; opens its own connection (conninfo borrowed, copied) and
 * runs a round every interval_ms. Caller frees with duties_free. */
struct duties *duties_new(struct event_base *base, const char *conninfo, int64_t interval_ms);
/* No new rounds; a round in flight finishes. */
void duties_stop(struct duties *d);
/* True while a round is in flight. */
bool duties_busy(const struct duties *d);
void duties_free(struct duties *d);

#endif
