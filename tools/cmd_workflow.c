/* cmd_workflow: named, versioned workflow definitions (workflow put, get,
 * list) and durable schedules (schedule add, list, rm). They only speak
 * cairnd's HTTP API. */
#include "config.h"
#include "cmd_workflow.h"
#include "client.h"

#include <errno.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PAGE_LIMIT 500
#define MAX_PAGES 1000

int parse_version(const char *s, long *out)
{
	char *end;
	long v;

	errno = 0;
	v = strtol(s, &end, 10);
	if (errno || end == s || *end || v < 1 || v > INT32_MAX)
		return -1;
	*out = v;
	return 0;
}

/* Reads a workflow definition from path ("-" for stdin): an object. */
static json_t *load_definition(const char *path)
{
	json_error_t jerr;
	json_t *def;

	if (strcmp(path, "-") == 0)
		def = json_loadf(stdin, 0, &jerr);
	else
		def = json_load_file(path, 0, &jerr);
	if (!def) {
		fprintf(stderr, "cairn: could not read workflow \"%s\": %s (line %d)\n", path, jerr.text,
			jerr.line);
		return NULL;
	}
	if (!json_is_object(def)) {
		fprintf(stderr, "cairn: workflow \"%s\" is not a JSON object\n", path);
		json_decref(def);
		return NULL;
	}
	return def;
}

/* GETs every page of a paged list (base path, the array's key) into *out. */
static int fetch_all(struct cairn *cn, const char *base, const char *key, json_t **out)
{
	json_t *all = json_array();
	char *after = NULL;
	int ret = EXIT_OK;

	*out = NULL;
	for (int page = 0; page < MAX_PAGES; page++) {
		struct buf path = BUF_INIT;
		json_t *reply = NULL;
		const char *next;

		buf_addf(&path, "%s?limit=%d", base, PAGE_LIMIT);
		if (after) {
			buf_adds(&path, "&after=");
			url_escape(&path, after);
		}
		ret = api_call(cn, "GET", path.data, NULL, NULL, 0, &reply);
		buf_release(&path);
		if (ret != EXIT_OK)
			goto out;
		json_array_extend(all, json_object_get(reply, key));
		next = json_string_value(json_object_get(reply, "next"));
		free(after);
		after = next && *next ? xstrdup(next) : NULL;
		json_decref(reply);
		if (!after)
			break;
	}
	*out = all;
	all = NULL;
out:
	free(after);
	json_decref(all);
	return ret;
}

