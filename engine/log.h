/* log: leveled, single-line log records to stderr. Never logs secrets:
 * callers pass only what may be read by anyone with the log. */
#ifndef CAIRN_LOG_H
#define CAIRN_LOG_H

#include <stdbool.h>

enum log_level { LOG_DEBUG, LOG_INFO, LOG_WARN, LOG_ERROR };

/* Set the program name shown in each record and the minimum level. */
void log_init(const char *progname, enum log_level min);
/* Parse "debug", "info", "warn" or "error"; returns -1 if unknown. */
int log_level_parse(const char *s);

void log_msg(enum log_level lvl, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
#define log_debug(...) log_msg(LOG_DEBUG, __VA_ARGS__)
#define log_info(...) log_msg(LOG_INFO, __VA_ARGS__)
#define log_warn(...) log_msg(LOG_WARN, __VA_ARGS__)
#define log_error(...) log_msg(LOG_ERROR, __VA_ARGS__)

/* Log at error level and return -1, for "return error(...)" call sites. */
int error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* For main() layers only: log and exit(1). */
void die(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));

#endif
