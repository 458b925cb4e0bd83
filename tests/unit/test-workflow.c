/* test-workflow: the workflow model accepts the examples and the design's
 * definition in normalized form, and refuses every broken rule with the
 * JSON path of the problem. */
#include "workflow.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../tap.h"

#ifndef CAIRN_SRCDIR
#define CAIRN_SRCDIR "."
#endif

/* Test documents are written with ' for " to keep them readable. */
static json_t *J(const char *text)
{
	char *s = xstrdup(text);
	json_error_t jerr;
	json_t *v;

	for (char *p = s; *p; p++)
		if (*p == '\'')
			*p = '"';
	v = json_loads(s, 0, &jerr);
	if (!v)
		bail("bad test document (line %d: %s): %s", jerr.line, jerr.text, s);
	free(s);
	return v;
}

/* Normalizes text; returns the normalized form or NULL (errors shown). */
static json_t *accept(const char *text)
{
	json_t *def = J(text), *out = NULL, *errors = NULL;

	if (workflow_normalize(def, &out, &errors) < 0) {
		char *s = workflow_errors_string(errors);

		diag("refused:\n%s", s);
		free(s);
		json_decref(errors);
		out = NULL;
	}
	json_decref(def);
	return out;
}

static bool has_error(const json_t *errors, const char *path, const char *needle)
{
	json_t *e;
	size_t i;

	json_array_foreach(errors, i, e) {
		const char *p = json_string_value(json_object_get(e, "path"));
		const char *m = json_string_value(json_object_get(e, "message"));

		if (p && m && strcmp(p, path) == 0 && (!needle || strstr(m, needle)))
			return true;
	}
	return false;
}

/* Normalizes def (stolen); returns the errors (new) or NULL when it was accepted. */
static json_t *errors_of(json_t *def)
{
	json_t *out = NULL, *errors = NULL;
	int rc = workflow_normalize(def, &out, &errors);

	json_decref(def);
	if (rc == 0) {
		json_decref(out);
		return NULL;
	}
	if (out)
		diag("out set on failure");
	return errors;
}

/* Checks that text is refused with an error at path whose message has needle. */
static void refused(const char *text, const char *path, const char *needle, const char *name)
{
	json_t *errors = errors_of(J(text));

	if (!ok(errors && has_error(errors, path, needle), "refused: %s (%s)", name, path)) {
		char *s = errors ? workflow_errors_string(errors) : xstrdup("accepted\n");

		diag("got:\n%s", s);
		free(s);
	}
	json_decref(errors);
}

static json_int_t geti(const json_t *v, const char *k1, const char *k2)
{
	json_t *x = json_object_get(v, k1);

	return json_integer_value(k2 ? json_object_get(x, k2) : x);
}

static const char *gets(const json_t *v, const char *k1, const char *k2)
{
	json_t *x = json_object_get(v, k1);

	return json_string_value(k2 ? json_object_get(x, k2) : x);
}

static json_t *step(const json_t *norm, size_t i)
{
	return json_array_get(json_object_get(norm, "steps"), i);
}

static void test_examples(void)
{
	char path[512], err[256];
	json_t *def = NULL, *out = NULL, *errors = NULL, *s;

	snprintf(path, sizeof(path), "%s/examples/hello.json", CAIRN_SRCDIR);
	ok(workflow_load_file(path, &def, err, sizeof(err)) == 0, "hello.json parses");
	ok(workflow_normalize(def, &out, &errors) == 0, "hello.json is valid");
	if (errors) {
		char *e = workflow_errors_string(errors);
		diag("%s", e);
		free(e);
	}
	is_int(json_array_size(json_object_get(out, "steps")), 4, "hello has 4 steps");
	s = step(out, 3);
	is_str(gets(s, "id", NULL), "report", "fan-in step");
	is_int(json_array_size(json_object_get(s, "needs")), 2, "report needs two steps");
	is_str(json_string_value(json_array_get(json_object_get(s, "needs"), 1)), "count-lines",
	       "needs keep their order");
	is_str(gets(step(out, 1), "kind", NULL), "run", "kind run");
	is_str(json_string_value(json_array_get(json_object_get(step(out, 0), "run"), 0)), "sh",
	       "a run string becomes sh -c");
	is_int(geti(step(out, 0), "timeout_ms", NULL), 60000, "defaults.timeout applied");
	is_int(geti(step(out, 0), "retry", "max_attempts"), 2, "defaults.retry.max_attempts applied");
	is_int(geti(step(out, 0), "retry", "initial_ms"), 1000, "defaults.retry.initial applied");
	is_int(geti(step(out, 0), "retry", "max_ms"), 60000, "built-in retry.max kept");
	json_decref(def);
	json_decref(out);
	json_decref(errors);
	def = out = errors = NULL;

	snprintf(path, sizeof(path), "%s/examples/approval.json", CAIRN_SRCDIR);
	ok(workflow_load_file(path, &def, err, sizeof(err)) == 0, "approval.json parses");
	ok(workflow_normalize(def, &out, &errors) == 0, "approval.json is valid");
	s = step(out, 1);
	is_str(gets(s, "kind", NULL), "approval", "approval kind");
	is_int(geti(s, "approval", "timeout_ms"), 86400000, "approval timeout 24h");
	is_str(json_string_value(json_array_get(json_object_get(json_object_get(s, "approval"), "show"), 0)),
	       "prepare", "approval shows prepare");
	s = step(out, 2);
	is_int(geti(s, "retry", "max_attempts"), 4, "apply retries 4 times");
	is_int(json_integer_value(json_array_get(json_object_get(json_object_get(s, "retry"),
		"permanent_exit_codes"), 0)), 2, "permanent exit code 2");
	is_int(geti(s, "timeout_ms", NULL), 120000, "apply timeout 2m");
	json_decref(def);
	json_decref(out);
	json_decref(errors);
}

