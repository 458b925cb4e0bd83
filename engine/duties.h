/* duties: cairnd's background work on the store: re-queue steps whose
 * leases expired, fire durable timers (sleeps, retry backoff, approval
 * and signal timeouts), start the runs of due schedules, and deliver
 * approval webhooks when a URL is configured. Every cairnd runs them; the
 * SQL functions lock rows with SKIP LOCKED (and a schedule's tick acts
 * only once), so several daemons against one database share the work
 * instead of repeating it. */
#ifndef CAIRN_DUTIES_H
#define CAIRN_DUTIES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "util.h"

struct event_base;
struct duties;

struct duties_opts {
	const char *conninfo;       /* borrowed, copied by the connection */
	int64_t interval_ms;        /* between rounds; <= 0: 250 ms */
	const char *webhook_url;    /* borrowed, copied; NULL: no webhooks */
	const char *webhook_secret; /* borrowed, copied; never logged */
};

/* Returns new, or NULL with a message in err (a bad webhook URL). Opens
 * its own connection and runs a round every interval_ms. Caller frees
 * with duties_free. */
struct duties *duties_new(struct event_base *base, const struct duties_opts *opts, char *err,
			  size_t errlen);
/* No new rounds; a round in flight finishes. */
void duties_stop(struct duties *d);
/* True while a round or a webhook delivery is in flight. */
bool duties_busy(const struct duties *d);
/* Appends the duties' counters in Prometheus text format. */
void duties_metrics_write(const struct duties *d, struct buf *out);
void duties_free(struct duties *d);

#endif
