/* test-cron: cron expressions in UTC: next ticks for known expressions,
 * month ends, leap years, day-of-month / day-of-week OR semantics, names,
 * steps, macros, @every, and bad expressions refused with the field named;
 * and the catch-up policies of schedules over ticks missed. */
#include "../tap.h"
#include "../../engine/cron.h"
#include "../../engine/schedule.h"

#include <stdio.h>
#include <string.h>
#include <time.h>

/* Unix ms of a UTC date. */
static int64_t at(int y, int mo, int d, int h, int mi, int s)
{
	struct tm tm = { .tm_year = y - 1900, .tm_mon = mo - 1, .tm_mday = d,
			 .tm_hour = h, .tm_min = mi, .tm_sec = s };

	return (int64_t)timegm(&tm) * 1000;
}

static void fmt(int64_t ms, char *out, size_t len)
{
	time_t t = (time_t)(ms / 1000);
	struct tm tm;

	if (ms < 0 || !gmtime_r(&t, &tm)) {
		snprintf(out, len, "(none: %lld)", (long long)ms);
		return;
	}
	strftime(out, len, "%Y-%m-%d %H:%M:%S", &tm);
	if (ms % 1000)
		snprintf(out + strlen(out), len - strlen(out), ".%03d", (int)(ms % 1000));
}

/* next(expr, after) is want (both as "YYYY-MM-DD HH:MM:SS" via fmt). */
static void next_is(const char *expr, int64_t after, int64_t want)
{
	struct cron c;
	char err[256] = "", got_s[64], want_s[64], after_s[64];

	if (cron_parse(expr, &c, err, sizeof(err)) < 0) {
		ok(0, "\"%s\" parses: %s", expr, err);
		return;
	}
	fmt(cron_next(&c, after), got_s, sizeof(got_s));
	fmt(want, want_s, sizeof(want_s));
	fmt(after, after_s, sizeof(after_s));
	is_str(got_s, want_s, "\"%s\" after %s", expr, after_s);
}

/* A sequence of ticks from after. */
static void ticks_are(const char *expr, int64_t after, const int64_t *want, int n)
{
	struct cron c;
	char err[256] = "";
	int64_t t = after;
	bool good = true;

	if (cron_parse(expr, &c, err, sizeof(err)) < 0) {
		ok(0, "\"%s\" parses: %s", expr, err);
		return;
	}
	for (int i = 0; i < n && good; i++) {
		t = cron_next(&c, t);
		if (t != want[i]) {
			char g[64], w[64];

			fmt(t, g, sizeof(g));
			fmt(want[i], w, sizeof(w));
			diag("tick %d: got %s, expected %s", i, g, w);
			good = false;
		}
	}
	ok(good, "\"%s\": %d ticks in order", expr, n);
}

static void refused(const char *expr, const char *want_in_err)
{
	struct cron c;
	char err[256] = "";
	int rc = cron_parse(expr, &c, err, sizeof(err));

	ok(rc < 0 && strstr(err, want_in_err), "\"%s\" refused naming \"%s\"", expr, want_in_err);
	if (rc == 0 || !strstr(err, want_in_err))
		diag("rc %d, error: %s", rc, err);
}


/* Formats a plan as "tick>next:S|..." with times in seconds relative to
 * base (next "never" for -1) and S 1 for a start. */
static void plan_str(const struct schedule_fire *f, int n, int64_t base_us, char *out, size_t len)
{
	size_t o = 0;

	out[0] = '\0';
	for (int i = 0; i < n && o < len; i++) {
		char next[32];

		if (f[i].next_us < 0)
			snprintf(next, sizeof(next), "never");
		else
			snprintf(next, sizeof(next), "%lld", (long long)((f[i].next_us - base_us) / 1000000));
		o += (size_t)snprintf(out + o, len - o, "%s%lld>%s:%d", i ? "|" : "",
				      (long long)((f[i].tick_us - base_us) / 1000000), next, f[i].start);
	}
}

