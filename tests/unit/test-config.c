/* test-config: the declarative option table: defaults, CAIRN_* variables,
 * flags and their precedence, limits, choices, --help and --show-config. */
#include "../tap.h"
#include "../../engine/config.h"

#include <stdio.h>

#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static struct {
	char *url;
	char *listen;
	int64_t max_body;
	int64_t lease;
	int64_t n;
	bool no_auth;
	char *level;
} c;

static const struct config_opt opts[] = {
	{ .name = "database-url", .type = CONFIG_STRING, .dst = &c.url,
	  .flags = CONFIG_REQUIRED | CONFIG_SECRET, .help = "store" },
	{ .name = "listen", .type = CONFIG_STRING, .dst = &c.listen, .def = "127.0.0.1:8787", .help = "bind" },
	{ .name = "max-body", .type = CONFIG_SIZE, .dst = &c.max_body, .def = "1M", .min = 1024,
	  .max = 1 << 24, .help = "body" },
	{ .name = "lease", .type = CONFIG_DURATION, .dst = &c.lease, .def = "30s", .min = 100,
	  .max = 3600000, .help = "lease" },
	{ .name = "concurrency", .type = CONFIG_INT, .dst = &c.n, .def = "4", .min = 1, .max = 64,
	  .help = "n" },
	{ .name = "no-auth", .type = CONFIG_BOOL, .dst = &c.no_auth, .help = "no auth" },
	{ .name = "log-level", .type = CONFIG_STRING, .dst = &c.level, .def = "info",
	  .choices = "debug,info,warn,error", .help = "level" },
	{ .name = NULL }
};

/* Loads with argv (NULL-terminated) and stdout/stderr silenced. */
static int load(const char *const *args)
{
	char *argv[32];
	int argc = 0, out = dup(1), err = dup(2), null = open("/dev/null", O_WRONLY);
	int r;

	argv[argc++] = "prog";
	while (args && *args && argc < 31)
		argv[argc++] = (char *)*args++;
	argv[argc] = NULL;
	fflush(stdout);
	dup2(null, 1);
	dup2(null, 2);
	r = config_load(opts, "prog", "a test", argc, argv);
	fflush(stdout);
	dup2(out, 1);
	dup2(err, 2);
	close(out);
	close(err);
	close(null);
	return r;
}

int main(void)
{
	char *shown = NULL;
	size_t len = 0;
	FILE *f;

	unsetenv("CAIRN_DATABASE_URL");
	unsetenv("CAIRN_LISTEN");
	unsetenv("CAIRN_MAX_BODY");
	unsetenv("CAIRN_LEASE");
	unsetenv("CAIRN_NO_AUTH");

	is_int(load((const char *[]){ "--database-url", "x", NULL }), CONFIG_OK, "defaults load");
	is_str(c.listen, "127.0.0.1:8787", "string default");
	is_int(c.max_body, 1 << 20, "size default 1M");
	is_int(c.lease, 30000, "duration default in ms");
	is_int(c.n, 4, "int default");
	ok(!c.no_auth, "bool default false");

	is_int(load(NULL), CONFIG_USAGE, "a required option missing is a usage error");

	setenv("CAIRN_DATABASE_URL", "from-env", 1);
	setenv("CAIRN_LEASE", "2m", 1);
	setenv("CAIRN_NO_AUTH", "yes", 1);
	is_int(load(NULL), CONFIG_OK, "variables satisfy a required option");
	is_str(c.url, "from-env", "CAIRN_DATABASE_URL sets --database-url");
	is_int(c.lease, 120000, "CAIRN_LEASE sets --lease");
	ok(c.no_auth, "CAIRN_NO_AUTH=yes sets a bool");
	is_int(load((const char *[]){ "--database-url=flag", "--lease", "5s", "--max-body=64k", NULL }),
	       CONFIG_OK, "flags in both forms");
	is_str(c.url, "flag", "a flag wins over the variable");
	is_int(c.lease, 5000, "--lease 5s");
	is_int(c.max_body, 65536, "--max-body=64k");
	is_int(load((const char *[]){ "--no-auth=false", NULL }), CONFIG_OK, "--no-auth=false");
	ok(!c.no_auth, "an explicit false wins over the variable");
	unsetenv("CAIRN_NO_AUTH");
	unsetenv("CAIRN_LEASE");

	is_int(load((const char *[]){ "--lease", "50ms", NULL }), CONFIG_USAGE, "below the minimum");
	is_int(load((const char *[]){ "--max-body", "1G", NULL }), CONFIG_USAGE, "above the maximum");
	is_int(load((const char *[]){ "--concurrency", "4x", NULL }), CONFIG_USAGE, "not an integer");
	is_int(load((const char *[]){ "--lease", "soon", NULL }), CONFIG_USAGE, "not a duration");
	is_int(load((const char *[]){ "--log-level", "loud", NULL }), CONFIG_USAGE, "not among the choices");
	is_int(load((const char *[]){ "--log-level", "debug", NULL }), CONFIG_OK, "among the choices");
	is_int(load((const char *[]){ "--bogus", NULL }), CONFIG_USAGE, "an unknown option");
	is_int(load((const char *[]){ "stray", NULL }), CONFIG_USAGE, "a positional argument");
	is_int(load((const char *[]){ "--listen", NULL }), CONFIG_USAGE, "a value missing at the end");
	setenv("CAIRN_CONCURRENCY", "0", 1);
	is_int(load(NULL), CONFIG_USAGE, "a bad variable is a usage error too");
	unsetenv("CAIRN_CONCURRENCY");
	is_int(load((const char *[]){ "--help", NULL }), CONFIG_EXIT, "--help exits");
	is_int(load((const char *[]){ "--show-config", NULL }), CONFIG_EXIT, "--show-config exits");

	is_int(load((const char *[]){ "--database-url", "postgres://u:secret@h/db", NULL }), CONFIG_OK,
	       "load for show");
	f = open_memstream(&shown, &len);
	config_show(opts, f);
	fclose(f);
	ok(strstr(shown, "database-url = (set)\n") != NULL, "show masks secrets");
	ok(strstr(shown, "secret") == NULL, "the secret is not printed");
	ok(strstr(shown, "lease = 30s\n") != NULL, "show formats durations");
	ok(strstr(shown, "max-body = 1048576\n") != NULL, "show prints sizes in bytes");
	free(shown);
	shown = NULL;
	f = open_memstream(&shown, &len);
	config_usage(opts, "prog", "a test", f);
	fclose(f);
	ok(strstr(shown, "$CAIRN_MAX_BODY") != NULL, "help names each variable");
	ok(strstr(shown, "[default: 30s]") != NULL, "help shows defaults");
	free(shown);

	config_release(opts);
	ok(c.url == NULL && c.listen == NULL, "release frees and clears strings");
	return done_testing();
}
