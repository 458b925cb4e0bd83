/* config: parses a program's declarative option table from defaults,
 * CAIRN_* environment variables and flags, and prints it for --help and
 * --show-config. It never exits and never logs: main() decides. */
#include "config.h"

#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "util.h"

#define CONFIG_NAME_MAX 64

static const char *type_metavar(const struct config_opt *o)
{
	if (o->metavar)
		return o->metavar;
	switch (o->type) {
	case CONFIG_STRING: return "STRING";
	case CONFIG_INT: return "N";
	case CONFIG_BOOL: return "";
	case CONFIG_DURATION: return "DURATION";
	case CONFIG_SIZE: return "BYTES";
	}
	return "VALUE";
}

/* "max-body" -> "CAIRN_MAX_BODY" */
static void env_name(const char *name, char *out, size_t outlen)
{
	size_t n = snprintf(out, outlen, "CAIRN_");

	for (const char *p = name; *p && n + 1 < outlen; p++)
		out[n++] = *p == '-' ? '_' : (char)toupper((unsigned char)*p);
	out[n < outlen ? n : outlen - 1] = '\0';
}

static bool in_choices(const char *choices, const char *v)
{
	size_t vlen = strlen(v);
	const char *p = choices;

	while (*p) {
		const char *end = strchr(p, ',');
		size_t len = end ? (size_t)(end - p) : strlen(p);

		if (len == vlen && strncmp(p, v, len) == 0)
			return true;
		if (!end)
			break;
		p = end + 1;
	}
	return false;
}

static int parse_bool(const char *v, bool *out)
{
	static const char *const yes[] = { "1", "true", "yes", "on" };
	static const char *const no[] = { "0", "false", "no", "off" };

	for (size_t i = 0; i < 4; i++) {
		if (strcasecmp(v, yes[i]) == 0) {
			*out = true;
			return 0;
		}
		if (strcasecmp(v, no[i]) == 0) {
			*out = false;
			return 0;
		}
	}
	return -1;
}

/* Parses v into o->dst; "where" names the source for the message. */
static int set_value(const char *prog, const struct config_opt *o, const char *v, const char *where)
{
	int64_t n = 0;
	char *end = NULL;

	switch (o->type) {
	case CONFIG_STRING:
		if (o->choices && !in_choices(o->choices, v)) {
			fprintf(stderr, "%s: invalid value \"%s\" for %s: expected one of %s\n", prog, v, where,
				o->choices);
			return -1;
		}
		free(*(char **)o->dst);
		*(char **)o->dst = xstrdup(v);
		return 0;
	case CONFIG_BOOL:
		if (parse_bool(v, (bool *)o->dst) < 0) {
			fprintf(stderr, "%s: invalid value \"%s\" for %s: expected true or false\n", prog, v, where);
			return -1;
		}
		return 0;
	case CONFIG_INT:
		errno = 0;
		n = strtoll(v, &end, 10);
		if (errno || end == v || *end) {
			fprintf(stderr, "%s: invalid value \"%s\" for %s: expected an integer\n", prog, v, where);
			return -1;
		}
		break;
	case CONFIG_DURATION:
		if (duration_parse(v, &n) < 0) {
			fprintf(stderr, "%s: invalid value \"%s\" for %s: expected a duration such as 500ms, 30s or 5m\n",
				prog, v, where);
			return -1;
		}
		break;
	case CONFIG_SIZE:
		if (size_parse(v, &n) < 0) {
			fprintf(stderr, "%s: invalid value \"%s\" for %s: expected a size such as 4096, 64k or 1M\n",
				prog, v, where);
			return -1;
		}
		break;
	}
	if ((o->min || o->max) && (n < o->min || n > o->max)) {
		fprintf(stderr, "%s: invalid value \"%s\" for %s: must be between %" PRId64 " and %" PRId64 "%s\n",
			prog, v, where, o->min, o->max,
			o->type == CONFIG_DURATION ? " ms" : o->type == CONFIG_SIZE ? " bytes" : "");
		return -1;
	}
	*(int64_t *)o->dst = n;
	return 0;
}

static void set_zero(const struct config_opt *o)
{
	switch (o->type) {
	case CONFIG_STRING:
		free(*(char **)o->dst);
		*(char **)o->dst = NULL;
		break;
	case CONFIG_BOOL:
		*(bool *)o->dst = false;
		break;
	default:
		*(int64_t *)o->dst = 0;
		break;
	}
}

static bool is_set(const struct config_opt *o)
{
	return o->type != CONFIG_STRING || *(char **)o->dst != NULL;
}

static const struct config_opt *find_opt(const struct config_opt *opts, const char *name, size_t len)
{
	for (const struct config_opt *o = opts; o->name; o++)
		if (strlen(o->name) == len && strncmp(o->name, name, len) == 0)
			return o;
	return NULL;
}