static void plan_is(const char *expr, const char *policy, int64_t first_us, int64_t now_us,
		    int64_t base_us, const char *want, const char *what)
{
	static struct schedule_fire f[SCHEDULE_MAX_FIRES];
	struct cron c;
	char err[256] = "", got[4096];
	bool more;
	int n;

	if (cron_parse(expr, &c, err, sizeof(err)) < 0) {
		ok(0, "%s: \"%s\" parses: %s", what, expr, err);
		return;
	}
	n = schedule_plan(&c, policy, first_us, now_us, f, &more);
	plan_str(f, n, base_us, got, sizeof(got));
	is_str(got, want, "%s", what);
}

/* The schedule_fire calls of each policy. */
static void test_plans(void)
{
	static struct schedule_fire f[SCHEDULE_MAX_FIRES];
	int64_t T = at(2026, 1, 1, 12, 0, 0) * 1000, S = 1000000, M = 60 * S;
	struct cron c;
	char err[256];
	bool more, chained = true;
	int n;

	/* On time (0.3 s late): every policy starts it. */
	plan_is("* * * * *", "skip", T, T + 300000, T, "0>60:1", "skip: a tick due now starts");
	plan_is("* * * * *", "one", T, T + 300000, T, "0>60:1", "one: a tick due now starts");
	plan_is("* * * * *", "all", T, T + 300000, T, "0>60:1", "all: a tick due now starts");
	/* Five ticks missed, now 10 s after the last. */
	plan_is("* * * * *", "skip", T - 4 * M, T + 10 * S, T, "-240>60:0",
		"skip: ticks more than 2 s late start nothing");
	plan_is("* * * * *", "skip", T - 4 * M, T + 1 * S, T, "-240>0:0|0>60:1",
		"skip: the latest tick, 1 s late, still starts");
	plan_is("* * * * *", "one", T - 4 * M, T + 10 * S, T, "-240>0:0|0>60:1",
		"one: only the latest missed tick starts");
	plan_is("* * * * *", "all", T - 4 * M, T + 10 * S, T,
		"-240>-180:1|-180>-120:1|-120>-60:1|-60>0:1|0>60:1", "all: every missed tick starts, in order");
	/* A next_at off the grid (moved by hand) still acts first. */
	plan_is("* * * * *", "one", T - 4 * M + 123456, T + 10 * S, T, "-239>0:0|0>60:1",
		"one: a first tick off the grid is fired first");
	/* A tick with no successor. */
	plan_is("0 0 1 1 *", "one", at(2026, 1, 1, 0, 0, 0) * 1000, at(2026, 1, 1, 0, 0, 5) * 1000,
		at(2026, 1, 1, 0, 0, 0) * 1000, "0>31536000:1", "@yearly-like: next is a year later");
	plan_is("* * * * *", "bogus", T, T, T, "0>60:0", "an unknown policy starts nothing");

	/* 180 missed: "all" starts the latest 100. */
	if (cron_parse("* * * * *", &c, err, sizeof(err)) < 0)
		bail("parse: %s", err);
	n = schedule_plan(&c, "all", T - 179 * M, T + S, f, &more);
	is_int(n, 101, "all, 180 missed: one skip call and 100 starts");
	ok(!f[0].start && f[0].tick_us == T - 179 * M && f[0].next_us == T - 99 * M,
	   "the skip call jumps to the 100th latest tick");
	ok(f[1].start && f[1].tick_us == T - 99 * M && f[100].tick_us == T && f[100].next_us == T + M,
	   "then each of the latest 100 starts, up to now's");
	for (int i = 1; i < n; i++)
		chained = chained && f[i].tick_us == f[i - 1].next_us;
	ok(chained && !more, "each call's tick is the previous call's next");

	/* Two days of seconds missed: the walk stops and goes on next round. */
	if (cron_parse("* * * * * *", &c, err, sizeof(err)) < 0)
		bail("parse: %s", err);
	n = schedule_plan(&c, "all", T - 2 * 86400 * S, T, f, &more);
	ok(more && n == 1 && !f[0].start && f[0].next_us == T - 2 * 86400 * S + (int64_t)SCHEDULE_MAX_WALK * S,
	   "too many missed ticks: the schedule moves on by %d ticks, starting nothing, and stays due",
	   SCHEDULE_MAX_WALK);
	n = schedule_plan(&c, "one", f[0].next_us, T, f, &more);
	ok(!more && n == 2 && f[1].start && f[1].tick_us == T, "the next round finishes the catch-up");

	/* @every: ticks on multiples of the duration. */
	plan_is("@every 2s", "all", T - 4 * S, T + 500000, T, "-4>-2:1|-2>0:1|0>2:1",
		"@every 2s: all missed ticks");
}