static void test_design_example(void)
{
	json_t *n = accept(
		"{'name': 'research-and-publish',"
		" 'defaults': {'timeout': '10m', 'retry': {'max_attempts': 3, 'backoff': 'exponential', 'initial': '2s', 'max': '1m'}},"
		" 'steps': ["
		"  {'id': 'plan', 'run': ['python3', 'plan.py']},"
		"  {'id': 'review', 'needs': ['plan'], 'approval': {'prompt': 'Run this plan?', 'timeout': '24h', 'on_timeout': 'reject'}},"
		"  {'id': 'act', 'needs': ['review'], 'run': ['sh', '-c', '...'], 'sandbox': {'network': 'none', 'memory': '512M'}},"
		"  {'id': 'wait', 'needs': ['act'], 'sleep': '1h'},"
		"  {'id': 'publish', 'needs': ['wait'], 'run': ['...'], 'checkpoint': {'every': '30s'}}]}");
	json_t *s;

	ok(n != NULL, "DESIGN.md example is valid");
	if (!n) {
		skip(17, "not normalized");
		return;
	}
	is_str(gets(n, "name", NULL), "research-and-publish", "name kept");
	ok(json_is_null(json_object_get(json_object_get(n, "limits"), "max_steps")), "no limits: null");
	s = step(n, 0);
	is_str(gets(s, "kind", NULL), "run", "plan is a run step");
	is_int(json_array_size(json_object_get(s, "needs")), 0, "needs defaults to []");
	is_str(gets(s, "queue", NULL), "default", "queue default");
	is_int(geti(s, "priority", NULL), 0, "priority default");
	is_str(gets(s, "retry", "backoff"), "exponential", "backoff");
	ok(json_is_true(json_object_get(json_object_get(s, "retry"), "jitter")), "jitter default true");
	ok(json_is_object(json_object_get(s, "env")) && json_is_array(json_object_get(s, "secrets")) &&
	   json_is_null(json_object_get(s, "checkpoint")), "run step defaults: env {}, secrets [], checkpoint null");
	s = step(n, 1);
	is_str(gets(s, "approval", "on_timeout"), "reject", "on_timeout");
	is_int(geti(s, "approval", "quorum"), 1, "quorum defaults to 1");
	is_int(geti(s, "timeout_ms", NULL), 600000, "approval step still has timeout_ms");
	ok(json_object_get(s, "env") == NULL, "approval step has no env");
	s = step(n, 2);
	is_str(gets(s, "sandbox", "network"), "none", "sandbox network");
	is_int(geti(s, "sandbox", "memory"), 512LL << 20, "sandbox memory in bytes");
	is_int(geti(step(n, 3), "sleep_ms", NULL), 3600000, "sleep 1h");
	is_int(geti(step(n, 4), "checkpoint", "every_ms"), 30000, "checkpoint every 30s");
	json_decref(n);
}

static void test_normalized_forms(void)
{
	json_t *n, *s;

	n = accept("{'name': 'w', 'steps': [{'id': 'a', 'run': 'echo hi'}]}");
	s = step(n, 0);
	is_int(json_array_size(json_object_get(s, "run")), 3, "shell string: three args");
	is_str(json_string_value(json_array_get(json_object_get(s, "run"), 2)), "echo hi", "shell string kept");
	is_int(geti(s, "timeout_ms", NULL), 600000, "timeout default 10m");
	is_int(geti(s, "retry", "max_attempts"), 3, "retry default 3 attempts");
	is_int(geti(s, "retry", "initial_ms"), 2000, "retry default initial 2s");
	is_int(geti(s, "retry", "max_ms"), 60000, "retry default max 1m");
	is_int(json_array_size(json_object_get(json_object_get(s, "retry"), "permanent_exit_codes")), 0,
	       "permanent_exit_codes default []");
	json_decref(n);

	n = accept("{'name': 'w', 'version': 2, 'description': 'd', 'input': {'x': [1, 2]},"
		   " 'limits': {'max_steps': 10, 'max_duration': '2h', 'max_attempts_total': 50},"
		   " 'defaults': {'timeout': '30s', 'queue': 'gpu', 'priority': 5,"
		   "   'retry': {'backoff': 'fixed', 'jitter': false, 'permanent_exit_codes': [3, 1, 3]},"
		   "   'env': {'A': '1', 'B': '2'}, 'sandbox': {'memory': '1G', 'pids': 64, 'timeout': '1h'}},"
		   " 'steps': ["
		   "  {'id': 'a', 'run': ['true'], 'env': {'B': 'x', 'C': '3'}, 'sandbox': {'memory': 8388608, 'cpu': 0.5, 'timeout': '10s'},"
		   "   'retry': {'max_attempts': 7}, 'priority': -3, 'secrets': ['db-password'],"
		   "   'approve': {'prompt': 'go?', 'quorum': 2, 'on_reject': 'skip'},"
		   "   'concurrency': {'key': 'github-api', 'limit': 2}, 'rate': {'key': 'x', 'per_minute': 30}},"
		   "  {'id': 'b', 'needs': ['a'], 'wait_signal': 'go'},"
		   "  {'id': 'c', 'needs': ['a'], 'wait_signal': {'name': 'later', 'timeout': 90}, 'timeout': 1.5},"
		   "  {'id': 'd', 'needs': ['b', 'c'], 'approval': {'show': ['a', 'c'], 'on_timeout': 'approve', 'timeout': '1d'}}]}");
	ok(n != NULL, "defaults, limits and every kind accepted");
	if (!n) {
		skip(24, "not normalized");
		return;
	}
	is_int(geti(n, "version", NULL), 2, "version kept");
	is_int(geti(n, "limits", "max_duration_ms"), 7200000, "limits.max_duration_ms");
	is_int(geti(n, "limits", "max_attempts_total"), 50, "limits.max_attempts_total");
	ok(json_is_object(json_object_get(n, "defaults")), "defaults kept for added steps");
	ok(json_is_array(json_object_get(json_object_get(n, "input"), "x")), "input kept");
	s = step(n, 0);
	is_int(geti(step(n, 1), "timeout_ms", NULL), 30000, "defaults.timeout");
	is_str(gets(s, "queue", NULL), "gpu", "defaults.queue");
	is_int(geti(s, "priority", NULL), -3, "step priority overrides defaults");
	is_int(geti(s, "retry", "max_attempts"), 7, "step retry field");
	is_str(gets(s, "retry", "backoff"), "fixed", "defaults retry field kept under step retry");
	ok(json_is_false(json_object_get(json_object_get(s, "retry"), "jitter")), "jitter false");
	is_int(json_array_size(json_object_get(json_object_get(s, "retry"), "permanent_exit_codes")), 2,
	       "exit codes deduplicated");
	is_str(gets(s, "env", "A"), "1", "env from defaults");
	is_str(gets(s, "env", "B"), "x", "step env overrides defaults");
	is_str(gets(s, "env", "C"), "3", "step env");
	is_int(geti(s, "sandbox", "memory"), 8 << 20, "step sandbox overrides defaults");
	is_int(geti(s, "timeout_ms", NULL), 10000, "a shorter sandbox timeout lowers the step's");
	ok(json_object_get(json_object_get(s, "sandbox"), "timeout_ms") == NULL, "sandbox timeout not kept");
	is_int(geti(s, "sandbox", "pids"), 64, "defaults sandbox kept");
	ok(json_real_value(json_object_get(json_object_get(s, "sandbox"), "cpu")) == 0.5, "cpu 0.5");
	is_int(geti(s, "approve", "quorum"), 2, "approve gate quorum");
	is_str(gets(s, "approve", "on_reject"), "skip", "approve gate on_reject");
	is_int(geti(s, "concurrency", "limit"), 2, "concurrency limit");
	is_str(gets(step(n, 1), "signal", "name"), "go", "wait_signal string");
	ok(json_is_null(json_object_get(json_object_get(step(n, 1), "signal"), "timeout_ms")), "signal without timeout");
	is_int(geti(step(n, 2), "signal", "timeout_ms"), 90000, "numeric duration is seconds");
	is_int(geti(step(n, 2), "timeout_ms", NULL), 1500, "fractional seconds");
	is_int(geti(step(n, 3), "approval", "timeout_ms"), 86400000, "approval timeout");
	is_str(gets(step(n, 3), "approval", "on_timeout"), "approve", "approval on_timeout");
	json_decref(n);

	n = accept("{'name': 'w', 'defaults': {'sandbox': {'timeout': '1h'}}, 'steps': [{'id': 'a', 'run': 'x'}]}");
	is_int(geti(step(n, 0), "timeout_ms", NULL), 600000, "a longer sandbox timeout changes nothing");
	ok(json_object_size(json_object_get(step(n, 0), "sandbox")) == 0, "and is not kept");
	json_decref(n);

	n = accept("{'name': 'w', 'steps': [{'id': 'a', 'run': ['x'], 'sandbox': {"
		   " 'network': {'allow': ['api.example.com:443', '[::1]:8080', '*.example.org:80']},"
		   " 'timeout': '5m', 'rootfs': '/srv/root', 'mounts': [{'src': '/data', 'dst': '/mnt/data', 'rw': true}],"
		   " 'seccomp': {'deny': ['ptrace'], 'enosys': ['io_uring_setup']}, 'on_output_cap': 'truncate',"
		   " 'output_limit': '1M', 'file_size': '10G', 'nofile': 1024, 'tmp_size': '64M',"
		   " 'cpu_time': '1m', 'kill_grace': '5s', 'unix_sockets': true}}]}");
	s = json_object_get(step(n, 0), "sandbox");
	ok(n && s, "full sandbox accepted");
	is_int(json_array_size(json_object_get(json_object_get(s, "network"), "allow")), 3, "network allow list");
	is_int(geti(step(n, 0), "timeout_ms", NULL), 300000, "sandbox timeout lowers the step timeout");
	ok(json_is_true(json_object_get(json_array_get(json_object_get(s, "mounts"), 0), "rw")), "mount rw");
	is_int(geti(s, "output", NULL), 1 << 20, "output_limit becomes output, in bytes");
	is_int(geti(s, "file_size", NULL), 10LL << 30, "file_size in bytes");
	is_int(geti(s, "open_files", NULL), 1024, "nofile becomes open_files");
	is_int(geti(s, "tmp_size", NULL), 64 << 20, "tmp_size in bytes");
	is_int(geti(s, "cpu_time_ms", NULL), 60000, "cpu_time_ms");
	is_int(geti(s, "kill_grace_ms", NULL), 5000, "kill_grace_ms");
	ok(json_is_true(json_object_get(s, "unix_sockets")), "unix_sockets");
	is_str(gets(s, "on_output_cap", NULL), "truncate", "on_output_cap");
	is_str(json_string_value(json_array_get(json_object_get(json_object_get(s, "seccomp"), "deny"), 0)),
	       "ptrace", "seccomp deny");
	json_decref(n);
}

