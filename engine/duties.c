/* duties: a timer that calls cairn.reap_expired, cairn.fire_timers and
 * cairn.schedule_fire on a connection of its own, so slow rounds never
 * delay API requests, and drives webhook deliveries on the same
 * connection. A full batch means more is due: the next round starts at
 * once. It never writes tables directly. */
#include "duties.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <event2/event.h>

#include "cron.h"
#include "log.h"
#include "pgq.h"
#include "schedule.h"
#include "webhook.h"

#define BATCH 100
#define BATCH_S "100"
#define SCHEDULE_BATCH 50
#define SCHEDULE_BATCH_S "50"

struct duties {
	struct event_base *base;
	struct pgq *q;
	struct event *timer;
	struct webhook *webhook;
	int64_t interval_ms;
	int pending;	/* queries of the current round still out */
	bool full;	/* a query of this round returned a full batch */
	bool stopped;
	int64_t last_warn_ms;
	uint64_t schedule_runs;
};

static void arm(struct duties *d, int64_t ms)
{
	struct timeval tv = { .tv_sec = ms / 1000, .tv_usec = (ms % 1000) * 1000 };

	if (!d->stopped)
		evtimer_add(d->timer, &tv);
}

static void warn_limited(struct duties *d, const char *what, const PGresult *res)
{
	int64_t now = mono_ms();

	/* One warning every 10 s at most while the store is unhappy. */
	if (now - d->last_warn_ms > 10000) {
		log_warn("%s failed: %s", what, pgq_errmsg(res));
		d->last_warn_ms = now;
	}
}

/* One query of the round is back; the last one schedules the next round. */
static void step_done(struct duties *d)
{
	if (--d->pending > 0)
		return;
	arm(d, d->full ? 0 : d->interval_ms);
}

static void round_done(PGresult *res, void *arg)
{
	struct duties *d = arg;

	if (!pgq_ok(res)) {
		warn_limited(d, "background duties", res);
	} else if (PQntuples(res) == 1) {
		long n = strtol(PQgetvalue(res, 0, 0), NULL, 10);

		if (n > 0)
			log_debug("%s: %ld", PQfname(res, 0), n);
		if (n >= BATCH)
			d->full = true;
	}
	step_done(d);
}

static void fire_done(PGresult *res, void *arg)
{
	struct duties *d = arg;

	if (!pgq_ok(res))
		warn_limited(d, "firing a schedule", res);
	else if (PQntuples(res) == 1 && !PQgetisnull(res, 0, 0))
		d->schedule_runs++;
	step_done(d);
}

static void fire_schedule(struct duties *d, const char *name, const char *expr, int64_t first_us,
			  const char *catch_up, int64_t now_us)
{
	static const char sql[] =
		"select cairn.schedule_fire($1, timestamptz 'epoch' + $2::bigint * interval '1 microsecond', "
		"case when $3::bigint < 0 then 'infinity'::timestamptz "
		"else timestamptz 'epoch' + $3::bigint * interval '1 microsecond' end, $4::boolean)";
	struct schedule_fire fires[SCHEDULE_MAX_FIRES];
	struct cron c;
	char err[256], tick[24], next[24];
	bool more;
	int n;

	if (cron_parse(expr, &c, err, sizeof(err)) < 0) {
		int64_t now = mono_ms();

		if (now - d->last_warn_ms > 10000) {
			log_warn("schedule \"%s\": invalid cron expression \"%s\": %s", name, expr, err);
			d->last_warn_ms = now;
		}
		return;
	}
	n = schedule_plan(&c, catch_up, first_us, now_us, fires, &more);
	if (more)
		d->full = true;
	for (int i = 0; i < n; i++) {
		snprintf(tick, sizeof(tick), "%" PRId64, fires[i].tick_us);
		snprintf(next, sizeof(next), "%" PRId64, fires[i].next_us);
		d->pending++;
		pgq_exec(d->q, sql, 4,
			 (const char *[]){ name, tick, next, fires[i].start ? "true" : "false" },
			 fire_done, d);
	}
}

static void schedules_done(PGresult *res, void *arg)
{
	struct duties *d = arg;
	int64_t now_us = wall_ms() * 1000;
	int n;

	if (!pgq_ok(res)) {
		warn_limited(d, "reading due schedules", res);
		step_done(d);
		return;
	}
	n = PQntuples(res);
	if (n >= SCHEDULE_BATCH)
		d->full = true;
	for (int i = 0; i < n; i++)
		fire_schedule(d, PQgetvalue(res, i, 0), PQgetvalue(res, i, 1),
			      strtoll(PQgetvalue(res, i, 2), NULL, 10), PQgetvalue(res, i, 3), now_us);
	step_done(d);
}

static void tick(evutil_socket_t fd, short what, void *arg)
{
	static const char reap[] = "select cairn.reap_expired(" BATCH_S ") as reaped";
	static const char fire[] = "select cairn.fire_timers(" BATCH_S ") as timers_fired";
	static const char due[] =
		"select name, cron, (extract(epoch from next_at) * 1000000)::bigint, catch_up "
		"from cairn.schedules where enabled and next_at <= now() "
		"order by next_at limit " SCHEDULE_BATCH_S;
	struct duties *d = arg;

	if (d->stopped)
		return;
	if (!pgq_connected(d->q)) {
		arm(d, d->interval_ms);
		return;
	}
	d->full = false;
	d->pending = 3;
	pgq_exec(d->q, reap, 0, NULL, round_done, d);
	pgq_exec(d->q, fire, 0, NULL, round_done, d);
	pgq_exec(d->q, due, 0, NULL, schedules_done, d);
	if (d->webhook)
		webhook_poll(d->webhook);
}

struct duties *duties_new(struct event_base *base, const struct duties_opts *opts, char *err,
			  size_t errlen)
{
	struct duties *d = xcalloc(1, sizeof(*d));

	d->base = base;
	d->interval_ms = opts->interval_ms > 0 ? opts->interval_ms : 250;
	d->q = pgq_new(base, opts->conninfo, "cairnd-duties");
	if (opts->webhook_url) {
		d->webhook = webhook_new(base, d->q, opts->webhook_url, opts->webhook_secret, err, errlen);
		if (!d->webhook) {
			pgq_free(d->q);
			free(d);
			return NULL;
		}
	}
	d->timer = evtimer_new(base, tick, d);
	arm(d, d->interval_ms);
	return d;
}

void duties_stop(struct duties *d)
{
	d->stopped = true;
	event_del(d->timer);
	if (d->webhook)
		webhook_stop(d->webhook);
}

bool duties_busy(const struct duties *d)
{
	return d->pending > 0 || (d->webhook && webhook_busy(d->webhook));
}

void duties_metrics_write(const struct duties *d, struct buf *out)
{
	buf_addf(out, "# HELP cairnd_schedule_runs_total Runs this daemon started for schedule ticks.\n"
		      "# TYPE cairnd_schedule_runs_total counter\n"
		      "cairnd_schedule_runs_total %" PRIu64 "\n", d->schedule_runs);
	if (d->webhook)
		webhook_metrics_write(d->webhook, out);
}

void duties_free(struct duties *d)
{
	if (!d)
		return;
	d->stopped = true;
	pgq_free(d->q);	/* fails queries in flight: their callbacks schedule nothing */
	webhook_free(d->webhook);
	event_free(d->timer);
	free(d);
}