int main(void)
{
	int64_t t0 = at(2026, 11, 30, 2, 46, 28);

	/* Basics. */
	next_is("* * * * *", t0, at(2026, 11, 30, 2, 47, 0));
	next_is("* * * * * *", t0, t0 + 1000);
	next_is("* * * * * *", t0 + 500, t0 + 1000);
	next_is("*/1 * * * * *", t0 + 999, t0 + 1000);
	next_is("*/15 * * * * *", t0, at(2026, 11, 30, 2, 46, 30));
	next_is("*/5 * * * *", t0, at(2026, 11, 30, 2, 50, 0));
	next_is("0 * * * *", t0, at(2026, 11, 30, 3, 0, 0));
	next_is("30 9 * * *", t0, at(2026, 11, 30, 9, 30, 0));
	next_is("30 1 * * *", t0, at(2026, 12, 1, 1, 30, 0));
	next_is("1-10/2 * * * *", at(2026, 1, 1, 0, 3, 0), at(2026, 1, 1, 0, 5, 0));
	next_is("1-10/2 * * * *", at(2026, 1, 1, 0, 9, 0), at(2026, 1, 1, 1, 1, 0));
	next_is("5,10,55 * * * *", at(2026, 1, 1, 0, 10, 0), at(2026, 1, 1, 0, 55, 0));
	next_is("10/20 * * * *", at(2026, 1, 1, 0, 31, 0), at(2026, 1, 1, 0, 50, 0));
	/* An exact tick is not "after" itself. */
	next_is("0 12 * * *", at(2026, 6, 1, 12, 0, 0), at(2026, 6, 2, 12, 0, 0));

	/* Year, month and day ends. */
	next_is("* * * * *", at(2026, 12, 31, 23, 59, 30), at(2027, 1, 1, 0, 0, 0));
	next_is("0 0 31 * *", at(2026, 4, 1, 0, 0, 0), at(2026, 5, 31, 0, 0, 0));
	next_is("0 0 31 * *", at(2026, 1, 31, 0, 0, 0), at(2026, 3, 31, 0, 0, 0));
	next_is("0 0 30 * *", at(2027, 1, 30, 0, 0, 0), at(2027, 3, 30, 0, 0, 0));
	/* Leap years: 2028 is one, 2100 is not, 2000 was. */
	next_is("0 0 29 2 *", at(2026, 3, 1, 0, 0, 0), at(2028, 2, 29, 0, 0, 0));
	next_is("0 0 29 2 *", at(2028, 2, 29, 0, 0, 0), at(2032, 2, 29, 0, 0, 0));
	next_is("0 0 29 2 *", at(1999, 1, 1, 0, 0, 0), at(2000, 2, 29, 0, 0, 0));
	next_is("0 0 29 2 *", at(2097, 1, 1, 0, 0, 0), at(2104, 2, 29, 0, 0, 0));
	next_is("0 0 1 3 *", at(2028, 2, 28, 12, 0, 0), at(2028, 3, 1, 0, 0, 0));
	next_is("0 12 28-31 2 *", at(2028, 2, 28, 13, 0, 0), at(2028, 2, 29, 12, 0, 0));
	next_is("0 12 28-31 2 *", at(2027, 2, 28, 13, 0, 0), at(2028, 2, 28, 12, 0, 0));
	/* Never. */
	next_is("0 0 30 2 *", t0, -1);
	next_is("0 0 31 4,6,9,11 *", t0, -1);

	/* Names and weekdays (2026-11-30 is a Monday). */
	next_is("0 0 * * sun", t0, at(2026, 12, 6, 0, 0, 0));
	next_is("0 0 * * 7", t0, at(2026, 12, 6, 0, 0, 0));
	next_is("0 0 * * 0", t0, at(2026, 12, 6, 0, 0, 0));
	next_is("0 8 * * MON-FRI", at(2026, 12, 4, 9, 0, 0), at(2026, 12, 7, 8, 0, 0));
	next_is("0 0 1 jan *", t0, at(2027, 1, 1, 0, 0, 0));
	next_is("0 0 1 Jun-Aug *", t0, at(2027, 6, 1, 0, 0, 0));
	next_is("0 0 * feb,mar sat", t0, at(2027, 2, 6, 0, 0, 0));
	/* Day-of-month OR day-of-week when both are restricted. */
	next_is("0 0 13 * fri", at(2026, 11, 1, 0, 0, 0), at(2026, 11, 6, 0, 0, 0));
	next_is("0 0 13 * fri", at(2026, 11, 6, 0, 0, 0), at(2026, 11, 13, 0, 0, 0));
	next_is("0 0 1 * mon", at(2026, 11, 24, 0, 0, 0), at(2026, 11, 30, 0, 0, 0));
	/* AND when one of them starts with "*". */
	next_is("0 0 */2 * fri", at(2026, 11, 1, 0, 0, 0), at(2026, 11, 13, 0, 0, 0));
	next_is("0 0 13 * *", at(2026, 11, 1, 0, 0, 0), at(2026, 11, 13, 0, 0, 0));

	/* Macros. */
	next_is("@hourly", t0, at(2026, 11, 30, 3, 0, 0));
	next_is("@daily", t0, at(2026, 12, 1, 0, 0, 0));
	next_is("@midnight", t0, at(2026, 12, 1, 0, 0, 0));
	next_is("@weekly", t0, at(2026, 12, 6, 0, 0, 0));
	next_is("@monthly", t0, at(2026, 12, 1, 0, 0, 0));
	next_is("@yearly", t0, at(2027, 1, 1, 0, 0, 0));
	next_is("@annually", t0, at(2027, 1, 1, 0, 0, 0));
	next_is("@every 2s", t0 + 1, t0 + 2000);
	next_is("@every 2s", t0, t0 + 2000);
	next_is("@every 1m", t0, at(2026, 11, 30, 2, 47, 0));
	next_is("@every 1h30m", at(2026, 1, 1, 0, 0, 0), at(2026, 1, 1, 1, 30, 0));

	{
		int64_t want[6];
		int64_t base = at(2028, 2, 27, 23, 59, 58);

		for (int i = 0; i < 6; i++)
			want[i] = base + (i + 1) * 1000;
		ticks_are("* * * * * *", base, want, 6);
		ticks_are("0 6 28-31 * *", at(2028, 1, 30, 12, 0, 0), (int64_t[]){
			at(2028, 1, 31, 6, 0, 0), at(2028, 2, 28, 6, 0, 0), at(2028, 2, 29, 6, 0, 0),
			at(2028, 3, 28, 6, 0, 0) }, 4);
	}

	/* Refusals name the field. */
	refused("", "expected 5 or 6 fields, got 0");
	refused("* * * *", "expected 5 or 6 fields, got 4");
	refused("* * * * * * *", "expected 5 or 6 fields");
	refused("61 * * * *", "minute field \"61\": 61 is out of range 0-59");
	refused("* 24 * * *", "hour field");
	refused("* * 0 * *", "day-of-month field");
	refused("* * 32 * *", "day-of-month field");
	refused("* * * 13 *", "month field");
	refused("* * * foo *", "month field");
	refused("* * * * 8", "day-of-week field");
	refused("* * * * xyz", "day-of-week field");
	refused("60 * * * * *", "second field");
	refused("*/0 * * * *", "minute field");
	refused("10-5 * * * *", "runs backwards");
	refused("1-x * * * *", "minute field");
	refused("1,,2 * * * *", "minute field");
	refused("5x * * * *", "minute field");
	refused("@often", "unknown macro");
	refused("@daily 5", "@daily takes no fields");
	refused("@every", "@every needs a duration");
	refused("@every soon", "invalid duration");
	refused("@every 500ms", "shorter than 1s");

	test_plans();
	return done_testing();
}