static void test_root_errors(void)
{
	json_t *e;

	e = errors_of(json_array());
	ok(e && has_error(e, "$", "must be an object"), "root must be an object");
	json_decref(e);
	e = errors_of(NULL);
	ok(e && has_error(e, "$", NULL), "NULL definition refused");
	json_decref(e);

	refused("{'steps': [{'id': 'a', 'run': 'x'}]}", "$", "missing \"name\"", "missing name");
	refused("{'name': 'w'}", "$", "missing \"steps\"", "missing steps");
	refused("{'name': 'w', 'steps': []}", "$.steps", "empty", "empty steps");
	refused("{'name': 'w', 'steps': {}}", "$.steps", "must be an array", "steps wrong type");
	refused("{'name': 'has space', 'steps': [{'id': 'a', 'run': 'x'}]}", "$.name", "invalid workflow name",
		"name characters");
	refused("{'name': '', 'steps': [{'id': 'a', 'run': 'x'}]}", "$.name", NULL, "empty name");
	refused("{'name': 1, 'steps': [{'id': 'a', 'run': 'x'}]}", "$.name", "must be a string", "name type");
	refused("{'name': 'w', 'bogus': 1, 'steps': [{'id': 'a', 'run': 'x'}]}", "$.bogus", "unknown key",
		"unknown root key");
	refused("{'name': 'w', 'a b': 1, 'steps': [{'id': 'a', 'run': 'x'}]}", "$[\"a b\"]", "unknown key",
		"unknown key with a space is quoted in the path");
	refused("{'name': 'w', 'version': [], 'steps': [{'id': 'a', 'run': 'x'}]}", "$.version", NULL, "version type");
	refused("{'name': 'w', 'description': 5, 'steps': [{'id': 'a', 'run': 'x'}]}", "$.description",
		"must be a string", "description type");

	{
		char name[200];
		char doc[400];

		memset(name, 'n', 129);
		name[129] = '\0';
		snprintf(doc, sizeof(doc), "{'name': '%s', 'steps': [{'id': 'a', 'run': 'x'}]}", name);
		refused(doc, "$.name", NULL, "name of 129 chars");
		name[128] = '\0';
		snprintf(doc, sizeof(doc), "{'name': '%s', 'steps': [{'id': 'a', 'run': 'x'}]}", name);
		e = J(doc);
		ok(errors_of(e) == NULL, "name of 128 chars accepted");
	}

	/* 1001 steps */
	{
		json_t *def = J("{'name': 'w', 'steps': []}"), *steps = json_object_get(def, "steps");

		for (int i = 0; i < WORKFLOW_MAX_STEPS + 1; i++) {
			char id[16];

			snprintf(id, sizeof(id), "s%d", i);
			json_array_append_new(steps, json_pack("{s:s, s:s}", "id", id, "run", "true"));
		}
		e = errors_of(json_incref(def));
		ok(e && has_error(e, "$.steps", "too many steps"), "more than 1000 steps refused");
		json_decref(e);
		json_array_remove(steps, 0);
		ok(errors_of(def) == NULL, "1000 steps accepted");
	}

	refused("{'name': 'w', 'limits': {'max_steps': 1}, 'steps': [{'id': 'a', 'run': 'x'}, {'id': 'b', 'run': 'x'}]}",
		"$.steps", "max_steps", "more steps than limits.max_steps");
	refused("{'name': 'w', 'limits': {'max_steps': 0}, 'steps': [{'id': 'a', 'run': 'x'}]}",
		"$.limits.max_steps", "between", "limits.max_steps 0");
	refused("{'name': 'w', 'limits': {'max_time': '1h'}, 'steps': [{'id': 'a', 'run': 'x'}]}",
		"$.limits.max_time", "unknown key", "unknown limits key");
	refused("{'name': 'w', 'limits': {'max_duration': 'soon'}, 'steps': [{'id': 'a', 'run': 'x'}]}",
		"$.limits.max_duration", "invalid duration", "limits.max_duration");
	refused("{'name': 'w', 'limits': [], 'steps': [{'id': 'a', 'run': 'x'}]}", "$.limits", "must be an object",
		"limits type");
	refused("{'name': 'w', 'defaults': {'memory': '1G'}, 'steps': [{'id': 'a', 'run': 'x'}]}",
		"$.defaults.memory", "unknown key", "unknown defaults key");
	refused("{'name': 'w', 'defaults': {'retry': {'tries': 2}}, 'steps': [{'id': 'a', 'run': 'x'}]}",
		"$.defaults.retry.tries", "unknown key", "unknown defaults.retry key");
	refused("{'name': 'w', 'defaults': {'timeout': 'never'}, 'steps': [{'id': 'a', 'run': 'x'}]}",
		"$.defaults.timeout", "invalid duration", "defaults.timeout");
	refused("{'name': 'w', 'defaults': {'queue': 'a/b'}, 'steps': [{'id': 'a', 'run': 'x'}]}",
		"$.defaults.queue", "invalid queue name", "defaults.queue");
	refused("{'name': 'w', 'defaults': {'retry': {'initial': '2m'}}, 'steps': [{'id': 'a', 'run': 'x'}]}",
		"$.defaults.retry", "less than initial", "retry max below initial");
}

