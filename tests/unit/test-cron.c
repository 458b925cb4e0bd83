/* test-cron: cron expressions in UTC: next ticks for known expressions,
 * month ends, leap years, day-of-month / day-of-week OR semantics, names,
 * steps, macros, @every, and bad expressions refused with the field named. */
#include "../tap.h"
#include "../../engine/cron.h"

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
	return done_testing();
}
