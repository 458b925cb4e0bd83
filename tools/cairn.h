/* cairn.h: what the cairn CLI's commands share: global options, the
 * command table entry, exit codes, and helpers for talking to cairnd and
 * to PostgreSQL. Commands live in tools/cmd_*.c and tools/dev.c. */
#ifndef CAIRN_CLI_H
#define CAIRN_CLI_H

#include <getopt.h>
#include <stdbool.h>
#include <jansson.h>
#include <libpq-fe.h>

#include "util.h"

/* Exit codes: what the shell sees. */
enum {
	EXIT_OK = 0,
	EXIT_RUN_FAILED = 1, /* run ended failed or cancelled */
	EXIT_USAGE = 2,
	EXIT_NOT_FOUND = 3,
	EXIT_CONFLICT = 4,
	EXIT_INVALID = 5,
	EXIT_AUTH = 6,	      /* unauthorized or forbidden */
	EXIT_UNREACHABLE = 7, /* server unreachable or unavailable */
	EXIT_OTHER = 8,
};

#define DEFAULT_URL "http://127.0.0.1:8787"

/* Global options (flags win over CAIRN_* variables, which win over .cairn/env). */
struct cairn {
	const char *url;   /* --url, borrowed from argv, or NULL */
	const char *token; /* --token, borrowed from argv, or NULL */
	bool json;	   /* --json */
	char exe_dir[4096]; /* folder of the running cairn binary, or "" */
};

struct cmd;
typedef int (*cmd_fn)(struct cairn *cn, const struct cmd *self, int argc, char **argv);

/* One entry of the command table. name may hold two words ("db migrate"). */
struct cmd {
	const char *name;
	cmd_fn handler;
	const char *usage;   /* arguments after the name */
	const char *summary; /* one line for `cairn help` */
};

/* Options every command accepts; append to a command's option table. */
enum { OPT_URL = 0x100, OPT_TOKEN, OPT_JSON };
#define COMMON_LONGOPTS                                  \
	{ "url", required_argument, NULL, OPT_URL },     \
	{ "token", required_argument, NULL, OPT_TOKEN }, \
	{ "json", no_argument, NULL, OPT_JSON },         \
	{ "help", no_argument, NULL, 'h' }

/* The default: branch of a command's getopt switch. */
#define COMMON_OPT_CASES                                                                 \
	default:                                                                         \
		switch (common_opt(cn, self, opt)) {                                     \
		case 0:                                                                  \
			break;                                                           \
		case 1:                                                                  \
			return EXIT_OK;                                                  \
		default:                                                                 \
			return usage_error(self, "unknown option or missing value \"%s\"", \
					   argv[optind - 1]);                            \
		}                                                                        \
		break

/* Handles one of COMMON_LONGOPTS or an unknown option. Returns -1 when
 * getopt's result was not a common option (the caller reports usage),
 * 1 when the command's help was asked for (printed; exit 0), else 0. */
int common_opt(struct cairn *cn, const struct cmd *self, int c);
/* Prints "cairn: <message>" and the command's usage to stderr; returns EXIT_USAGE. */
int usage_error(const struct cmd *self, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void print_usage(const struct cmd *self, FILE *out);

/* Prints "cairn: <message>" to stderr; returns code. */
int fail(int code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Value of a setting (e.g. "CAIRN_DATABASE_URL"): the environment, else
 * the nearest .cairn/env in the current folder or its parents. Borrowed,
 * valid until exit; NULL when unset. */
const char *cairn_setting(const char *name);

/* Performs one API request against the configured server. On a 2xx reply
 * returns EXIT_OK and, when out is not NULL, the parsed body in *out (new
 * reference; caller decrefs). Otherwise prints the server's error (message
 * and details) and returns the matching exit code. */
int api_call(struct cairn *cn, const char *method, const char *path, json_t *body,
	     const char *extra_header, int wait_s, json_t **out) WARN_UNUSED;

/* Prints a JSON value to stdout, indented, with a newline. */
void print_json(const json_t *v);
/* "2026-01-02T03:04:05.678+00:00" -> "2026-01-02 03:04:05" into out. */
void format_time(const char *iso, char *out, size_t outlen);
/* Parses --input/--data values: inline JSON, or @FILE ("@-" for stdin).
 * Returns new, or NULL after printing a message. */
json_t *parse_json_arg(const char *arg, const char *what);

/* Finds program name next to the cairn binary, in the build tree's other
 * folders (engine/, worker/), then on PATH. Returns new (caller frees) or NULL. */
char *find_program(const struct cairn *cn, const char *name);
/* Connects with libpq to dsn (CAIRN_DATABASE_URL when NULL). Returns
 * EXIT_OK and the connection, or prints why and returns an exit code. */
int db_connect(const char *dsn, PGconn **out) WARN_UNUSED;

/* Handlers. */
int cmd_submit(struct cairn *cn, const struct cmd *self, int argc, char **argv);
int cmd_runs(struct cairn *cn, const struct cmd *self, int argc, char **argv);
int cmd_status(struct cairn *cn, const struct cmd *self, int argc, char **argv);
int cmd_watch(struct cairn *cn, const struct cmd *self, int argc, char **argv);
int cmd_logs(struct cairn *cn, const struct cmd *self, int argc, char **argv);
int cmd_history(struct cairn *cn, const struct cmd *self, int argc, char **argv);
int cmd_approve(struct cairn *cn, const struct cmd *self, int argc, char **argv);
int cmd_reject(struct cairn *cn, const struct cmd *self, int argc, char **argv);
int cmd_signal(struct cairn *cn, const struct cmd *self, int argc, char **argv);
int cmd_cancel(struct cairn *cn, const struct cmd *self, int argc, char **argv);
int cmd_retry(struct cairn *cn, const struct cmd *self, int argc, char **argv);
int cmd_fork(struct cairn *cn, const struct cmd *self, int argc, char **argv);
int cmd_sandbox(struct cairn *cn, const struct cmd *self, int argc, char **argv);
int cmd_token_create(struct cairn *cn, const struct cmd *self, int argc, char **argv);
int cmd_db_migrate(struct cairn *cn, const struct cmd *self, int argc, char **argv);
int cmd_dev_up(struct cairn *cn, const struct cmd *self, int argc, char **argv);
int cmd_dev_down(struct cairn *cn, const struct cmd *self, int argc, char **argv);

/* Follows a run's events until it ends (shared by watch and submit
 * --watch/--wait). quiet prints nothing per event. Returns EXIT_OK when
 * the run succeeded, EXIT_RUN_FAILED when it failed or was cancelled. */
int watch_run(struct cairn *cn, const char *run_id, bool quiet);

#endif
