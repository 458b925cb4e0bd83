/* config: one declarative table of options per program. The table drives
 * parsing (defaults, then CAIRN_* environment variables, then flags),
 * --help and --show-config.
 *
 * A program declares its table once:
 *
 *	static struct { char *database_url; int64_t max_body; bool no_auth; } conf;
 *	static const struct config_opt opts[] = {
 *		{ .name = "database-url", .type = CONFIG_STRING, .dst = &conf.database_url,
 *		  .flags = CONFIG_SECRET, .metavar = "URL", .help = "PostgreSQL connection string" },
 *		{ .name = "max-body", .type = CONFIG_SIZE, .dst = &conf.max_body,
 *		  .def = "1M", .min = 1, .max = 64 << 20, .help = "largest request body" },
 *		{ .name = "no-auth", .type = CONFIG_BOOL, .dst = &conf.no_auth,
 *		  .help = "accept requests without a token (loopback only)" },
 *		{ .name = NULL }
 *	};
 *
 * and in main():
 *
 *	switch (config_load(opts, "cairnd", "the engine daemon", argc, argv)) {
 *	case CONFIG_EXIT: return 0;        // --help or --show-config printed
 *	case CONFIG_USAGE: return 2;       // message already printed to stderr
 *	}
 *	...
 *	config_release(opts);              // frees the strings it stored
 *
 * Option "max-body" is set by --max-body N, --max-body=N or the environment
 * variable CAIRN_MAX_BODY; the flag wins over the environment, which wins
 * over the default. A CONFIG_BOOL flag takes no value (--no-auth); its
 * variable accepts 1/0, true/false, yes/no, on/off.
 *
 * Outside engine/, include it as "../engine/config.h": a bare "config.h"
 * finds autoconf's header first. */
#ifndef CAIRN_CONFIG_H
#define CAIRN_CONFIG_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

enum config_type {
	CONFIG_STRING,   /* dst is char **: new string, or NULL when unset */
	CONFIG_INT,      /* dst is int64_t * */
	CONFIG_BOOL,     /* dst is bool * */
	CONFIG_DURATION, /* dst is int64_t *, milliseconds ("250ms", "30s", "1h") */
	CONFIG_SIZE,     /* dst is int64_t *, bytes ("64k", "1M", "1048576") */
};

enum config_flags {
	CONFIG_SECRET = 1 << 0,  /* --show-config prints "(set)" instead of the value */
	CONFIG_RELOADS = 1 << 1, /* may change without a restart (shown in --help) */
	CONFIG_REQUIRED = 1 << 2 /* loading fails when no default, variable or flag sets it */
};

struct config_opt {
	const char *name;      /* flag without "--"; the variable is CAIRN_ + upper case, '-' -> '_' */
	enum config_type type;
	void *dst;             /* borrowed; typed as listed in enum config_type; must start
	                        * zeroed (static storage), strings are freed on reload */
	const char *def;       /* default, written as on the command line; NULL: unset (0/false/NULL) */
	int64_t min, max;      /* inclusive limits for INT, DURATION, SIZE; both 0: none */
	const char *choices;   /* STRING only: allowed values, comma-separated; NULL: any */
	unsigned flags;        /* enum config_flags */
	const char *metavar;   /* shown in --help ("URL", "N"); NULL: derived from type */
	const char *help;      /* one line */
};

enum config_result {
	CONFIG_OK = 0,     /* run the program */
	CONFIG_EXIT = 1,   /* --help or --show-config was printed to stdout: exit 0 */
	CONFIG_USAGE = -1, /* a bad flag or value was reported on stderr: exit 2 */
};

/* Fills every dst from the defaults, the environment and argv (in that
 * order of increasing precedence). Positional arguments are refused.
 * progname and summary are shown by --help. Always call config_release
 * afterwards, whatever the result. */
enum config_result config_load(const struct config_opt *opts, const char *progname,
			       const char *summary, int argc, char **argv)
	__attribute__((warn_unused_result));

/* Prints the option list (as --help does) to out. */
void config_usage(const struct config_opt *opts, const char *progname, const char *summary,
		  FILE *out);

/* Prints every option as "name = value" (secrets masked), as --show-config does. */
void config_show(const struct config_opt *opts, FILE *out);

/* Frees the strings config_load stored in CONFIG_STRING destinations and
 * sets them to NULL. */
void config_release(const struct config_opt *opts);

#endif