static void test_step_errors(void)
{
	refused("{'name': 'w', 'steps': [{'id': 'a', 'run': 'x', 'bogus': 1}]}", "$.steps[0].bogus",
		"unknown key \"bogus\"", "unknown step key");
	refused("{'name': 'w', 'steps': [{'id': 'a', 'run': 'x', 'retry': {'attempts': 2}}]}",
		"$.steps[0].retry.attempts", "unknown key", "unknown retry key");
	refused("{'name': 'w', 'steps': [5]}", "$.steps[0]", "must be an object", "step type");
	refused("{'name': 'w', 'steps': [{'run': 'x'}]}", "$.steps[0]", "missing \"id\"", "missing id");
	refused("{'name': 'w', 'steps': [{'id': 'a.b', 'run': 'x'}]}", "$.steps[0].id", "invalid step id", "id characters");
	refused("{'name': 'w', 'steps': [{'id': 7, 'run': 'x'}]}", "$.steps[0].id", "must be a string", "id type");
	refused("{'name': 'w', 'steps': [{'id': 'a', 'run': 'x'}, {'id': 'a', 'run': 'y'}]}", "$.steps[1].id",
		"duplicate step id \"a\"", "duplicate ids");
	refused("{'name': 'w', 'steps': [{'id': 'a'}]}", "$.steps[0]", "missing kind", "no kind");
	refused("{'name': 'w', 'steps': [{'id': 'a', 'run': 'x', 'sleep': '1s'}]}", "$.steps[0]",
		"has both \"run\" and \"sleep\"", "two kinds");
	refused("{'name': 'w', 'steps': [{'id': 'a', 'run': []}]}", "$.steps[0].run", "empty", "empty run");
	refused("{'name': 'w', 'steps': [{'id': 'a', 'run': ''}]}", "$.steps[0].run", "empty", "empty run string");
	refused("{'name': 'w', 'steps': [{'id': 'a', 'run': ['ls', 3]}]}", "$.steps[0].run[1]", "must be a string",
		"run arg type");
	refused("{'name': 'w', 'steps': [{'id': 'a', 'run': {'cmd': 'ls'}}]}", "$.steps[0].run", "must be an array",
		"run type");

	refused("{'name': 'w', 'steps': [{'id': 'a', 'run': 'x', 'needs': ['nope']}]}", "$.steps[0].needs[0]",
		"unknown step \"nope\"", "missing need");
	refused("{'name': 'w', 'steps': [{'id': 'a', 'run': 'x', 'needs': ['a']}]}", "$.steps[0].needs[0]",
		"needs itself", "need on itself");
	refused("{'name': 'w', 'steps': [{'id': 'a', 'run': 'x'}, {'id': 'b', 'run': 'x', 'needs': ['a', 'a']}]}",
		"$.steps[1].needs[1]", "duplicate need", "duplicate need");
	refused("{'name': 'w', 'steps': [{'id': 'a', 'run': 'x', 'needs': 'b'}, {'id': 'b', 'run': 'x'}]}",
		"$.steps[0].needs", "must be an array", "needs type");
	refused("{'name': 'w', 'steps': [{'id': 'a', 'run': 'x', 'needs': ['b']}, {'id': 'b', 'run': 'x', 'needs': ['a']}]}",
		"$.steps[0].needs", "dependency cycle: a -> b -> a", "cycle a -> b -> a");
	refused("{'name': 'w', 'steps': [{'id': 'z', 'run': 'x'},"
		" {'id': 'a', 'run': 'x', 'needs': ['z', 'c']}, {'id': 'b', 'run': 'x', 'needs': ['a']},"
		" {'id': 'c', 'run': 'x', 'needs': ['b']}, {'id': 'd', 'run': 'x', 'needs': ['c']}]}",
		"$.steps[1].needs", "dependency cycle: a -> c -> b -> a", "cycle of three");

	refused("{'name': 'w', 'steps': [{'id': 'a', 'run': 'x', 'timeout': '10x'}]}", "$.steps[0].timeout",
		"invalid duration \"10x\"", "bad timeout");
	refused("{'name': 'w', 'steps': [{'id': 'a', 'run': 'x', 'timeout': '0s'}]}", "$.steps[0].timeout",
		"at least", "zero timeout");
	refused("{'name': 'w', 'steps': [{'id': 'a', 'run': 'x', 'timeout': 1e12}]}", "$.steps[0].timeout",
		"invalid duration", "absurd numeric timeout");
	refused("{'name': 'w', 'steps': [{'id': 'a', 'run': 'x', 'timeout': -5}]}", "$.steps[0].timeout",
		"invalid duration", "negative timeout");
	refused("{'name': 'w', 'steps': [{'id': 'a', 'run': 'x', 'timeout': '400d'}]}", "$.steps[0].timeout",
		"too long", "timeout over a year");
	refused("{'name': 'w', 'steps': [{'id': 'a', 'run': 'x', 'timeout': true}]}", "$.steps[0].timeout",
		"must be a duration", "timeout type");
	refused("{'name': 'w', 'steps': [{'id': 'a', 'sleep': 'forever'}]}", "$.steps[0].sleep", "invalid duration",
		"bad sleep");
	refused("{'name': 'w', 'steps': [{'id': 'a', 'sleep': '0x10s'}]}", "$.steps[0].sleep", "invalid duration",
		"hexadecimal duration");
	refused("{'name': 'w', 'steps': [{'id': 'a', 'sleep': '1e3'}]}", "$.steps[0].sleep", "invalid duration",
		"duration with an exponent");
	refused("{'name': 'w', 'steps': [{'id': 'a', 'run': 'x', 'sandbox': {'memory': '0x100000'}}]}",
		"$.steps[0].sandbox.memory", "invalid size", "hexadecimal size");
	refused("{'name': 'w', 'steps': [{'id': 'a', 'run': 'x', 'sandbox': {'memory': '1e9'}}]}",
		"$.steps[0].sandbox.memory", "invalid size", "size with an exponent");
	refused("{'name': 'w', 'steps': [{'id': 'a', 'run': 'x', 'retry': {'initial': '-1s'}}]}",
		"$.steps[0].retry.initial", "invalid duration", "bad retry.initial");
	refused("{'name': 'w', 'steps': [{'id': 'a', 'run': 'x', 'retry': {'max': '1 m'}}]}",
		"$.steps[0].retry.max", "invalid duration", "bad retry.max");
	refused("{'name': 'w', 'steps': [{'id': 'a', 'run': 'x', 'checkpoint': {'every': '1ms'}}]}",
		"$.steps[0].checkpoint.every", "at least", "checkpoint too often");
	refused("{'name': 'w', 'steps': [{'id': 'a', 'run': 'x', 'checkpoint': {}}]}",
		"$.steps[0].checkpoint", "missing \"every\"", "checkpoint without every");
	refused("{'name': 'w', 'steps': [{'id': 'a', 'approval': {'timeout': 'a day'}}]}",
		"$.steps[0].approval.timeout", "invalid duration", "bad approval.timeout");

	refused("{'name': 'w', 'steps': [{'id': 'a', 'run': 'x', 'retry': {'max_attempts': 0}}]}",
		"$.steps[0].retry.max_attempts", "between 1 and 100", "max_attempts 0");
	refused("{'name': 'w', 'steps': [{'id': 'a', 'run': 'x', 'retry': {'max_attempts': 101}}]}",
		"$.steps[0].retry.max_attempts", "between 1 and 100", "max_attempts 101");
	refused("{'name': 'w', 'steps': [{'id': 'a', 'run': 'x', 'retry': {'max_attempts': 2.5}}]}",
		"$.steps[0].retry.max_attempts", "must be an integer", "max_attempts real");
	refused("{'name': 'w', 'steps': [{'id': 'a', 'run': 'x', 'retry': {'backoff': 'linear'}}]}",
		"$.steps[0].retry.backoff", "invalid backoff", "backoff");
	refused("{'name': 'w', 'steps': [{'id': 'a', 'run': 'x', 'retry': {'jitter': 'yes'}}]}",
		"$.steps[0].retry.jitter", "true or false", "jitter type");
	refused("{'name': 'w', 'steps': [{'id': 'a', 'run': 'x', 'retry': {'permanent_exit_codes': [0]}}]}",
		"$.steps[0].retry.permanent_exit_codes[0]", "between 1 and 255", "exit code 0");
	refused("{'name': 'w', 'steps': [{'id': 'a', 'run': 'x', 'retry': {'permanent_exit_codes': [2, 256]}}]}",
		"$.steps[0].retry.permanent_exit_codes[1]", "between 1 and 255", "exit code 256");
	refused("{'name': 'w', 'steps': [{'id': 'a', 'run': 'x', 'retry': {'permanent_exit_codes': 2}}]}",
		"$.steps[0].retry.permanent_exit_codes", "must be an array", "exit codes type");
	refused("{'name': 'w', 'steps': [{'id': 'a', 'run': 'x', 'retry': 3}]}", "$.steps[0].retry",
		"must be an object", "retry type");

	refused("{'name': 'w', 'steps': [{'id': 'a', 'run': 'x', 'queue': 'a b'}]}", "$.steps[0].queue",
		"invalid queue name", "queue characters");
	refused("{'name': 'w', 'steps': [{'id': 'a', 'run': 'x', 'priority': 1001}]}", "$.steps[0].priority",
		"between -1000 and 1000", "priority too high");
	refused("{'name': 'w', 'steps': [{'id': 'a', 'run': 'x', 'priority': 1.5}]}", "$.steps[0].priority",
		"must be an integer", "priority real");
	refused("{'name': 'w', 'steps': [{'id': 'a', 'run': 'x', 'priority': 1e300}]}", "$.steps[0].priority",
		"must be an integer", "priority huge real");
	refused("{'name': 'w', 'steps': [{'id': 'a', 'run': 'x', 'priority': -9223372036854775807}]}",
		"$.steps[0].priority", "between", "priority huge integer");

	refused("{'name': 'w', 'steps': [{'id': 'a', 'run': 'x', 'env': {'A': 1}}]}", "$.steps[0].env.A",
		"must be a string", "env value type");
	refused("{'name': 'w', 'steps': [{'id': 'a', 'run': 'x', 'env': {'A=B': 'x'}}]}", "$.steps[0].env[\"A=B\"]",
		"invalid variable name", "env name with =");
	refused("{'name': 'w', 'steps': [{'id': 'a', 'run': 'x', 'env': {'': 'x'}}]}", "$.steps[0].env[\"\"]",
		"invalid variable name", "empty env name");
	refused("{'name': 'w', 'steps': [{'id': 'a', 'run': 'x', 'env': {'CAIRN_IN': '/'}}]}",
		"$.steps[0].env.CAIRN_IN", "reserved", "env CAIRN_ reserved");
	refused("{'name': 'w', 'steps': [{'id': 'a', 'run': 'x', 'env': ['A']}]}", "$.steps[0].env",
		"must be an object", "env type");
	{
		json_t *def = J("{'name': 'w', 'steps': [{'id': 'a', 'run': 'x', 'env': {}}]}");
		json_t *env = json_object_get(json_array_get(json_object_get(def, "steps"), 0), "env"), *e;

		for (int i = 0; i < 257; i++) {
			char k[16];

			snprintf(k, sizeof(k), "V%d", i);
			json_object_set_new(env, k, json_string("x"));
		}
		e = errors_of(def);
		ok(e && has_error(e, "$.steps[0].env", "too many variables"), "more than 256 env entries refused");
		json_decref(e);
	}
	refused("{'name': 'w', 'steps': [{'id': 'a', 'run': 'x', 'secrets': 'token'}]}", "$.steps[0].secrets",
		"must be an array", "secrets type");
	refused("{'name': 'w', 'steps': [{'id': 'a', 'run': 'x', 'secrets': ['a/b']}]}", "$.steps[0].secrets[0]",
		"invalid secret name", "secret name");

	refused("{'name': 'w', 'steps': [{'id': 'a', 'run': 'x', 'sandbox': {'gpu': 1}}]}", "$.steps[0].sandbox.gpu",
		"unknown key", "unknown sandbox key");
	refused("{'name': 'w', 'steps': [{'id': 'a', 'run': 'x', 'sandbox': {'memory': 'lots'}}]}",
		"$.steps[0].sandbox.memory", "invalid size", "sandbox memory");
	refused("{'name': 'w', 'steps': [{'id': 'a', 'run': 'x', 'sandbox': {'memory': 0}}]}",
		"$.steps[0].sandbox.memory", "between", "sandbox memory 0");
	refused("{'name': 'w', 'steps': [{'id': 'a', 'run': 'x', 'sandbox': {'network': 'all'}}]}",
		"$.steps[0].sandbox.network", "invalid network", "sandbox network string");
	refused("{'name': 'w', 'steps': [{'id': 'a', 'run': 'x', 'sandbox': {'network': {'allow': ['example.com']}}}]}",
		"$.steps[0].sandbox.network.allow[0]", "host:port", "network entry without port");
	refused("{'name': 'w', 'steps': [{'id': 'a', 'run': 'x', 'sandbox': {'network': {'allow': ['h:99999']}}}]}",
		"$.steps[0].sandbox.network.allow[0]", "host:port", "network port out of range");
	refused("{'name': 'w', 'steps': [{'id': 'a', 'run': 'x', 'sandbox': {'mounts': [{'src': 'data', 'dst': '/d'}]}}]}",
		"$.steps[0].sandbox.mounts[0].src", "absolute", "relative mount source");
	refused("{'name': 'w', 'steps': [{'id': 'a', 'run': 'x', 'sandbox': {'mounts': [{'src': '/a/../etc', 'dst': '/d'}]}}]}",
		"$.steps[0].sandbox.mounts[0].src", "..", "mount with ..");
	refused("{'name': 'w', 'steps': [{'id': 'a', 'run': 'x', 'sandbox': {'mounts': [{'src': '/a'}]}}]}",
		"$.steps[0].sandbox.mounts[0]", "missing \"dst\"", "mount without dst");
	refused("{'name': 'w', 'steps': [{'id': 'a', 'run': 'x', 'sandbox': {'seccomp': {'deny': ['Bad']}}}]}",
		"$.steps[0].sandbox.seccomp.deny[0]", "system call", "seccomp name");
	refused("{'name': 'w', 'steps': [{'id': 'a', 'run': 'x', 'sandbox': {'cpu': 'two'}}]}",
		"$.steps[0].sandbox.cpu", "number of CPUs", "cpu type");
	refused("{'name': 'w', 'steps': [{'id': 'a', 'run': 'x', 'sandbox': {'cpu': 0}}]}",
		"$.steps[0].sandbox.cpu", "0.01", "cpu 0");
	refused("{'name': 'w', 'steps': [{'id': 'a', 'run': 'x', 'sandbox': {'pids': 1}}]}",
		"$.steps[0].sandbox.pids", "between 2", "pids");
	refused("{'name': 'w', 'steps': [{'id': 'a', 'run': 'x', 'sandbox': {'memory': '1M'}}]}",
		"$.steps[0].sandbox.memory", "at least 4M", "memory below what the sandbox takes");
	refused("{'name': 'w', 'steps': [{'id': 'a', 'run': 'x', 'sandbox': {'seccomp': {'allow': ['ptrace']}}}]}",
		"$.steps[0].sandbox.seccomp", "only add refusals", "seccomp allow from a step");
	refused("{'name': 'w', 'steps': [{'id': 'a', 'run': 'x', 'sandbox': {'output': '1M', 'output_limit': '2M'}}]}",
		"$.steps[0].sandbox.output_limit", "twice", "one setting under two names");
	refused("{'name': 'w', 'steps': [{'id': 'a', 'run': 'x', 'sandbox': {'on_output_cap': 'drop'}}]}",
		"$.steps[0].sandbox.on_output_cap", "kill", "on_output_cap");

	refused("{'name': 'w', 'steps': [{'id': 'a', 'approval': {'on_timeout': 'maybe'}}]}",
		"$.steps[0].approval.on_timeout", "invalid on_timeout", "on_timeout");
	refused("{'name': 'w', 'steps': [{'id': 'a', 'approval': {'quorum': 0}}]}",
		"$.steps[0].approval.quorum", "between 1", "quorum 0");
	refused("{'name': 'w', 'steps': [{'id': 'a', 'approval': {'show': ['ghost']}}]}",
		"$.steps[0].approval.show[0]", "unknown step \"ghost\"", "show unknown step");
	refused("{'name': 'w', 'steps': [{'id': 'a', 'approval': {'ask': 'x'}}]}",
		"$.steps[0].approval.ask", "unknown key", "unknown approval key");
	refused("{'name': 'w', 'steps': [{'id': 'a', 'approval': 'yes'}]}", "$.steps[0].approval",
		"must be an object", "approval type");
	refused("{'name': 'w', 'steps': [{'id': 'a', 'wait_signal': 'a b'}]}", "$.steps[0].wait_signal",
		"invalid signal name", "signal name");
	refused("{'name': 'w', 'steps': [{'id': 'a', 'wait_signal': {'timeout': '1h'}}]}", "$.steps[0].wait_signal",
		"missing \"name\"", "signal without name");
	refused("{'name': 'w', 'steps': [{'id': 'a', 'wait_signal': 3}]}", "$.steps[0].wait_signal",
		"must be a signal name", "wait_signal type");
	refused("{'name': 'w', 'steps': [{'id': 'a', 'sleep': '1s', 'env': {'A': 'b'}}]}", "$.steps[0].env",
		"only allowed on run steps", "env on a sleep step");
	refused("{'name': 'w', 'steps': [{'id': 'a', 'approval': {}, 'sandbox': {}}]}", "$.steps[0].sandbox",
		"only allowed on run steps", "sandbox on an approval step");
	refused("{'name': 'w', 'steps': [{'id': 'a', 'run': 'x', 'concurrency': {'key': 'k'}}]}",
		"$.steps[0].concurrency", "missing \"limit\"", "concurrency without limit");
	refused("{'name': 'w', 'steps': [{'id': 'a', 'run': 'x', 'rate': {'key': 'k', 'per_minute': 0}}]}",
		"$.steps[0].rate.per_minute", "between", "rate 0");
	refused("{'name': 'w', 'steps': [{'id': 'a', 'run': 'x', 'description': []}]}",
		"$.steps[0].description", "must be a string", "step description type");
}

