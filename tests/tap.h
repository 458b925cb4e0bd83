/* tap: the Test Anything Protocol for C unit tests, in-house and tiny. */
#ifndef CAIRN_TAP_H
#define CAIRN_TAP_H

#include <stdbool.h>
#include <stdint.h>

void plan(int n);
/* Ends a test without a plan given up front ("1..N" printed at the end). */
int done_testing(void);
bool ok_at(bool cond, const char *file, int line, const char *fmt, ...) __attribute__((format(printf, 4, 5)));
bool is_int_at(int64_t got, int64_t want, const char *file, int line, const char *fmt, ...) __attribute__((format(printf, 5, 6)));
bool is_str_at(const char *got, const char *want, const char *file, int line, const char *fmt, ...) __attribute__((format(printf, 5, 6)));
void diag(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void skip(int n, const char *why);
void bail(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
/* Exit status for main(): 0 when every planned test ran and passed. */
int exit_status(void);

#define ok(cond, ...) ok_at(!!(cond), __FILE__, __LINE__, __VA_ARGS__)
#define is_int(got, want, ...) is_int_at((got), (want), __FILE__, __LINE__, __VA_ARGS__)
#define is_str(got, want, ...) is_str_at((got), (want), __FILE__, __LINE__, __VA_ARGS__)

#endif