int cmd_workflow_put(struct cairn *cn, const struct cmd *self, int argc, char **argv)
{
	static const struct option opts[] = { COMMON_LONGOPTS, { NULL, 0, NULL, 0 } };
	struct buf path = BUF_INIT;
	json_t *def = NULL, *reply = NULL;
	const char *name;
	json_int_t version;
	int opt, ret;

	opterr = 0;
	while ((opt = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		switch (opt) {
		COMMON_OPT_CASES;
		}
	}
	if (optind != argc - 2)
		return usage_error(self, "expected a workflow name and a file");
	name = argv[optind];
	def = load_definition(argv[optind + 1]);
	if (!def)
		return EXIT_INVALID;
	buf_adds(&path, "/v1/workflows/");
	url_escape(&path, name);
	ret = api_call(cn, "PUT", path.data, def, NULL, 0, &reply);
	if (ret != EXIT_OK)
		goto out;
	version = json_integer_value(json_object_get(reply, "version"));
	if (cn->json) {
		print_json(reply);
	} else {
		printf("%lld\n", (long long)version);
		if (json_is_false(json_object_get(reply, "created")))
			fprintf(stderr, "cairn: workflow \"%s\" version %lld already is this definition: "
					"no new version\n", name, (long long)version);
	}
out:
	buf_release(&path);
	json_decref(def);
	json_decref(reply);
	return ret;
}

int cmd_workflow_get(struct cairn *cn, const struct cmd *self, int argc, char **argv)
{
	static const struct option opts[] = {
		{ "version", required_argument, NULL, 'v' },
		COMMON_LONGOPTS,
		{ NULL, 0, NULL, 0 }
	};
	struct buf path = BUF_INIT;
	json_t *reply = NULL;
	long version = 0;
	int opt, ret;

	opterr = 0;
	while ((opt = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		switch (opt) {
		case 'v':
			if (parse_version(optarg, &version) < 0)
				return usage_error(self, "invalid --version \"%s\": a number from 1", optarg);
			break;
		COMMON_OPT_CASES;
		}
	}
	if (optind != argc - 1)
		return usage_error(self, "expected a workflow name");
	buf_adds(&path, "/v1/workflows/");
	url_escape(&path, argv[optind]);
	if (version)
		buf_addf(&path, "?version=%ld", version);
	ret = api_call(cn, "GET", path.data, NULL, NULL, 0, &reply);
	if (ret != EXIT_OK)
		goto out;
	if (cn->json) {
		print_json(reply);
	} else {
		char when[40];

		format_time(json_string_value(json_object_get(reply, "created_at")), when, sizeof(when));
		fprintf(stderr, "workflow \"%s\" version %lld, stored %s\n", argv[optind],
			(long long)json_integer_value(json_object_get(reply, "version")), when);
		print_json(json_object_get(reply, "definition"));
	}
out:
	buf_release(&path);
	json_decref(reply);
	return ret;
}

int cmd_workflow_list(struct cairn *cn, const struct cmd *self, int argc, char **argv)
{
	static const struct option opts[] = { COMMON_LONGOPTS, { NULL, 0, NULL, 0 } };
	json_t *all = NULL, *w;
	size_t i;
	int opt, ret;

	opterr = 0;
	while ((opt = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		switch (opt) {
		COMMON_OPT_CASES;
		}
	}
	if (optind != argc)
		return usage_error(self, "unexpected argument \"%s\"", argv[optind]);
	ret = fetch_all(cn, "/v1/workflows", "workflows", &all);
	if (ret != EXIT_OK)
		return ret;
	if (cn->json) {
		json_t *wrap = json_pack("{s:O}", "workflows", all);

		print_json(wrap);
		json_decref(wrap);
		goto out;
	}
	printf("%-32s %-8s %s\n", "NAME", "VERSION", "STORED");
	json_array_foreach(all, i, w) {
		char when[40];

		format_time(json_string_value(json_object_get(w, "created_at")), when, sizeof(when));
		printf("%-32s %-8lld %s\n", json_string_value(json_object_get(w, "name")),
		       (long long)json_integer_value(json_object_get(w, "version")), when);
	}
out:
	json_decref(all);
	return EXIT_OK;
}

int cmd_schedule_add(struct cairn *cn, const struct cmd *self, int argc, char **argv)
{
	static const struct option opts[] = {
		{ "workflow", required_argument, NULL, 'w' },
		{ "version", required_argument, NULL, 'v' },
		{ "input", required_argument, NULL, 'i' },
		{ "catch-up", required_argument, NULL, 'c' },
		COMMON_LONGOPTS,
		{ NULL, 0, NULL, 0 }
	};
	const char *workflow = NULL, *input_arg = NULL, *catch_up = NULL, *name, *cron;
	json_t *body = NULL, *def = NULL, *input = NULL, *reply = NULL;
	long version = 0;
	int opt, ret, nargs;

	opterr = 0;
	while ((opt = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		switch (opt) {
		case 'w':
			workflow = optarg;
			break;
		case 'v':
			if (parse_version(optarg, &version) < 0)
				return usage_error(self, "invalid --version \"%s\": a number from 1", optarg);
			break;
		case 'i':
			input_arg = optarg;
			break;
		case 'c':
			catch_up = optarg;
			if (strcmp(catch_up, "skip") && strcmp(catch_up, "one") && strcmp(catch_up, "all"))
				return usage_error(self, "invalid --catch-up \"%s\": skip, one or all",
						   catch_up);
			break;
		COMMON_OPT_CASES;
		}
	}
	nargs = argc - optind;
	if (workflow ? nargs != 2 : nargs != 3)
		return usage_error(self, "expected a schedule name, a cron expression and either a "
					 "workflow file or --workflow NAME");
	if (version && !workflow)
		return usage_error(self, "--version goes with --workflow");
	name = argv[optind];
	cron = argv[optind + 1];
	body = json_pack("{s:s, s:s}", "name", name, "cron", cron);
	if (workflow) {
		json_object_set_new(body, "workflow", json_string(workflow));
		if (version)
			json_object_set_new(body, "version", json_integer(version));
	} else {
		def = load_definition(argv[optind + 2]);
		if (!def) {
			ret = EXIT_INVALID;
			goto out;
		}
		/* A definition without a name takes the schedule's. */
		if (!json_object_get(def, "name"))
			json_object_set_new(def, "name", json_string(name));
		json_object_set(body, "definition", def);
	}
	if (input_arg) {
		input = parse_json_arg(input_arg, "--input");
		if (!input) {
			ret = EXIT_INVALID;
			goto out;
		}
		json_object_set(body, "input", input);
	}
	if (catch_up)
		json_object_set_new(body, "catch_up", json_string(catch_up));
	ret = api_call(cn, "POST", "/v1/schedules", body, NULL, 0, &reply);
	if (ret != EXIT_OK)
		goto out;
	if (cn->json) {
		print_json(reply);
	} else {
		char when[40];

		format_time(json_string_value(json_object_get(reply, "next_at")), when, sizeof(when));
		printf("%s schedule \"%s\" (%s, catch-up %s): next run at %s\n",
		       json_is_false(json_object_get(reply, "created")) ? "replaced" : "created", name,
		       cron, json_string_value(json_object_get(reply, "catch_up")) ?: "one", when);
	}
out:
	json_decref(body);
	json_decref(def);
	json_decref(input);
	json_decref(reply);
	return ret;
}

int cmd_schedule_list(struct cairn *cn, const struct cmd *self, int argc, char **argv)
{
	static const struct option opts[] = { COMMON_LONGOPTS, { NULL, 0, NULL, 0 } };
	json_t *all = NULL, *s;
	size_t i;
	int opt, ret;

	opterr = 0;
	while ((opt = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		switch (opt) {
		COMMON_OPT_CASES;
		}
	}
	if (optind != argc)
		return usage_error(self, "unexpected argument \"%s\"", argv[optind]);
	ret = fetch_all(cn, "/v1/schedules", "schedules", &all);
	if (ret != EXIT_OK)
		return ret;
	if (cn->json) {
		json_t *wrap = json_pack("{s:O}", "schedules", all);

		print_json(wrap);
		json_decref(wrap);
		goto out;
	}
	printf("%-24s %-20s %-20s %-8s %-19s %s\n", "NAME", "CRON", "WORKFLOW", "CATCH-UP", "NEXT",
	       "LAST RUN");
	json_array_foreach(all, i, s) {
		const char *last = json_string_value(json_object_get(s, "last_run_id"));
		char when[40];

		format_time(json_string_value(json_object_get(s, "next_at")), when, sizeof(when));
		printf("%-24s %-20s %-20s %-8s %-19s %s%s\n", json_string_value(json_object_get(s, "name")),
		       json_string_value(json_object_get(s, "cron")) ?: "-",
		       json_string_value(json_object_get(s, "workflow")) ?: "-",
		       json_string_value(json_object_get(s, "catch_up")) ?: "-", when, last ? last : "-",
		       json_is_false(json_object_get(s, "enabled")) ? " (disabled)" : "");
	}
out:
	json_decref(all);
	return EXIT_OK;
}

int cmd_schedule_rm(struct cairn *cn, const struct cmd *self, int argc, char **argv)
{
	static const struct option opts[] = { COMMON_LONGOPTS, { NULL, 0, NULL, 0 } };
	struct buf path = BUF_INIT;
	json_t *reply = NULL;
	int opt, ret;

	opterr = 0;
	while ((opt = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		switch (opt) {
		COMMON_OPT_CASES;
		}
	}
	if (optind != argc - 1)
		return usage_error(self, "expected a schedule name");
	buf_adds(&path, "/v1/schedules/");
	url_escape(&path, argv[optind]);
	ret = api_call(cn, "DELETE", path.data, NULL, NULL, 0, &reply);
	if (ret != EXIT_OK)
		goto out;
	if (cn->json)
		print_json(reply);
	else
		printf("removed schedule \"%s\"\n", argv[optind]);
out:
	buf_release(&path);
	json_decref(reply);
	return ret;
}