static void test_many_errors(void)
{
	json_t *e = errors_of(J(
		"{'name': 'bad name', 'color': 'red',"
		" 'steps': [{'id': 'a', 'run': 'x', 'timeout': 'soon', 'retry': {'max_attempts': 0, 'tries': 1}},"
		"  {'id': 'a', 'sleep': '1s'},"
		"  {'id': 'b', 'needs': ['a', 'c'], 'run': []},"
		"  {'id': 'c', 'needs': ['b'], 'approval': {'show': ['nope']}}]}"));
	static const char *const want[][2] = {
		{ "$.name", "invalid workflow name" },
		{ "$.color", "unknown key" },
		{ "$.steps[0].timeout", "invalid duration" },
		{ "$.steps[0].retry.max_attempts", "between" },
		{ "$.steps[0].retry.tries", "unknown key" },
		{ "$.steps[1].id", "duplicate step id" },
		{ "$.steps[2].run", "empty" },
		{ "$.steps[3].approval.show[0]", "unknown step" },
		{ "$.steps[2].needs", "dependency cycle: b -> c -> b" },
	};
	size_t n = sizeof(want) / sizeof(want[0]);

	ok(e && json_array_size(e) == n, "all %zu errors reported at once (got %zu)", n, json_array_size(e));
	for (size_t i = 0; i < n; i++)
		ok(e && has_error(e, want[i][0], want[i][1]), "listed: %s", want[i][0]);
	if (e) {
		char *s = workflow_errors_string(e);

		ok(strstr(s, "$.steps[1].id: duplicate step id \"a\"") != NULL, "errors format as path: message");
		free(s);
	}
	json_decref(e);

	/* The error list is capped. */
	{
		json_t *def = J("{'name': 'w', 'steps': []}"), *steps = json_object_get(def, "steps");

		for (int i = 0; i < 500; i++)
			json_array_append_new(steps, json_pack("{s:s, s:s}", "id", "bad id", "run", "x"));
		e = errors_of(def);
		is_int(json_array_size(e), WORKFLOW_MAX_ERRORS + 1, "errors capped at %d plus one", WORKFLOW_MAX_ERRORS);
		ok(has_error(e, "$", "too many errors"), "last error says more were dropped");
		json_decref(e);
	}
}

