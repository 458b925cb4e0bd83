/* schedule: the catch-up policy of durable schedules: given a schedule's
 * due tick and the present, which ticks start runs and in what order the
 * store's cairn.schedule_fire is called. Pure: no I/O, no clock. */
#ifndef CAIRN_SCHEDULE_H
#define CAIRN_SCHEDULE_H

#include <stdbool.h>
#include <stdint.h>

struct cron;

/* Late ticks beyond this start nothing under catch_up "skip". */
#define SCHEDULE_SKIP_LATE_MS 2000
/* At most this many runs for the ticks missed under "all" (the latest). */
#define SCHEDULE_CATCH_UP_MAX 100
/* Ticks walked per call; more missed than that continue in the next call. */
#define SCHEDULE_MAX_WALK 100000
/* The most calls schedule_plan returns. */
#define SCHEDULE_MAX_FIRES (2 * SCHEDULE_CATCH_UP_MAX + 1)

/* One cairn.schedule_fire call: (tick, next, start), in microseconds
 * since the epoch; next is -1 for "never again". */
struct schedule_fire {
	int64_t tick_us, next_us;
	bool start;
};

/* Fills out (room for SCHEDULE_MAX_FIRES) with the schedule_fire calls
 * for a schedule whose next_at is first_us, at now_us, under catch_up
 * ("skip", "one" or "all"; anything else starts nothing), and returns
 * their number (at least 1). Each call's tick is the previous call's
 * next, so that only in-order calls act. *more is set when the walk
 * stopped early (too many missed ticks): the last call then starts
 * nothing and the schedule is still due. */
int schedule_plan(const struct cron *c, const char *catch_up, int64_t first_us, int64_t now_us,
		  struct schedule_fire *out, bool *more);

#endif
