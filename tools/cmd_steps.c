/* cmd_steps: the commands that act on an existing run through cairnd:
 * approve, reject, signal, cancel, retry. */
#include "config.h"
#include "cairn.h"
#include "client.h"

#include <stdio.h>
#include <string.h>

/* approve / reject: POST /v1/runs/RUN/steps/STEP/<verb> {"comment": C}. */
static int decide(struct cairn *cn, const struct cmd *self, int argc, char **argv,
		  const char *verb, const char *done)
{
	static const struct option opts[] = {
		{ "comment", required_argument, NULL, 'c' },
		COMMON_LONGOPTS,
		{ NULL, 0, NULL, 0 }
	};
	const char *comment = NULL;
	struct buf path = BUF_INIT;
	json_t *body = NULL, *reply = NULL;
	int opt, ret;

	opterr = 0;
	while ((opt = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		switch (opt) {
		case 'c':
			comment = optarg;
			break;
		COMMON_OPT_CASES;
		}
	}
	if (optind != argc - 2)
		return usage_error(self, "expected a run id and a step id");
	buf_adds(&path, "/v1/runs/");
	url_escape(&path, argv[optind]);
	buf_adds(&path, "/steps/");
	url_escape(&path, argv[optind + 1]);
	buf_addf(&path, "/%s", verb);
	body = json_object();
	if (comment)
		json_object_set_new(body, "comment", json_string(comment));
	ret = api_call(cn, "POST", path.data, body, NULL, 0, &reply);
	if (ret != EXIT_OK)
		goto out;
	if (cn->json)
		print_json(reply);
	else
		printf("%s step \"%s\" of run %s\n", done, argv[optind + 1], argv[optind]);
out:
	buf_release(&path);
	json_decref(body);
	json_decref(reply);
	return ret;
}

int cmd_approve(struct cairn *cn, const struct cmd *self, int argc, char **argv)
{
	return decide(cn, self, argc, argv, "approve", "approved");
}

int cmd_reject(struct cairn *cn, const struct cmd *self, int argc, char **argv)
{
	return decide(cn, self, argc, argv, "reject", "rejected");
}

int cmd_signal(struct cairn *cn, const struct cmd *self, int argc, char **argv)
{
	static const struct option opts[] = {
		{ "data", required_argument, NULL, 'd' },
		COMMON_LONGOPTS,
		{ NULL, 0, NULL, 0 }
	};
	const char *data_arg = NULL;
	struct buf path = BUF_INIT;
	json_t *body = NULL, *data = NULL, *reply = NULL;
	int opt, ret;

	opterr = 0;
	while ((opt = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		switch (opt) {
		case 'd':
			data_arg = optarg;
			break;
		COMMON_OPT_CASES;
		}
	}
	if (optind != argc - 2)
		return usage_error(self, "expected a run id and a signal name");
	if (data_arg) {
		data = parse_json_arg(data_arg, "--data");
		if (!data)
			return EXIT_INVALID;
	}
	buf_adds(&path, "/v1/runs/");
	url_escape(&path, argv[optind]);
	buf_adds(&path, "/signals/");
	url_escape(&path, argv[optind + 1]);
	body = json_object();
	json_object_set_new(body, "data", data ? data : json_null());
	ret = api_call(cn, "POST", path.data, body, NULL, 0, &reply);
	if (ret != EXIT_OK)
		goto out;
	if (cn->json)
		print_json(reply);
	else
		printf("sent signal \"%s\" to run %s\n", argv[optind + 1], argv[optind]);
out:
	buf_release(&path);
	json_decref(body);
	json_decref(reply);
	return ret;
}

int cmd_cancel(struct cairn *cn, const struct cmd *self, int argc, char **argv)
{
	static const struct option opts[] = {
		{ "reason", required_argument, NULL, 'r' },
		COMMON_LONGOPTS,
		{ NULL, 0, NULL, 0 }
	};
	const char *reason = NULL;
	struct buf path = BUF_INIT;
	json_t *body = NULL, *reply = NULL;
	int opt, ret;

	opterr = 0;
	while ((opt = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		switch (opt) {
		case 'r':
			reason = optarg;
			break;
		COMMON_OPT_CASES;
		}
	}
	if (optind != argc - 1)
		return usage_error(self, "expected one run id");
	buf_adds(&path, "/v1/runs/");
	url_escape(&path, argv[optind]);
	buf_adds(&path, "/cancel");
	body = json_object();
	if (reason)
		json_object_set_new(body, "reason", json_string(reason));
	ret = api_call(cn, "POST", path.data, body, NULL, 0, &reply);
	if (ret != EXIT_OK)
		goto out;
	if (cn->json)
		print_json(reply);
	else
		printf("cancelled run %s\n", argv[optind]);
out:
	buf_release(&path);
	json_decref(body);
	json_decref(reply);
	return ret;
}

int cmd_retry(struct cairn *cn, const struct cmd *self, int argc, char **argv)
{
	static const struct option opts[] = {
		{ "watch", no_argument, NULL, 'W' },
		COMMON_LONGOPTS,
		{ NULL, 0, NULL, 0 }
	};
	struct buf path = BUF_INIT;
	json_t *body = NULL, *reply = NULL, *steps, *st;
	bool watch = false;
	size_t i;
	int opt, ret;

	opterr = 0;
	while ((opt = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		switch (opt) {
		case 'W':
			watch = true;
			break;
		COMMON_OPT_CASES;
		}
	}
	if (optind != argc - 1)
		return usage_error(self, "expected one run id");
	buf_adds(&path, "/v1/runs/");
	url_escape(&path, argv[optind]);
	buf_adds(&path, "/retry");
	body = json_object();
	ret = api_call(cn, "POST", path.data, body, NULL, 0, &reply);
	if (ret != EXIT_OK)
		goto out;
	if (cn->json && !watch) {
		print_json(reply);
	} else {
		printf("retrying run %s:", argv[optind]);
		steps = json_object_get(json_object_get(reply, "result"), "steps");
		json_array_foreach(steps, i, st)
			printf(" %s", json_string_value(st) ? json_string_value(st) : "?");
		printf("\n");
	}
	fflush(stdout);
	if (watch)
		ret = watch_run(cn, argv[optind], false);
out:
	buf_release(&path);
	json_decref(body);
	json_decref(reply);
	return ret;
}
