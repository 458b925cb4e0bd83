/* cairn: the command-line client. main() parses the global options, finds
 * the command in the table and runs its handler; this file also holds the
 * helpers the commands share (settings, API calls, error reporting). It
 * does no work of its own beyond that. */
#include "config.h"
#include "cairn.h"
#include "client.h"
#include "cmd_workflow.h"

#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int cmd_version(struct cairn *cn, const struct cmd *self, int argc, char **argv);
static int cmd_help(struct cairn *cn, const struct cmd *self, int argc, char **argv);

static const struct cmd commands[] = {
	{ "submit", cmd_submit,
	  "FILE|--workflow NAME [--version N] [--input JSON|@FILE] [--idempotency-key KEY] "
	  "[--wait|--watch] [--json]",
	  "submit a workflow definition (or a stored one, by name) as a new run" },
	{ "runs", cmd_runs, "[--status S] [--workflow W] [--limit N] [--after CURSOR] [--json]",
	  "list runs, newest first" },
	{ "status", cmd_status, "RUN [--json]", "show a run and its steps" },
	{ "watch", cmd_watch, "RUN [--json]", "follow a run's events until it ends" },
	{ "logs", cmd_logs, "RUN [--step STEP] [--attempt N] [--json]", "print the output of a run's steps" },
	{ "history", cmd_history, "RUN [--json]", "list every event of a run" },
	{ "approve", cmd_approve, "RUN STEP [--comment TEXT]", "grant an approval step" },
	{ "reject", cmd_reject, "RUN STEP [--comment TEXT]", "reject an approval step" },
	{ "signal", cmd_signal, "RUN NAME [--data JSON|@FILE]", "send a signal to a run" },
	{ "cancel", cmd_cancel, "RUN [--reason TEXT]", "cancel a run" },
	{ "retry", cmd_retry, "RUN [--watch]",
	  "run a failed or cancelled run again from the steps that did not succeed" },
	{ "fork", cmd_fork, "RUN --from STEP [--definition FILE] [--watch] [--json]",
	  "start a new run from STEP on, reusing the outputs of what came before" },
	{ "workflow put", cmd_workflow_put, "NAME FILE [--json]",
	  "store FILE as the next version of workflow NAME; prints the version" },
	{ "workflow get", cmd_workflow_get, "NAME [--version N] [--json]",
	  "print a stored workflow definition (the latest version by default)" },
	{ "workflow list", cmd_workflow_list, "[--json]", "list stored workflows, latest versions" },
	{ "schedule add", cmd_schedule_add,
	  "NAME CRON FILE|--workflow NAME [--version N] [--input JSON|@FILE] "
	  "[--catch-up skip|one|all] [--json]",
	  "start a run on a cron expression (creates or replaces the schedule)" },
	{ "schedule list", cmd_schedule_list, "[--json]", "list schedules and their next ticks" },
	{ "schedule rm", cmd_schedule_rm, "NAME", "delete a schedule" },
	{ "sandbox", cmd_sandbox, "[OPTIONS] -- COMMAND [ARG...]", "run a command in a step's sandbox" },
	{ "token create", cmd_token_create, "NAME --roles ROLE[,ROLE...]",
	  "create an API token (roles: submit, approve, read, admin)" },
	{ "db migrate", cmd_db_migrate, "", "apply pending schema migrations" },
	{ "dev up", cmd_dev_up, "[--dir DIR] [--port PORT]",
	  "start a private PostgreSQL, cairnd and a worker in .cairn/" },
	{ "dev down", cmd_dev_down, "[--dir DIR]", "stop what `cairn dev up` started" },
	{ "version", cmd_version, "", "print the version" },
	{ "help", cmd_help, "[COMMAND]", "show this help, or a command's" },
};
#define NCOMMANDS (sizeof(commands) / sizeof(commands[0]))

int fail(int code, const char *fmt, ...)
{
	va_list ap;

	fputs("cairn: ", stderr);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	return code;
}

void print_usage(const struct cmd *self, FILE *out)
{
	fprintf(out, "usage: cairn %s%s%s\n", self->name, *self->usage ? " " : "", self->usage);
}

int usage_error(const struct cmd *self, const char *fmt, ...)
{
	va_list ap;

	fputs("cairn: ", stderr);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	print_usage(self, stderr);
	return EXIT_USAGE;
}

int common_opt(struct cairn *cn, const struct cmd *self, int c)
{
	switch (c) {
	case OPT_URL:
		cn->url = optarg;
		return 0;
	case OPT_TOKEN:
		cn->token = optarg;
		return 0;
	case OPT_JSON:
		cn->json = true;
		return 0;
	case 'h':
		print_usage(self, stdout);
		printf("%s\n", self->summary);
		return 1;
	default:
		return -1;
	}
}

