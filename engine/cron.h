/* cron: schedule expressions, always in UTC. Five fields (minute hour
 * day-of-month month day-of-week) or six with a leading seconds field;
 * "*", lists, ranges, steps ("*\/5", "1-10/2"), month and weekday names,
 * the macros @hourly @daily @weekly @monthly @yearly (@annually, @midnight)
 * and "@every DURATION" (at least 1s, ticks at multiples of DURATION since
 * the Unix epoch). When both day fields are restricted (neither starts
 * with "*"), a day matches either one, as in Vixie cron. Pure functions:
 * no I/O, no time zones. */
#ifndef CAIRN_CRON_H
#define CAIRN_CRON_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "util.h"

#define CRON_MAX_LEN 256

/* A parsed expression; bit i of each mask is set when value i matches. */
struct cron {
	uint64_t sec, min;   /* 0-59 */
	uint32_t hour;       /* 0-23 */
	uint32_t dom;        /* 1-31 */
	uint16_t month;      /* 1-12 */
	uint8_t dow;         /* 0-6, Sunday is 0 */
	bool dom_any, dow_any; /* the field starts with "*" */
	int64_t every_ms;    /* > 0 for "@every" */
};

/* Parses s into *c. On failure returns -1 with a message naming the field
 * in err (e.g. `minute field "61": 61 is out of range 0-59`). */
int cron_parse(const char *s, struct cron *c, char *err, size_t errlen) WARN_UNUSED;

/* The first tick strictly after after_ms (Unix ms, UTC), or -1 when there
 * is none in the next eight years (e.g. "0 0 30 2 *"). */
int64_t cron_next(const struct cron *c, int64_t after_ms);

#endif
