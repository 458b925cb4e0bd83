/* cmd_runs: the commands that create and read runs: submit, runs, status,
 * watch, logs, history. They only speak cairnd's HTTP API. */
#include "config.h"
#include "cairn.h"
#include "client.h"
#include "cmd_workflow.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define WATCH_WAIT_S 20

static bool status_final(const char *s)
{
	return s && (strcmp(s, "succeeded") == 0 || strcmp(s, "failed") == 0 ||
		     strcmp(s, "cancelled") == 0);
}

static int exit_for_status(const char *s)
{
	return s && (strcmp(s, "failed") == 0 || strcmp(s, "cancelled") == 0) ? EXIT_RUN_FAILED
									     : EXIT_OK;
}

static void run_path(struct buf *b, const char *run_id, const char *suffix)
{
	buf_adds(b, "/v1/runs/");
	url_escape(b, run_id);
	buf_adds(b, suffix);
}

/* Appends a one-line summary of an event payload: the fields people look for. */
static void payload_summary(struct buf *b, const json_t *payload)
{
	static const char *const keys[] = { "workflow", "message", "reason", "prompt", "actor",
					    "comment", "name", "exit_code", "signal", "worker",
					    "delay_ms", "wake_at" };
	const json_t *err = json_object_get(payload, "error");
	const json_t *output = json_object_get(payload, "output");
	size_t start = b->len;

	if (json_is_object(err)) {
		const char *m = json_string_value(json_object_get(err, "message"));
		const char *r = json_string_value(json_object_get(err, "reason"));

		if (r)
			buf_addf(b, "%s", r);
		if (m)
			buf_addf(b, "%s%s", r ? ": " : "", m);
	} else if (json_is_string(err)) {
		buf_adds(b, json_string_value(err));
	}
	for (size_t i = 0; json_is_object(payload) && i < sizeof(keys) / sizeof(keys[0]); i++) {
		const json_t *v = json_object_get(payload, keys[i]);

		if (!v || json_is_null(v) || json_is_object(v) || json_is_array(v))
			continue;
		if (b->len > start)
			buf_adds(b, ", ");
		if (json_is_string(v))
			buf_addf(b, "%s=%s", keys[i], json_string_value(v));
		else if (json_is_integer(v))
			buf_addf(b, "%s=%lld", keys[i], (long long)json_integer_value(v));
		else if (json_is_real(v))
			buf_addf(b, "%s=%g", keys[i], json_real_value(v));
		else
			buf_addf(b, "%s=%s", keys[i], json_is_true(v) ? "true" : "false");
	}
	if (output && !json_is_null(output)) {
		char *s = json_dumps(output, JSON_COMPACT | JSON_ENCODE_ANY);

		if (s) {
			buf_addf(b, "%soutput=%s", b->len > start ? ", " : "", s);
			free(s);
		}
	}
	if (b->len - start > 160) {
		b->len = start + 157;
		b->data[b->len] = '\0';
		buf_adds(b, "...");
	}
	for (size_t i = start; i < b->len; i++)
		if (b->data[i] == '\n' || b->data[i] == '\r' || b->data[i] == '\t')
			b->data[i] = ' ';
}

/* Prints one event as a line: time, seq, type, step#attempt, summary. */
static void print_event(const json_t *ev, bool full_time)
{
	struct buf line = BUF_INIT, step = BUF_INIT;
	const char *at = json_string_value(json_object_get(ev, "at"));
	const char *type = json_string_value(json_object_get(ev, "type"));
	const char *step_id = json_string_value(json_object_get(ev, "step_id"));
	json_int_t seq = json_integer_value(json_object_get(ev, "seq"));
	json_int_t attempt = json_integer_value(json_object_get(ev, "attempt"));
	char when[40];

	format_time(at, when, sizeof(when));
	if (step_id) {
		buf_adds(&step, step_id);
		if (attempt > 0)
			buf_addf(&step, "#%lld", (long long)attempt);
	}
	payload_summary(&line, json_object_get(ev, "payload"));
	printf("%s %4lld %-20s %-16s %s\n", full_time || strlen(when) < 19 ? when : when + 11,
	       (long long)seq, type ? type : "?", step.len ? step.data : "-",
	       line.len ? line.data : "");
	buf_release(&line);
	buf_release(&step);
}