/* Settings read from the nearest .cairn/env, loaded once. */
static struct {
	bool loaded;
	char *names[8];
	char *values[8];
	int n;
} envfile;

/* Parses KEY=VALUE or KEY='VALUE' lines of path into envfile. */
static void envfile_parse(const char *path)
{
	char *text = NULL, *line, *save = NULL;
	size_t len;

	if (read_file_max(path, 64 << 10, &text, &len) < 0)
		return;
	for (line = strtok_r(text, "\n", &save); line && envfile.n < 8;
	     line = strtok_r(NULL, "\n", &save)) {
		char *eq = strchr(line, '='), *v;
		size_t vlen;

		if (line[0] == '#' || !eq)
			continue;
		*eq = '\0';
		if (strncmp(line, "export ", 7) == 0)
			line += 7;
		v = eq + 1;
		vlen = strlen(v);
		if (vlen >= 2 && v[0] == '\'' && v[vlen - 1] == '\'') {
			v[vlen - 1] = '\0';
			v++;
		}
		envfile.names[envfile.n] = xstrdup(line);
		envfile.values[envfile.n] = xstrdup(v);
		envfile.n++;
	}
	free(text);
}

static void envfile_load(void)
{
	char dir[PATH_MAX], path[PATH_MAX + 16];

	envfile.loaded = true;
	if (!getcwd(dir, sizeof(dir)))
		return;
	for (;;) {
		char *slash;

		snprintf(path, sizeof(path), "%s/.cairn/env", strcmp(dir, "/") ? dir : "");
		if (access(path, R_OK) == 0) {
			envfile_parse(path);
			return;
		}
		slash = strrchr(dir, '/');
		if (!slash || slash == dir)
			break;
		*slash = '\0';
	}
	if (access("/.cairn/env", R_OK) == 0)
		envfile_parse("/.cairn/env");
}

static void envfile_release(void)
{
	for (int i = 0; i < envfile.n; i++) {
		free(envfile.names[i]);
		free(envfile.values[i]);
	}
	envfile.n = 0;
}

const char *cairn_setting(const char *name)
{
	const char *v = getenv(name);

	if (v && *v)
		return v;
	if (!envfile.loaded)
		envfile_load();
	for (int i = 0; i < envfile.n; i++)
		if (strcmp(envfile.names[i], name) == 0)
			return envfile.values[i];
	return NULL;
}

/* Maps an API error code (or, failing that, the HTTP status) to an exit code. */
static int exit_for_error(const char *code, int status)
{
	static const struct {
		const char *code;
		int exit;
	} map[] = {
		{ "invalid_json", EXIT_INVALID },
		{ "invalid_request", EXIT_INVALID },
		{ "invalid_definition", EXIT_INVALID },
		{ "payload_too_large", EXIT_INVALID },
		{ "unsupported_media_type", EXIT_INVALID },
		{ "unauthorized", EXIT_AUTH },
		{ "forbidden", EXIT_AUTH },
		{ "not_found", EXIT_NOT_FOUND },
		{ "conflict", EXIT_CONFLICT },
		{ "unavailable", EXIT_UNREACHABLE },
		{ "method_not_allowed", EXIT_OTHER },
		{ "internal", EXIT_OTHER },
	};

	for (size_t i = 0; code && i < sizeof(map) / sizeof(map[0]); i++)
		if (strcmp(code, map[i].code) == 0)
			return map[i].exit;
	switch (status) {
	case 400:
	case 413:
	case 415:
	case 422:
		return EXIT_INVALID;
	case 401:
	case 403:
		return EXIT_AUTH;
	case 404:
		return EXIT_NOT_FOUND;
	case 409:
		return EXIT_CONFLICT;
	case 502:
	case 503:
	case 504:
		return EXIT_UNREACHABLE;
	default:
		return EXIT_OTHER;
	}
}

/* Prints the server's error reply: "cairn: message" and one line per detail. */
static int report_error(const struct response *resp)
{
	json_t *e = json_object_get(resp->body, "error");
	const char *code = json_string_value(json_object_get(e, "code"));
	const char *msg = json_string_value(json_object_get(e, "message"));
	json_t *details = json_object_get(e, "details"), *d;
	size_t i;

	if (msg)
		fprintf(stderr, "cairn: %s\n", msg);
	else
		fprintf(stderr, "cairn: server replied with HTTP status %d\n", resp->status);
	json_array_foreach(details, i, d) {
		const char *path = json_string_value(json_object_get(d, "path"));
		const char *m = json_string_value(json_object_get(d, "message"));

		fprintf(stderr, "  %s: %s\n", path ? path : "$", m ? m : "(no message)");
	}
	return exit_for_error(code, resp->status);
}

