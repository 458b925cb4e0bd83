/* schedule: walks the ticks a schedule missed and applies its catch-up
 * policy. It decides only; the duties make the calls. */
#include "schedule.h"

#include <string.h>

#include "cron.h"

static int64_t floor_div(int64_t a, int64_t b)
{
	return a / b - (a % b != 0 && (a < 0) != (b < 0));
}

static int64_t next_tick_us(const struct cron *c, int64_t t_us)
{
	int64_t ms = cron_next(c, floor_div(t_us, 1000));

	return ms < 0 ? -1 : ms * 1000;
}

int schedule_plan(const struct cron *c, const char *catch_up, int64_t first_us, int64_t now_us,
		  struct schedule_fire *out, bool *more)
{
	int64_t ring[SCHEDULE_CATCH_UP_MAX], starts[SCHEDULE_CATCH_UP_MAX], t = first_us, cur;
	int nring = 0, head = 0, nstarts = 0, n = 0;
	long walked = 0;

	*more = false;
	/* The store said the schedule is due: its first tick counts even if
	 * this host's clock is a little behind the database's. */
	if (now_us < first_us)
		now_us = first_us;
	while (t >= 0 && t <= now_us) {
		ring[head] = t;
		head = (head + 1) % SCHEDULE_CATCH_UP_MAX;
		if (nring < SCHEDULE_CATCH_UP_MAX)
			nring++;
		t = next_tick_us(c, t);
		if (++walked >= SCHEDULE_MAX_WALK && t >= 0 && t <= now_us) {
			*more = true;
			break;
		}
	}
	/* t: the first tick after now, where the walk stopped, or -1 (never). */
	for (int i = 0; i < nring && !*more; i++) {
		int64_t tick = ring[(head - nring + i + SCHEDULE_CATCH_UP_MAX) % SCHEDULE_CATCH_UP_MAX];
		bool last = i == nring - 1;

		if (!strcmp(catch_up, "all") || (!strcmp(catch_up, "one") && last) ||
		    (!strcmp(catch_up, "skip") && now_us - tick <= SCHEDULE_SKIP_LATE_MS * 1000))
			starts[nstarts++] = tick;
	}
	cur = first_us;
	for (int i = 0; i < nstarts; i++) {
		int64_t next = i + 1 < nstarts ? starts[i + 1] : t;

		if (starts[i] != cur)
			out[n++] = (struct schedule_fire){ cur, starts[i], false };
		out[n++] = (struct schedule_fire){ starts[i], next, true };
		cur = next;
	}
	if (!nstarts)
		out[n++] = (struct schedule_fire){ first_us, t, false };
	return n;
}
