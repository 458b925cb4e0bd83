/* duties: a timer that calls cairn.reap_expired and cairn.fire_timers on a
 * connection of its own, so slow rounds never delay API requests. A full
 * batch means more is due: the next round starts at once. It never
 * touches tables directly. */
#include "duties.h"

#include <stdlib.h>
#include <string.h>
#include <event2/event.h>

#include "log.h"
#include "pgq.h"
#include "util.h"

#define BATCH 100
#define BATCH_S "100"

struct duties {
	struct event_base *base;
	struct pgq *q;
	struct event *timer;
	int64_t interval_ms;
	int pending;	/* queries of the current round still out */
	bool full;	/* a query of this round returned a full batch */
	bool stopped;
	int64_t last_warn_ms;
};

static void schedule(struct duties *d, int64_t ms)
{
	struct timeval tv = { .tv_sec = ms / 1000, .tv_usec = (ms % 1000) * 1000 };

	if (!d->stopped)
		evtimer_add(d->timer, &tv);
}

static void round_done(PGresult *res, void *arg)
{
	struct duties *d = arg;

	if (!pgq_ok(res)) {
		int64_t now = mono_ms();

		/* One warning every 10 s at most while the store is unhappy. */
		if (now - d->last_warn_ms > 10000) {
			log_warn("background duties failed: %s", pgq_errmsg(res));
			d->last_warn_ms = now;
		}
	} else if (PQntuples(res) == 1) {
		long n = strtol(PQgetvalue(res, 0, 0), NULL, 10);

		if (n > 0)
			log_debug("%s: %ld", PQfname(res, 0), n);
		if (n >= BATCH)
			d->full = true;
	}
	if (--d->pending > 0)
		return;
	schedule(d, d->full ? 0 : d->interval_ms);
}

static void tick(evutil_socket_t fd, short what, void *arg)
{
	static const char reap[] = "select cairn.reap_expired(" BATCH_S ") as reaped";
	static const char fire[] = "select cairn.fire_timers(" BATCH_S ") as timers_fired";
	struct duties *d = arg;

	if (d->stopped)
		return;
	if (!pgq_connected(d->q)) {
		schedule(d, d->interval_ms);
		return;
	}
	d->full = false;
	d->pending = 2;
	pgq_exec(d->q, reap, 0, NULL, round_done, d);
	pgq_exec(d->q, fire, 0, NULL, round_done, d);
}

struct duties *duties_new(struct event_base *base, const char *conninfo, int64_t interval_ms)
{
	struct duties *d = xcalloc(1, sizeof(*d));

	d->base = base;
	d->interval_ms = interval_ms > 0 ? interval_ms : 250;
	d->q = pgq_new(base, conninfo, "cairnd-duties");
	d->timer = evtimer_new(base, tick, d);
	schedule(d, d->interval_ms);
	return d;
}

void duties_stop(struct duties *d)
{
	d->stopped = true;
	event_del(d->timer);
}

bool duties_busy(const struct duties *d)
{
	return d->pending > 0;
}

void duties_free(struct duties *d)
{
	if (!d)
		return;
	d->stopped = true;
	pgq_free(d->q);	/* fails a round in flight: round_done schedules nothing */
	event_free(d->timer);
	free(d);
}