int watch_run(struct cairn *cn, const char *run_id, bool quiet)
{
	json_int_t seq = 0;
	int ret = EXIT_OTHER, retries = 0;
	char *status = NULL;

	for (;;) {
		struct buf path = BUF_INIT;
		json_t *reply = NULL, *events, *ev;
		const char *st;
		json_int_t last;
		size_t i;

		run_path(&path, run_id, "/events");
		buf_addf(&path, "?after=%lld&wait=%d", (long long)seq, WATCH_WAIT_S);
		ret = api_call(cn, "GET", path.data, NULL, NULL, WATCH_WAIT_S, &reply);
		buf_release(&path);
		if (ret == EXIT_UNREACHABLE && retries++ < 5) {
			sleep(1);
			continue;
		}
		if (ret != EXIT_OK)
			goto out;
		retries = 0;
		events = json_object_get(reply, "events");
		json_array_foreach(events, i, ev) {
			json_int_t s = json_integer_value(json_object_get(ev, "seq"));

			if (s <= seq)
				continue;
			seq = s;
			if (quiet)
				continue;
			if (cn->json) {
				char *line = json_dumps(ev, JSON_COMPACT);

				if (line)
					puts(line);
				free(line);
			} else {
				print_event(ev, false);
			}
		}
		fflush(stdout);
		st = json_string_value(json_object_get(reply, "status"));
		last = json_integer_value(json_object_get(reply, "last_seq"));
		free(status);
		status = st ? xstrdup(st) : NULL;
		if (status_final(status) && (json_array_size(events) == 0 || seq >= last)) {
			json_decref(reply);
			break;
		}
		json_decref(reply);
	}
	if (!quiet && !cn->json)
		printf("run %s %s\n", run_id, status);
	ret = exit_for_status(status);
out:
	free(status);
	return ret;
}

/* Reads every event of a run into *out (a new array). */
static int fetch_events(struct cairn *cn, const char *run_id, json_t **out)
{
	json_t *all = json_array();
	json_int_t seq = 0;
	int ret;

	*out = NULL;
	for (;;) {
		struct buf path = BUF_INIT;
		json_t *reply = NULL, *events, *ev;
		json_int_t last;
		size_t i, added = 0;

		run_path(&path, run_id, "/events");
		buf_addf(&path, "?after=%lld&wait=0", (long long)seq);
		ret = api_call(cn, "GET", path.data, NULL, NULL, 0, &reply);
		buf_release(&path);
		if (ret != EXIT_OK) {
			json_decref(all);
			return ret;
		}
		events = json_object_get(reply, "events");
		json_array_foreach(events, i, ev) {
			json_int_t s = json_integer_value(json_object_get(ev, "seq"));

			if (s <= seq)
				continue;
			seq = s;
			json_array_append(all, ev);
			added++;
		}
		last = json_integer_value(json_object_get(reply, "last_seq"));
		json_decref(reply);
		if (added == 0 || seq >= last)
			break;
	}
	*out = all;
	return EXIT_OK;
}

