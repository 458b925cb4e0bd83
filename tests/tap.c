/* tap: counts results, prints "ok N - name" lines and diagnostics. */
#include "tap.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int tap_planned = -1, tap_run, tap_failed;

void plan(int n)
{
	tap_planned = n;
	printf("1..%d\n", n);
	fflush(stdout);
}

static bool report(bool cond, const char *file, int line, const char *fmt, va_list ap)
{
	tap_run++;
	if (!cond)
		tap_failed++;
	printf("%sok %d - ", cond ? "" : "not ", tap_run);
	vprintf(fmt, ap);
	printf("\n");
	if (!cond)
		printf("#   failed at %s line %d\n", file, line);
	fflush(stdout);
	return cond;
}

bool ok_at(bool cond, const char *file, int line, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	report(cond, file, line, fmt, ap);
	va_end(ap);
	return cond;
}

bool is_int_at(int64_t got, int64_t want, const char *file, int line, const char *fmt, ...)
{
	va_list ap;
	bool cond = got == want;

	va_start(ap, fmt);
	report(cond, file, line, fmt, ap);
	va_end(ap);
	if (!cond)
		printf("#          got: %lld\n#     expected: %lld\n", (long long)got, (long long)want);
	return cond;
}

bool is_str_at(const char *got, const char *want, const char *file, int line, const char *fmt, ...)
{
	va_list ap;
	bool cond = (got && want) ? strcmp(got, want) == 0 : got == want;

	va_start(ap, fmt);
	report(cond, file, line, fmt, ap);
	va_end(ap);
	if (!cond)
		printf("#          got: '%s'\n#     expected: '%s'\n", got ? got : "(null)",
		       want ? want : "(null)");
	return cond;
}

void diag(const char *fmt, ...)
{
	va_list ap;

	printf("# ");
	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
	printf("\n");
	fflush(stdout);
}

void skip(int n, const char *why)
{
	for (int i = 0; i < n; i++)
		printf("ok %d # SKIP %s\n", ++tap_run, why);
	fflush(stdout);
}

void bail(const char *fmt, ...)
{
	va_list ap;

	printf("Bail out! ");
	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
	printf("\n");
	fflush(stdout);
	exit(255);
}

int done_testing(void)
{
	if (tap_planned < 0) {
		tap_planned = tap_run;
		printf("1..%d\n", tap_run);
	}
	return exit_status();
}

int exit_status(void)
{
	if (tap_planned >= 0 && tap_run != tap_planned) {
		printf("# planned %d tests but ran %d\n", tap_planned, tap_run);
		return 1;
	}
	return tap_failed ? 1 : 0;
}
