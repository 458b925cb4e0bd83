/* cron: parses cron expressions into bit masks and finds the next tick by
 * walking the calendar in UTC from the largest unit down. It knows nothing
 * of schedules or the store. */
#include "cron.h"

#include <ctype.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#define MAX_YEARS 8

struct field {
	const char *name;
	int min, max;
	const char *const *names; /* names of min.., or NULL */
};

static const char *const month_names[] = {
	"jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec", NULL
};
static const char *const dow_names[] = { "sun", "mon", "tue", "wed", "thu", "fri", "sat", NULL };

enum { F_SEC, F_MIN, F_HOUR, F_DOM, F_MONTH, F_DOW, NFIELDS };

static const struct field fields[NFIELDS] = {
	[F_SEC] = { "second", 0, 59, NULL },
	[F_MIN] = { "minute", 0, 59, NULL },
	[F_HOUR] = { "hour", 0, 23, NULL },
	[F_DOM] = { "day-of-month", 1, 31, NULL },
	[F_MONTH] = { "month", 1, 12, month_names },
	[F_DOW] = { "day-of-week", 0, 7, dow_names }, /* 7 is Sunday too */
};

static int fail(char *err, size_t errlen, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int fail(char *err, size_t errlen, const char *fmt, ...)
{
	va_list ap;

	if (err && errlen) {
		va_start(ap, fmt);
		vsnprintf(err, errlen, fmt, ap);
		va_end(ap);
	}
	return -1;
}

/* Reads a number or a name at *p; advances *p. */
static int value(const struct field *f, const char **p, int *out)
{
	const char *s = *p;

	if (isdigit((unsigned char)*s)) {
		long v = 0;

		while (isdigit((unsigned char)*s)) {
			v = v * 10 + (*s++ - '0');
			if (v > 1000)
				return -1;
		}
		*out = (int)v;
		*p = s;
		return 0;
	}
	if (f->names && isalpha((unsigned char)s[0]) && isalpha((unsigned char)s[1]) &&
	    isalpha((unsigned char)s[2]) && !isalpha((unsigned char)s[3])) {
		for (int i = 0; f->names[i]; i++) {
			if (!strncasecmp(s, f->names[i], 3)) {
				*out = f->min + i;
				*p = s + 3;
				return 0;
			}
		}
	}
	return -1;
}

/* Parses one field (text of len bytes) into a mask. */
static int parse_field(int idx, const char *text, size_t len, uint64_t *mask, char *err, size_t errlen)
{
	const struct field *f = &fields[idx];
	char buf[CRON_MAX_LEN + 1], *item, *save = NULL;

	*mask = 0;
	memcpy(buf, text, len);
	buf[len] = '\0';
	if (buf[0] == ',' || buf[len - 1] == ',' || strstr(buf, ",,"))
		return fail(err, errlen, "%s field \"%s\": empty list item", f->name, buf);
	for (item = strtok_r(buf, ",", &save); item; item = strtok_r(NULL, ",", &save)) {
		const char *p = item;
		int lo, hi, step = 1;

		if (*p == '*') {
			lo = f->min;
			hi = idx == F_DOW ? 6 : f->max;
			p++;
		} else {
			if (value(f, &p, &lo) < 0)
				return fail(err, errlen, "%s field \"%.*s\": \"%s\" is not a %s", f->name,
					    (int)len, text, item, f->names ? "number or name" : "number");
			hi = lo;
			if (*p == '-') {
				p++;
				if (value(f, &p, &hi) < 0)
					return fail(err, errlen, "%s field \"%.*s\": \"%s\" is not a valid range",
						    f->name, (int)len, text, item);
			} else if (*p == '/') {
				hi = idx == F_DOW ? 6 : f->max;
			}
			if (lo < f->min || lo > f->max || hi < f->min || hi > f->max)
				return fail(err, errlen, "%s field \"%.*s\": %d is out of range %d-%d",
					    f->name, (int)len, text, lo < f->min || lo > f->max ? lo : hi,
					    f->min, f->max);
			if (hi < lo)
				return fail(err, errlen, "%s field \"%.*s\": range %d-%d runs backwards",
					    f->name, (int)len, text, lo, hi);
		}
		if (*p == '/') {
			p++;
			if (value(&(struct field){ f->name, 0, 0, NULL }, &p, &step) < 0 || step < 1)
				return fail(err, errlen, "%s field \"%.*s\": the step in \"%s\" must be a positive number",
					    f->name, (int)len, text, item);
		}
		if (*p)
			return fail(err, errlen, "%s field \"%.*s\": unexpected \"%s\"", f->name, (int)len,
				    text, p);
		for (int v = lo; v <= hi; v += step)
			*mask |= UINT64_C(1) << (idx == F_DOW && v == 7 ? 0 : v);
	}
	if (!*mask)
		return fail(err, errlen, "%s field \"%.*s\" is empty", f->name, (int)len, text);
	return 0;
}

static const struct { const char *name; const char *expr; } macros[] = {
	{ "@yearly", "0 0 1 1 *" }, { "@annually", "0 0 1 1 *" }, { "@monthly", "0 0 1 * *" },
	{ "@weekly", "0 0 * * 0" }, { "@daily", "0 0 * * *" }, { "@midnight", "0 0 * * *" },
	{ "@hourly", "0 * * * *" },
};

int cron_parse(const char *s, struct cron *c, char *err, size_t errlen)
{
	const char *start[NFIELDS], *p;
	size_t len[NFIELDS];
	uint64_t masks[NFIELDS];
	int n = 0, first;

	memset(c, 0, sizeof(*c));
	if (!s)
		return fail(err, errlen, "empty cron expression");
	while (isspace((unsigned char)*s))
		s++;
	if (strlen(s) > CRON_MAX_LEN)
		return fail(err, errlen, "cron expression is longer than %d bytes", CRON_MAX_LEN);
	if (!strncmp(s, "@every", 6) && (isspace((unsigned char)s[6]) || !s[6])) {
		char dur[64];
		size_t dl;

		p = s + 6;
		while (isspace((unsigned char)*p))
			p++;
		dl = strlen(p);
		while (dl && isspace((unsigned char)p[dl - 1]))
			dl--;
		if (!dl || dl >= sizeof(dur))
			return fail(err, errlen, "@every needs a duration such as \"30s\" or \"5m\"");
		memcpy(dur, p, dl);
		dur[dl] = '\0';
		if (duration_parse(dur, &c->every_ms) < 0)
			return fail(err, errlen, "@every: invalid duration \"%s\"", dur);
		if (c->every_ms < 1000)
			return fail(err, errlen, "@every: duration \"%s\" is shorter than 1s", dur);
		return 0;
	}
	if (*s == '@') {
		size_t ml = strcspn(s, " \t\r\n");

		for (size_t i = 0; i < sizeof(macros) / sizeof(macros[0]); i++) {
			if (strlen(macros[i].name) == ml && !strncasecmp(s, macros[i].name, ml)) {
				for (p = s + ml; isspace((unsigned char)*p); p++)
					;
				if (*p)
					return fail(err, errlen, "%s takes no fields", macros[i].name);
				return cron_parse(macros[i].expr, c, err, errlen);
			}
		}
		return fail(err, errlen, "unknown macro \"%.*s\" (expected @hourly, @daily, @weekly, "
			    "@monthly, @yearly or @every DURATION)", (int)(ml > 32 ? 32 : ml), s);
	}
	for (p = s; *p;) {
		while (isspace((unsigned char)*p))
			p++;
		if (!*p)
			break;
		if (n == NFIELDS)
			return fail(err, errlen, "expected 5 or 6 fields, got more");
		start[n] = p;
		while (*p && !isspace((unsigned char)*p))
			p++;
		len[n] = (size_t)(p - start[n]);
		n++;
	}
	if (n != 5 && n != 6)
		return fail(err, errlen, "expected 5 or 6 fields, got %d", n);
	first = n == 6 ? F_SEC : F_MIN;
	masks[F_SEC] = 1;
	for (int i = first; i < NFIELDS; i++) {
		int k = i - first;

		if (parse_field(i, start[k], len[k], &masks[i], err, errlen) < 0)
			return -1;
	}
	c->sec = masks[F_SEC];
	c->min = masks[F_MIN];
	c->hour = (uint32_t)masks[F_HOUR];
	c->dom = (uint32_t)masks[F_DOM];
	c->month = (uint16_t)masks[F_MONTH];
	c->dow = (uint8_t)masks[F_DOW];
	c->dom_any = start[F_DOM - first][0] == '*';
	c->dow_any = start[F_DOW - first][0] == '*';
	return 0;
}

static bool day_matches(const struct cron *c, const struct tm *tm)
{
	bool dom = c->dom & (UINT32_C(1) << tm->tm_mday);
	bool dow = c->dow & (1u << tm->tm_wday);

	if (c->dom_any || c->dow_any)
		return dom && dow;
	return dom || dow;
}

int64_t cron_next(const struct cron *c, int64_t after_ms)
{
	struct tm tm;
	time_t t;
	int64_t secs;
	int limit_year;

	if (c->every_ms > 0) {
		int64_t q = after_ms / c->every_ms;

		if (after_ms < 0 && after_ms % c->every_ms)
			q--;
		return (q + 1) * c->every_ms;
	}
	/* The first whole second after after_ms. */
	secs = after_ms >= 0 ? after_ms / 1000 + 1 : -((-after_ms) / 1000) + ((-after_ms) % 1000 ? 0 : 1);
	t = (time_t)secs;
	if (!gmtime_r(&t, &tm))
		return -1;
	limit_year = tm.tm_year + MAX_YEARS;
	while (tm.tm_year <= limit_year) {
		if (!(c->month & (1u << (tm.tm_mon + 1)))) {
			tm.tm_mon++;
			tm.tm_mday = 1;
			tm.tm_hour = tm.tm_min = tm.tm_sec = 0;
		} else if (!day_matches(c, &tm)) {
			tm.tm_mday++;
			tm.tm_hour = tm.tm_min = tm.tm_sec = 0;
		} else if (!(c->hour & (UINT32_C(1) << tm.tm_hour))) {
			tm.tm_hour++;
			tm.tm_min = tm.tm_sec = 0;
		} else if (!(c->min & (UINT64_C(1) << tm.tm_min))) {
			tm.tm_min++;
			tm.tm_sec = 0;
		} else if (!(c->sec & (UINT64_C(1) << tm.tm_sec))) {
			tm.tm_sec++;
		} else {
			return (int64_t)timegm(&tm) * 1000;
		}
		/* Normalizes overflowed fields and recomputes the weekday. */
		t = timegm(&tm);
		if (t == (time_t)-1 || !gmtime_r(&t, &tm))
			return -1;
	}
	return -1;
}