int api_call(struct cairn *cn, const char *method, const char *path, json_t *body,
	     const char *extra_header, int wait_s, json_t **out)
{
	struct client c;
	struct response resp = { 0 };
	const char *url = cn->url ? cn->url : cairn_setting("CAIRN_URL");
	const char *token = cn->token ? cn->token : cairn_setting("CAIRN_TOKEN");
	char err[512];
	int ret;

	if (out)
		*out = NULL;
	if (!url)
		url = DEFAULT_URL;
	if (client_init(&c, url, token, err, sizeof(err)) < 0)
		return fail(EXIT_USAGE, "%s", err);
	if (client_request(&c, method, path, extra_header, body, wait_s, &resp, err,
			   sizeof(err)) < 0) {
		ret = fail(EXIT_UNREACHABLE, "%s (is cairnd running? see `cairn dev up`)", err);
		goto out;
	}
	if (resp.status < 200 || resp.status > 299) {
		ret = report_error(&resp);
		goto out;
	}
	if (out) {
		*out = resp.body;
		resp.body = NULL;
	}
	ret = EXIT_OK;
out:
	response_release(&resp);
	client_release(&c);
	return ret;
}

void print_json(const json_t *v)
{
	char *s = json_dumps(v, JSON_INDENT(2) | JSON_ENCODE_ANY);

	if (s) {
		puts(s);
		free(s);
	}
}

void format_time(const char *iso, char *out, size_t outlen)
{
	size_t n;

	if (!iso) {
		snprintf(out, outlen, "-");
		return;
	}
	n = strlen(iso);
	if (n >= 19 && iso[4] == '-' && (iso[10] == 'T' || iso[10] == ' ')) {
		snprintf(out, outlen, "%.10s %.8s", iso, iso + 11);
		return;
	}
	snprintf(out, outlen, "%s", iso);
}

json_t *parse_json_arg(const char *arg, const char *what)
{
	json_error_t jerr;
	json_t *v;

	if (arg[0] == '@') {
		const char *path = arg + 1;

		if (strcmp(path, "-") == 0)
			v = json_loadf(stdin, JSON_DECODE_ANY, &jerr);
		else
			v = json_load_file(path, JSON_DECODE_ANY, &jerr);
		if (!v)
			fprintf(stderr, "cairn: could not read %s from \"%s\": %s (line %d)\n", what,
				path, jerr.text, jerr.line);
		return v;
	}
	v = json_loads(arg, JSON_DECODE_ANY, &jerr);
	if (!v)
		fprintf(stderr, "cairn: %s is not valid JSON: %s (column %d)\n", what, jerr.text,
			jerr.column);
	return v;
}

char *find_program(const struct cairn *cn, const char *name)
{
	static const char *const siblings[] = { "", "/../engine", "/../worker", "/../tools" };
	char path[PATH_MAX];
	const char *pathenv = getenv("PATH");
	char *copy, *dir, *save = NULL, *found = NULL;

	for (size_t i = 0; *cn->exe_dir && i < sizeof(siblings) / sizeof(siblings[0]); i++) {
		if (snprintf(path, sizeof(path), "%s%s/%s", cn->exe_dir, siblings[i], name) >=
		    (int)sizeof(path))
			continue;
		if (access(path, X_OK) == 0)
			return xstrdup(path);
	}
	if (!pathenv)
		return NULL;
	copy = xstrdup(pathenv);
	for (dir = strtok_r(copy, ":", &save); dir; dir = strtok_r(NULL, ":", &save)) {
		if (snprintf(path, sizeof(path), "%s/%s", *dir ? dir : ".", name) >= (int)sizeof(path))
			continue;
		if (access(path, X_OK) == 0) {
			found = xstrdup(path);
			break;
		}
	}
	free(copy);
	return found;
}

int db_connect(const char *dsn, PGconn **out)
{
	PGconn *conn;

	*out = NULL;
	if (!dsn)
		dsn = cairn_setting("CAIRN_DATABASE_URL");
	if (!dsn)
		return fail(EXIT_USAGE, "no database: set CAIRN_DATABASE_URL (or run `cairn dev up`)");
	conn = PQconnectdb(dsn);
	if (PQstatus(conn) != CONNECTION_OK) {
		char msg[512];

		snprintf(msg, sizeof(msg), "%s", PQerrorMessage(conn));
		msg[strcspn(msg, "\n")] = '\0';
		PQfinish(conn);
		return fail(EXIT_UNREACHABLE, "could not connect to the database: %s", msg);
	}
	*out = conn;
	return EXIT_OK;
}