static void test_hostile(void)
{
	json_t *def, *deep, *e;
	char err[256];
	char path[] = "/tmp/cn.wfXXXXXX";
	int fd;
	FILE *f;

	/* Deep nesting built in memory (the parser would stop it first). */
	deep = json_array();
	for (int i = 0; i < 100000; i++) {
		json_t *outer = json_array();

		json_array_append_new(outer, deep);
		deep = outer;
	}
	def = J("{'name': 'w', 'steps': [{'id': 'a', 'run': 'x'}]}");
	json_object_set(def, "input", deep);
	e = errors_of(def);
	ok(e && has_error(e, "$.input", "nested too deeply"), "deeply nested input refused");
	json_decref(e);
	def = J("{'name': 'w', 'steps': [{'id': 'a', 'run': 'x'}]}");
	json_object_set(json_array_get(json_object_get(def, "steps"), 0), "sandbox", deep);
	json_object_set(json_array_get(json_object_get(def, "steps"), 0), "needs", deep);
	e = errors_of(def);
	ok(e && has_error(e, "$.steps[0].sandbox", NULL) && has_error(e, "$.steps[0].needs[0]", NULL),
	   "deep values in known keys refused without descending");
	json_decref(e);
	def = J("{'name': 'w', 'defaults': {}, 'steps': [{'id': 'a', 'run': 'x'}]}");
	json_object_set(json_object_get(def, "defaults"), "bogus", deep);
	e = errors_of(def);
	ok(e && has_error(e, "$.defaults.bogus", "unknown key"), "deep value under defaults refused, not copied");
	json_decref(e);
	/* Freeing deep nesting recurses in jansson; unwind it by hand. */
	while (json_array_size(deep)) {
		json_t *inner = json_incref(json_array_get(deep, 0));

		json_decref(deep);
		deep = inner;
	}
	json_decref(deep);

	/* Strings with NUL bytes built in memory. */
	def = J("{'name': 'w', 'steps': [{'id': 'a', 'run': ['x']}]}");
	json_array_append_new(json_object_get(json_array_get(json_object_get(def, "steps"), 0), "run"),
			      json_stringn("a\0b", 3));
	e = errors_of(def);
	ok(e && has_error(e, "$.steps[0].run[1]", "NUL"), "NUL in an argument refused");
	json_decref(e);

	/* Files: syntax errors report line and column; size is capped. */
	fd = mkstemp(path);
	f = fdopen(fd, "w");
	fputs("{\n  \"name\": \"w\",\n  \"steps\": [,]\n}\n", f);
	fclose(f);
	ok(workflow_load_file(path, &def, err, sizeof(err)) < 0 && def == NULL, "syntax error refused");
	ok(strstr(err, "line 3") && strstr(err, "column"), "syntax error has line and column: %s", err);
	f = fopen(path, "w");
	fputs("{\"name\": \"a\", \"name\": \"b\"}", f);
	fclose(f);
	ok(workflow_load_file(path, &def, err, sizeof(err)) < 0, "duplicate keys refused: %s", err);
	f = fopen(path, "w");
	for (int i = 0; i < WORKFLOW_MAX_FILE / 8 + 1; i++)
		fputs("        ", f);
	fclose(f);
	ok(workflow_load_file(path, &def, err, sizeof(err)) < 0 && strstr(err, "larger than"),
	   "oversized file refused: %s", err);
	unlink(path);
	ok(workflow_load_file(path, &def, err, sizeof(err)) < 0 && strstr(err, "could not read"),
	   "missing file refused: %s", err);
	ok(workflow_load_buffer("[1,", 3, "body", &def, err, sizeof(err)) < 0 && strstr(err, "body"),
	   "buffer syntax error names the source: %s", err);
}