int cmd_submit(struct cairn *cn, const struct cmd *self, int argc, char **argv)
{
	static const struct option opts[] = {
		{ "input", required_argument, NULL, 'i' },
		{ "idempotency-key", required_argument, NULL, 'k' },
		{ "wait", no_argument, NULL, 'w' },
		{ "watch", no_argument, NULL, 'W' },
		{ "workflow", required_argument, NULL, 'n' },
		{ "version", required_argument, NULL, 'v' },
		COMMON_LONGOPTS,
		{ NULL, 0, NULL, 0 }
	};
	const char *input_arg = NULL, *key = NULL, *file, *run_id, *workflow = NULL;
	bool wait = false, watch = false;
	json_t *def = NULL, *input = NULL, *body = NULL, *reply = NULL;
	json_error_t jerr;
	char header[512];
	long version = 0;
	int opt, ret;

	opterr = 0;
	while ((opt = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		switch (opt) {
		case 'i':
			input_arg = optarg;
			break;
		case 'k':
			key = optarg;
			break;
		case 'w':
			wait = true;
			break;
		case 'W':
			watch = true;
			break;
		case 'n':
			workflow = optarg;
			break;
		case 'v':
			if (parse_version(optarg, &version) < 0)
				return usage_error(self, "invalid --version \"%s\": a number from 1", optarg);
			break;
		COMMON_OPT_CASES;
		}
	}
	if (workflow && optind != argc)
		return usage_error(self, "expected no workflow file with --workflow");
	if (!workflow && optind != argc - 1)
		return usage_error(self, "expected one workflow file (or --workflow NAME)");
	if (version && !workflow)
		return usage_error(self, "--version goes with --workflow");
	if (key && (strpbrk(key, "\r\n") || strlen(key) > 255 || !*key))
		return usage_error(self, "invalid idempotency key: 1 to 255 characters, one line");
	if (!workflow) {
		file = argv[optind];
		if (strcmp(file, "-") == 0)
			def = json_loadf(stdin, 0, &jerr);
		else
			def = json_load_file(file, 0, &jerr);
		if (!def) {
			ret = fail(EXIT_INVALID, "could not read workflow \"%s\": %s (line %d)", file,
				   jerr.text, jerr.line);
			goto out;
		}
	}
	if (input_arg) {
		input = parse_json_arg(input_arg, "--input");
		if (!input) {
			ret = EXIT_INVALID;
			goto out;
		}
	}
	body = json_object();
	if (workflow) {
		json_object_set_new(body, "workflow", json_string(workflow));
		if (version)
			json_object_set_new(body, "version", json_integer(version));
	} else {
		json_object_set(body, "definition", def);
	}
	if (input)
		json_object_set(body, "input", input);
	if (key)
		snprintf(header, sizeof(header), "Idempotency-Key: %s", key);
	ret = api_call(cn, "POST", "/v1/runs", body, key ? header : NULL, 0, &reply);
	if (ret != EXIT_OK)
		goto out;
	run_id = json_string_value(json_object_get(reply, "run_id"));
	if (!run_id) {
		ret = fail(EXIT_OTHER, "server reply has no run_id");
		goto out;
	}
	if (cn->json && !watch)
		print_json(reply);
	else
		printf("%s\n", run_id);
	fflush(stdout);
	if (json_is_false(json_object_get(reply, "created")))
		fprintf(stderr, "cairn: idempotency key \"%s\" already names run %s: not submitted again\n",
			key ? key : "", run_id);
	if (watch)
		ret = watch_run(cn, run_id, false);
	else if (wait) {
		ret = watch_run(cn, run_id, true);
		if (ret == EXIT_OK || ret == EXIT_RUN_FAILED)
			fprintf(stderr, "run %s %s\n", run_id,
				ret == EXIT_OK ? "succeeded" : "failed or was cancelled");
	}
out:
	json_decref(def);
	json_decref(input);
	json_decref(body);
	json_decref(reply);
	return ret;
}

int cmd_runs(struct cairn *cn, const struct cmd *self, int argc, char **argv)
{
	static const struct option opts[] = {
		{ "status", required_argument, NULL, 's' },
		{ "workflow", required_argument, NULL, 'w' },
		{ "limit", required_argument, NULL, 'n' },
		{ "after", required_argument, NULL, 'a' },
		COMMON_LONGOPTS,
		{ NULL, 0, NULL, 0 }
	};
	const char *status = NULL, *workflow = NULL, *after = NULL;
	long limit = 20;
	struct buf path = BUF_INIT;
	json_t *reply = NULL, *run;
	size_t i;
	int opt, ret;
	char *end;

	opterr = 0;
	while ((opt = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		switch (opt) {
		case 's':
			status = optarg;
			break;
		case 'w':
			workflow = optarg;
			break;
		case 'n':
			limit = strtol(optarg, &end, 10);
			if (*end || limit < 1 || limit > 1000)
				return usage_error(self, "invalid --limit \"%s\": 1 to 1000", optarg);
			break;
		case 'a':
			after = optarg;
			break;
		COMMON_OPT_CASES;
		}
	}
	if (optind != argc)
		return usage_error(self, "unexpected argument \"%s\"", argv[optind]);
	buf_addf(&path, "/v1/runs?limit=%ld", limit);
	if (status) {
		buf_adds(&path, "&status=");
		url_escape(&path, status);
	}
	if (workflow) {
		buf_adds(&path, "&workflow=");
		url_escape(&path, workflow);
	}
	if (after) {
		buf_adds(&path, "&after=");
		url_escape(&path, after);
	}
	ret = api_call(cn, "GET", path.data, NULL, NULL, 0, &reply);
	if (ret != EXIT_OK)
		goto out;
	if (cn->json) {
		print_json(reply);
		goto out;
	}
	printf("%-36s  %-24s  %-9s  %-19s  %s\n", "RUN", "WORKFLOW", "STATUS", "CREATED", "FINISHED");
	json_array_foreach(json_object_get(reply, "runs"), i, run) {
		const char *wf = json_string_value(json_object_get(run, "workflow"));
		const char *st = json_string_value(json_object_get(run, "status"));
		char created[40], finished[40];

		format_time(json_string_value(json_object_get(run, "created_at")), created,
			    sizeof(created));
		format_time(json_string_value(json_object_get(run, "finished_at")), finished,
			    sizeof(finished));
		printf("%-36s  %-24s  %-9s  %-19s  %s\n",
		       json_string_value(json_object_get(run, "run_id")), wf ? wf : "-",
		       st ? st : "-", created, finished);
	}
	if (json_is_string(json_object_get(reply, "next")))
		fprintf(stderr, "more: cairn runs --after %s\n",
			json_string_value(json_object_get(reply, "next")));
out:
	buf_release(&path);
	json_decref(reply);
	return ret;
}

/* Parses "RUN" (the one positional argument) for commands that take only it. */
static int one_run_arg(struct cairn *cn, const struct cmd *self, int argc, char **argv,
		       const char **run_id)
{
	static const struct option opts[] = { COMMON_LONGOPTS, { NULL, 0, NULL, 0 } };
	int opt;

	opterr = 0;
	while ((opt = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		switch (opt) {
		COMMON_OPT_CASES;
		}
	}
	if (optind != argc - 1)
		return usage_error(self, "expected one run id");
	*run_id = argv[optind];
	return -1;
}

static const char *error_text(json_t *err, struct buf *b)
{
	json_t *wrap;

	buf_reset(b);
	if (!err || json_is_null(err))
		return "";
	if (json_is_string(err))
		return json_string_value(err);
	wrap = json_pack("{sO}", "error", err);
	payload_summary(b, wrap);
	json_decref(wrap);
	return b->data ? b->data : "";
}

int cmd_status(struct cairn *cn, const struct cmd *self, int argc, char **argv)
{
	const char *run_id = NULL, *st;
	struct buf path = BUF_INIT, tmp = BUF_INIT;
	json_t *run = NULL, *events = NULL, *steps, *step, *ev;
	size_t i, w = 4;
	char t1[40];
	int ret;
	bool header = false;

	ret = one_run_arg(cn, self, argc, argv, &run_id);
	if (ret >= 0)
		return ret;
	run_path(&path, run_id, "");
	ret = api_call(cn, "GET", path.data, NULL, NULL, 0, &run);
	if (ret != EXIT_OK)
		goto out;
	st = json_string_value(json_object_get(run, "status"));
	if (cn->json) {
		print_json(run);
		ret = exit_for_status(st);
		goto out;
	}
	printf("run       %s\n", json_string_value(json_object_get(run, "run_id")));
	printf("workflow  %s\n", json_string_value(json_object_get(run, "workflow")));
	printf("status    %s\n", st ? st : "?");
	format_time(json_string_value(json_object_get(run, "created_at")), t1, sizeof(t1));
	printf("created   %s\n", t1);
	if (json_string_value(json_object_get(run, "finished_at"))) {
		format_time(json_string_value(json_object_get(run, "finished_at")), t1, sizeof(t1));
		printf("finished  %s\n", t1);
	}
	if (json_object_get(run, "error") && !json_is_null(json_object_get(run, "error")))
		printf("error     %s\n", error_text(json_object_get(run, "error"), &tmp));

	steps = json_object_get(run, "steps");
	json_array_foreach(steps, i, step) {
		const char *id = json_string_value(json_object_get(step, "step_id"));

		if (id && strlen(id) > w)
			w = strlen(id);
	}
	printf("\n%-*s  %-11s  %-9s  %7s  %-20s  %s\n", (int)w, "STEP", "KIND", "STATUS", "ATTEMPT",
	       "NEEDS", "ERROR");
	json_array_foreach(steps, i, step) {
		const char *id = json_string_value(json_object_get(step, "step_id"));
		const char *kind = json_string_value(json_object_get(step, "kind"));
		const char *sst = json_string_value(json_object_get(step, "status"));
		json_t *needs = json_object_get(step, "needs"), *n;
		struct buf nb = BUF_INIT;
		size_t j;

		json_array_foreach(needs, j, n) {
			if (j)
				buf_adds(&nb, ",");
			buf_adds(&nb, json_string_value(n) ? json_string_value(n) : "?");
		}
		printf("%-*s  %-11s  %-9s  %7lld  %-20s  %s\n", (int)w, id ? id : "?",
		       kind ? kind : "-", sst ? sst : "-",
		       (long long)json_integer_value(json_object_get(step, "attempt")),
		       nb.len ? nb.data : "-", error_text(json_object_get(step, "error"), &tmp));
		buf_release(&nb);
	}

	json_array_foreach(steps, i, step) {
		const char *id = json_string_value(json_object_get(step, "step_id"));
		const char *kind = json_string_value(json_object_get(step, "kind"));
		const char *sst = json_string_value(json_object_get(step, "status"));

		if (id && kind && sst && strcmp(kind, "approval") == 0 && strcmp(sst, "waiting") == 0)
			printf("\nstep \"%s\" waits for a decision: cairn approve %s %s  (or cairn reject)\n",
			       id, run_id, id);
	}

	/* Every failed attempt, with its reason, from the event history. */
	if (fetch_events(cn, run_id, &events) == EXIT_OK) {
		json_array_foreach(events, i, ev) {
			const char *type = json_string_value(json_object_get(ev, "type"));

			if (!type || (strcmp(type, "StepFailed") && strcmp(type, "StepTimedOut") &&
				      strcmp(type, "StepLeaseExpired") && strcmp(type, "ApprovalRejected")))
				continue;
			if (!header) {
				printf("\nfailed attempts:\n");
				header = true;
			}
			buf_reset(&tmp);
			payload_summary(&tmp, json_object_get(ev, "payload"));
			printf("  %s attempt %lld: %s%s%s\n",
			       json_string_value(json_object_get(ev, "step_id")),
			       (long long)json_integer_value(json_object_get(ev, "attempt")), type,
			       tmp.len ? ": " : "", tmp.len ? tmp.data : "");
		}
	}
	ret = exit_for_status(st);
out:
	buf_release(&path);
	buf_release(&tmp);
	json_decref(run);
	json_decref(events);
	return ret;
}

int cmd_watch(struct cairn *cn, const struct cmd *self, int argc, char **argv)
{
	const char *run_id = NULL;
	int ret = one_run_arg(cn, self, argc, argv, &run_id);

	if (ret >= 0)
		return ret;
	return watch_run(cn, run_id, false);
}

int cmd_history(struct cairn *cn, const struct cmd *self, int argc, char **argv)
{
	const char *run_id = NULL;
	json_t *events = NULL, *ev;
	size_t i;
	int ret = one_run_arg(cn, self, argc, argv, &run_id);

	if (ret >= 0)
		return ret;
	ret = fetch_events(cn, run_id, &events);
	if (ret != EXIT_OK)
		goto out;
	if (cn->json) {
		json_t *doc = json_pack("{sO}", "events", events);

		print_json(doc);
		json_decref(doc);
		goto out;
	}
	json_array_foreach(events, i, ev)
		print_event(ev, true);
out:
	json_decref(events);
	return ret;
}

int cmd_logs(struct cairn *cn, const struct cmd *self, int argc, char **argv)
{
	static const struct option opts[] = {
		{ "step", required_argument, NULL, 's' },
		{ "attempt", required_argument, NULL, 'a' },
		COMMON_LONGOPTS,
		{ NULL, 0, NULL, 0 }
	};
	const char *step = NULL, *run_id;
	long attempt = 0;
	struct buf path = BUF_INIT, last = BUF_INIT, cur = BUF_INIT;
	json_t *reply = NULL, *chunk;
	size_t i;
	int opt, ret;
	char *end;

	opterr = 0;
	while ((opt = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		switch (opt) {
		case 's':
			step = optarg;
			break;
		case 'a':
			attempt = strtol(optarg, &end, 10);
			if (*end || attempt < 1)
				return usage_error(self, "invalid --attempt \"%s\"", optarg);
			break;
		COMMON_OPT_CASES;
		}
	}
	if (optind != argc - 1)
		return usage_error(self, "expected one run id");
	run_id = argv[optind];
	run_path(&path, run_id, "/logs");
	buf_adds(&path, "?");
	if (step) {
		buf_adds(&path, "step=");
		url_escape(&path, step);
		buf_adds(&path, "&");
	}
	if (attempt)
		buf_addf(&path, "attempt=%ld", attempt);
	ret = api_call(cn, "GET", path.data, NULL, NULL, 0, &reply);
	if (ret != EXIT_OK)
		goto out;
	if (cn->json) {
		print_json(reply);
		goto out;
	}
	json_array_foreach(json_object_get(reply, "logs"), i, chunk) {
		const char *sid = json_string_value(json_object_get(chunk, "step_id"));
		const char *stream = json_string_value(json_object_get(chunk, "stream"));
		const char *data = json_string_value(json_object_get(chunk, "data"));

		buf_reset(&cur);
		buf_addf(&cur, "%s attempt %lld (%s)", sid ? sid : "?",
			 (long long)json_integer_value(json_object_get(chunk, "attempt")),
			 stream ? stream : "?");
		if (!step && (last.len == 0 || strcmp(last.data, cur.data) != 0)) {
			printf("==> %s <==\n", cur.data);
			buf_reset(&last);
			buf_adds(&last, cur.data);
		}
		if (data) {
			fputs(data, stdout);
			if (*data && data[strlen(data) - 1] != '\n')
				fputc('\n', stdout);
		}
		if (json_is_true(json_object_get(chunk, "truncated")))
			printf("[output truncated]\n");
	}
out:
	buf_release(&path);
	buf_release(&last);
	buf_release(&cur);
	json_decref(reply);
	return ret;
}

int cmd_fork(struct cairn *cn, const struct cmd *self, int argc, char **argv)
{
	static const struct option opts[] = {
		{ "from", required_argument, NULL, 'f' },
		{ "definition", required_argument, NULL, 'd' },
		{ "watch", no_argument, NULL, 'W' },
		COMMON_LONGOPTS,
		{ NULL, 0, NULL, 0 }
	};
	const char *from = NULL, *file = NULL, *run_id;
	struct buf path = BUF_INIT;
	json_t *def = NULL, *body = NULL, *reply = NULL;
	json_error_t jerr;
	bool watch = false;
	int opt, ret;

	opterr = 0;
	while ((opt = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		switch (opt) {
		case 'f':
			from = optarg;
			break;
		case 'd':
			file = optarg;
			break;
		case 'W':
			watch = true;
			break;
		COMMON_OPT_CASES;
		}
	}
	if (optind != argc - 1)
		return usage_error(self, "expected one run id");
	if (!from)
		return usage_error(self, "--from names the step to run again");
	body = json_pack("{ss}", "from", from);
	if (file) {
		def = strcmp(file, "-") == 0 ? json_loadf(stdin, 0, &jerr) : json_load_file(file, 0, &jerr);
		if (!def) {
			ret = fail(EXIT_INVALID, "could not read workflow \"%s\": %s (line %d)", file,
				   jerr.text, jerr.line);
			goto out;
		}
		json_object_set(body, "definition", def);
	}
	run_path(&path, argv[optind], "/fork");
	ret = api_call(cn, "POST", path.data, body, NULL, 0, &reply);
	if (ret != EXIT_OK)
		goto out;
	run_id = json_string_value(json_object_get(reply, "run_id"));
	if (!run_id) {
		ret = fail(EXIT_OTHER, "server reply has no run_id");
		goto out;
	}
	if (cn->json && !watch)
		print_json(reply);
	else
		printf("%s\n", run_id);
	fflush(stdout);
	if (watch)
		ret = watch_run(cn, run_id, false);
out:
	buf_release(&path);
	json_decref(def);
	json_decref(body);
	json_decref(reply);
	return ret;
}