static int cmd_version(struct cairn *cn, const struct cmd *self, int argc, char **argv)
{
	printf("cairn %s\n", PACKAGE_VERSION);
	return EXIT_OK;
}

static void list_commands(FILE *out)
{
	fprintf(out, "usage: cairn [--url URL] [--token TOKEN] [--json] COMMAND [ARGS]\n\n"
		     "commands:\n");
	for (size_t i = 0; i < NCOMMANDS; i++)
		fprintf(out, "  %-14s %s\n", commands[i].name, commands[i].summary);
	fprintf(out, "\nThe server is --url, else CAIRN_URL, else .cairn/env (written by `cairn dev up`),\n"
		     "else %s; the token likewise (--token, CAIRN_TOKEN).\n"
		     "Exit codes: 0 ok, 1 run failed or cancelled, 2 usage, 3 not found, 4 conflict,\n"
		     "5 invalid input, 6 unauthorized, 7 server unreachable, 8 other error.\n",
		DEFAULT_URL);
}

/* Finds the command named by argv[0] (and argv[1] for two-word names);
 * sets *words to how many words the name took. */
static const struct cmd *lookup(int argc, char **argv, int *words)
{
	for (size_t i = 0; i < NCOMMANDS; i++) {
		const char *name = commands[i].name, *sp = strchr(name, ' ');

		if (!sp) {
			if (strcmp(argv[0], name) == 0) {
				*words = 1;
				return &commands[i];
			}
			continue;
		}
		if (strlen(argv[0]) == (size_t)(sp - name) && strncmp(argv[0], name, (size_t)(sp - name)) == 0 &&
		    argc > 1 && strcmp(argv[1], sp + 1) == 0) {
			*words = 2;
			return &commands[i];
		}
	}
	return NULL;
}

static int cmd_help(struct cairn *cn, const struct cmd *self, int argc, char **argv)
{
	const struct cmd *c;
	int words;

	if (argc < 2) {
		list_commands(stdout);
		return EXIT_OK;
	}
	c = lookup(argc - 1, argv + 1, &words);
	if (!c)
		return fail(EXIT_USAGE, "unknown command \"%s\"", argv[1]);
	print_usage(c, stdout);
	printf("%s\n", c->summary);
	return EXIT_OK;
}

int main(int argc, char **argv)
{
	static const struct option opts[] = { COMMON_LONGOPTS, { "version", no_argument, NULL, 'V' },
					      { NULL, 0, NULL, 0 } };
	struct cairn cn = { 0 };
	const struct cmd *c;
	ssize_t n;
	int opt, words, ret;

	n = readlink("/proc/self/exe", cn.exe_dir, sizeof(cn.exe_dir) - 1);
	if (n > 0) {
		char *slash;

		cn.exe_dir[n] = '\0';
		slash = strrchr(cn.exe_dir, '/');
		if (slash)
			*slash = '\0';
	} else {
		cn.exe_dir[0] = '\0';
	}

	opterr = 0;
	while ((opt = getopt_long(argc, argv, "+hV", opts, NULL)) != -1) {
		switch (opt) {
		case OPT_URL:
			cn.url = optarg;
			break;
		case OPT_TOKEN:
			cn.token = optarg;
			break;
		case OPT_JSON:
			cn.json = true;
			break;
		case 'h':
			list_commands(stdout);
			return EXIT_OK;
		case 'V':
			printf("cairn %s\n", PACKAGE_VERSION);
			return EXIT_OK;
		default:
			fprintf(stderr, "cairn: unknown option \"%s\"\n", argv[optind - 1]);
			list_commands(stderr);
			return EXIT_USAGE;
		}
	}
	if (optind >= argc) {
		list_commands(stderr);
		return EXIT_USAGE;
	}
	c = lookup(argc - optind, argv + optind, &words);
	if (!c) {
		fprintf(stderr, "cairn: unknown command \"%s\"\n", argv[optind]);
		list_commands(stderr);
		return EXIT_USAGE;
	}
	/* The handler sees argv[0] = its (last) name word, then its arguments. */
	argv += optind + words - 1;
	argc -= optind + words - 1;
	optind = 0;
	ret = c->handler(&cn, c, argc, argv);
	fflush(stdout);
	envfile_release();
	return ret;
}