static void test_add_steps(void)
{
	json_t *run = accept("{'name': 'w', 'limits': {'max_steps': 4}, 'defaults': {'queue': 'q1', 'timeout': '5s'},"
			     " 'steps': [{'id': 'plan', 'run': 'x'}, {'id': 'act', 'needs': ['plan'], 'run': 'y'}]}");
	json_t *add, *out = NULL, *errors = NULL;

	add = J("[{'id': 'observe', 'needs': ['act'], 'run': 'z'}, {'id': 'plan2', 'needs': ['observe', 'plan'], 'run': 'z'}]");
	ok(workflow_normalize_steps(run, add, &out, &errors) == 0, "added steps accepted");
	is_int(json_array_size(out), 2, "two steps normalized");
	is_str(gets(json_array_get(out, 0), "queue", NULL), "q1", "added steps get the run's defaults");
	is_int(geti(json_array_get(out, 1), "timeout_ms", NULL), 5000, "defaults.timeout for added steps");
	json_decref(add);
	json_decref(out);

	add = J("[{'id': 'plan', 'run': 'z'}, {'id': 'x', 'needs': ['ghost'], 'run': 'z'}]");
	ok(workflow_normalize_steps(run, add, &out, &errors) < 0 && out == NULL, "bad added steps refused");
	ok(has_error(errors, "$.cairn.add_steps[0].id", "already in the run"), "id already in the run");
	ok(has_error(errors, "$.cairn.add_steps[1].needs[0]", "unknown step"), "added step needs a missing step");
	json_decref(add);
	json_decref(errors);

	add = J("[{'id': 'a', 'run': 'z'}, {'id': 'b', 'run': 'z'}, {'id': 'c', 'run': 'z'}]");
	ok(workflow_normalize_steps(run, add, &out, &errors) < 0 &&
	   has_error(errors, "$.cairn.add_steps", "max_steps"), "limits.max_steps applies to added steps");
	json_decref(add);
	json_decref(errors);

	add = J("[{'id': 'a', 'needs': ['b'], 'run': 'z'}, {'id': 'b', 'needs': ['a'], 'run': 'z'}]");
	ok(workflow_normalize_steps(run, add, &out, &errors) < 0 &&
	   has_error(errors, "$.cairn.add_steps[0].needs", "cycle"), "cycles among added steps refused");
	json_decref(add);
	json_decref(errors);

	ok(workflow_normalize_steps(run, NULL, &out, &errors) < 0 &&
	   has_error(errors, "$.cairn.add_steps", "must be an array"), "add_steps must be an array");
	json_decref(errors);
	json_decref(run);
}