enum config_result config_load(const struct config_opt *opts, const char *progname,
			       const char *summary, int argc, char **argv)
{
	bool show = false;
	char where[CONFIG_NAME_MAX + 16];

	for (const struct config_opt *o = opts; o->name; o++) {
		set_zero(o);
		snprintf(where, sizeof(where), "default of --%s", o->name);
		if (o->def && set_value(progname, o, o->def, where) < 0)
			return CONFIG_USAGE;
	}
	for (const struct config_opt *o = opts; o->name; o++) {
		const char *v;

		env_name(o->name, where, sizeof(where));
		v = getenv(where);
		if (v && *v && set_value(progname, o, v, where) < 0)
			return CONFIG_USAGE;
	}
	for (int i = 1; i < argc; i++) {
		const char *arg = argv[i], *eq, *v;
		const struct config_opt *o;
		size_t len;

		if (strcmp(arg, "--help") == 0 || strcmp(arg, "-h") == 0) {
			config_usage(opts, progname, summary, stdout);
			return CONFIG_EXIT;
		}
		if (strcmp(arg, "--show-config") == 0) {
			show = true;
			continue;
		}
		if (strncmp(arg, "--", 2) != 0 || arg[2] == '\0') {
			fprintf(stderr, "%s: unexpected argument \"%s\" (try --help)\n", progname, arg);
			return CONFIG_USAGE;
		}
		arg += 2;
		eq = strchr(arg, '=');
		len = eq ? (size_t)(eq - arg) : strlen(arg);
		o = find_opt(opts, arg, len);
		if (!o) {
			fprintf(stderr, "%s: unknown option \"--%.*s\" (try --help)\n", progname,
				(int)(len > CONFIG_NAME_MAX ? CONFIG_NAME_MAX : len), arg);
			return CONFIG_USAGE;
		}
		snprintf(where, sizeof(where), "--%s", o->name);
		if (eq) {
			v = eq + 1;
		} else if (o->type == CONFIG_BOOL) {
			v = "true";
		} else if (i + 1 < argc) {
			v = argv[++i];
		} else {
			fprintf(stderr, "%s: option \"--%s\" needs a value\n", progname, o->name);
			return CONFIG_USAGE;
		}
		if (set_value(progname, o, v, where) < 0)
			return CONFIG_USAGE;
	}
	if (show) {
		config_show(opts, stdout);
		return CONFIG_EXIT;
	}
	for (const struct config_opt *o = opts; o->name; o++) {
		if ((o->flags & CONFIG_REQUIRED) && !is_set(o)) {
			env_name(o->name, where, sizeof(where));
			fprintf(stderr, "%s: --%s is required (or set %s)\n", progname, o->name, where);
			return CONFIG_USAGE;
		}
	}
	return CONFIG_OK;
}

void config_usage(const struct config_opt *opts, const char *progname, const char *summary,
		  FILE *out)
{
	char env[CONFIG_NAME_MAX + 16], flag[CONFIG_NAME_MAX * 2];

	fprintf(out, "usage: %s [options]\n%s\n\noptions (each also read from the variable shown):\n",
		progname, summary);
	for (const struct config_opt *o = opts; o->name; o++) {
		const char *mv = type_metavar(o);

		snprintf(flag, sizeof(flag), "--%s%s%s", o->name, *mv ? " " : "", mv);
		env_name(o->name, env, sizeof(env));
		fprintf(out, "  %-28s %s", flag, o->help ? o->help : "");
		if (o->choices)
			fprintf(out, " (%s)", o->choices);
		if (o->def)
			fprintf(out, " [default: %s]", o->def);
		if (o->flags & CONFIG_REQUIRED)
			fprintf(out, " [required]");
		if (o->flags & CONFIG_RELOADS)
			fprintf(out, " [reloads]");
		fprintf(out, "\n  %-28s $%s\n", "", env);
	}
	fprintf(out, "  %-28s %s\n  %-28s %s\n", "--show-config", "print the resulting configuration and exit",
		"--help", "print this help and exit");
}

void config_show(const struct config_opt *opts, FILE *out)
{
	char dur[64];

	for (const struct config_opt *o = opts; o->name; o++) {
		fprintf(out, "%s = ", o->name);
		if (o->type == CONFIG_STRING && !*(char **)o->dst) {
			fprintf(out, "(unset)\n");
			continue;
		}
		if (o->flags & CONFIG_SECRET) {
			fprintf(out, "(set)\n");
			continue;
		}
		switch (o->type) {
		case CONFIG_STRING:
			fprintf(out, "%s\n", *(char **)o->dst);
			break;
		case CONFIG_BOOL:
			fprintf(out, "%s\n", *(bool *)o->dst ? "true" : "false");
			break;
		case CONFIG_INT:
			fprintf(out, "%" PRId64 "\n", *(int64_t *)o->dst);
			break;
		case CONFIG_DURATION:
			duration_format(*(int64_t *)o->dst, dur, sizeof(dur));
			fprintf(out, "%s\n", dur);
			break;
		case CONFIG_SIZE:
			fprintf(out, "%" PRId64 "\n", *(int64_t *)o->dst);
			break;
		}
	}
}

void config_release(const struct config_opt *opts)
{
	for (const struct config_opt *o = opts; o->name; o++) {
		if (o->type == CONFIG_STRING) {
			free(*(char **)o->dst);
			*(char **)o->dst = NULL;
		}
	}
}
