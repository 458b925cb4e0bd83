/* log: formats records as "time prog[pid] level: message" on stderr.
 * It owns no state beyond the program name and the threshold. */
#include "log.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

static const char *log_prog = "cairn";
static enum log_level log_min = LOG_INFO;
static const char *const level_names[] = { "debug", "info", "warn", "error" };

void log_init(const char *progname, enum log_level min)
{
	log_prog = progname;
	log_min = min;
}

int log_level_parse(const char *s)
{
	for (int i = 0; i < 4; i++)
		if (strcmp(s, level_names[i]) == 0)
			return i;
	return -1;
}

static void log_vmsg(enum log_level lvl, const char *fmt, va_list ap)
{
	char msg[2048], stamp[32];
	struct timeval tv;
	struct tm tm;
	int saved = errno;

	if (lvl < log_min)
		return;
	gettimeofday(&tv, NULL);
	gmtime_r(&tv.tv_sec, &tm);
	strftime(stamp, sizeof(stamp), "%Y-%m-%dT%H:%M:%S", &tm);
	errno = saved;
	vsnprintf(msg, sizeof(msg), fmt, ap);
	fprintf(stderr, "%s.%03dZ %s[%d] %s: %s\n", stamp, (int)(tv.tv_usec / 1000),
		log_prog, (int)getpid(), level_names[lvl], msg);
	errno = saved;
}

void log_msg(enum log_level lvl, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	log_vmsg(lvl, fmt, ap);
	va_end(ap);
}

int error(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	log_vmsg(LOG_ERROR, fmt, ap);
	va_end(ap);
	return -1;
}

void die(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	log_vmsg(LOG_ERROR, fmt, ap);
	va_end(ap);
	exit(1);
}