static void test_open_world_and_children(void)
{
	json_t *ctx = J("{'defaults': {'queue': 'q2'}, 'limits': {'max_steps': 100}}");
	json_t *add, *out = NULL, *errors = NULL, *n;

	add = J("[{'id': 'next', 'needs': ['added-earlier'], 'run': 'z'}]");
	ok(workflow_normalize_steps(ctx, add, &out, &errors) == 0,
	   "without the run's steps, needs outside the batch are left to the store");
	is_str(gets(json_array_get(out, 0), "queue", NULL), "q2", "and defaults still apply");
	json_decref(add);
	json_decref(out);
	json_decref(ctx);

	n = accept("{'name': 'p', 'steps': [{'id': 'c', 'workflow': {'definition': "
		   "{'name': 'kid', 'steps': [{'id': 'k', 'run': 'true'}]}, 'input': {'a': 1}}}]}");
	ok(n != NULL, "an inline child workflow is accepted");
	is_str(gets(step(n, 0), "kind", NULL), "workflow", "its kind is workflow");
	is_int(geti(json_array_get(json_object_get(json_object_get(json_object_get(step(n, 0), "workflow"),
		"definition"), "steps"), 0), "timeout_ms", NULL), 600000, "the child definition is normalized too");
	json_decref(n);
	n = accept("{'name': 'p', 'steps': [{'id': 'c', 'workflow': {'name': 'stored', 'version': 2}}]}");
	ok(n != NULL && geti(step(n, 0), "workflow", "version") == 2, "a child workflow by name and version");
	json_decref(n);
	refused("{'name': 'p', 'steps': [{'id': 'c', 'workflow': {'definition': {'name': 'kid', 'steps': "
		"[{'id': 'k', 'run': 'true', 'bogus': 1}]}}}]}", "$.steps[0].workflow.definition.steps[0].bogus",
		"unknown key", "an inline child's errors carry their full path");
	refused("{'name': 'p', 'steps': [{'id': 'c', 'workflow': {'name': 'a', 'definition': {}}}]}",
		"$.steps[0].workflow", "exactly one", "a child has a definition or a name, not both");
	refused("{'name': 'p', 'steps': [{'id': 'c', 'workflow': {'definition': {'name': 'a', 'steps': [{'id': 'b',"
		" 'workflow': {'definition': {'name': 'a', 'steps': [{'id': 'b', 'workflow': {'definition': {'name':"
		" 'a', 'steps': [{'id': 'b', 'workflow': {'definition': {'name': 'a', 'steps': [{'id': 'b',"
		" 'workflow': {'definition': {'name': 'a', 'steps': [{'id': 'b', 'run': 'x'}]}}}]}}}]}}}]}}}]}}}]}",
		"$.steps[0].workflow.definition.steps[0].workflow.definition.steps[0].workflow.definition"
		".steps[0].workflow.definition.steps[0].workflow.definition",
		"nest too deeply", "child workflows nest at most four deep");
}

int main(void)
{
	test_examples();
	test_design_example();
	test_normalized_forms();
	test_root_errors();
	test_step_errors();
	test_many_errors();
	test_hostile();
	test_add_steps();
	test_open_world_and_children();
	return done_testing();
}
