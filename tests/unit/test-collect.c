/* Unit tests of worker/collect.c: last stdout line, output.json,
 * effects.jsonl, and text made safe for JSON. */
#define _GNU_SOURCE
#include "../../worker/collect.h"
#include "../tap.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char dir[64];

static void put(const char *name, const char *data, size_t len)
{
	char path[128];
	FILE *f;

	snprintf(path, sizeof(path), "%s/%s", dir, name);
	f = fopen(path, "w");
	if (!f)
		bail("could not write \"%s\"", path);
	fwrite(data, 1, len, f);
	fclose(f);
}

static void rm(const char *name)
{
	char path[128];

	snprintf(path, sizeof(path), "%s/%s", dir, name);
	unlink(path);
}

static const char *tail_of(const char *data, size_t max, struct line_tail *t)
{
	line_tail_init(t, max);
	/* feed byte by byte and in one go must agree: use odd chunks */
	for (size_t i = 0, n = strlen(data); i < n; i += 3)
		line_tail_feed(t, data + i, n - i < 3 ? n - i : 3);
	return line_tail_finish(t);
}

static void test_tail(void)
{
	struct line_tail t;

	is_str(tail_of("a\nb\n", 100, &t), "b", "last line without its newline");
	line_tail_release(&t);
	is_str(tail_of("a\n{\"x\":1}", 100, &t), "{\"x\":1}", "last line without a final newline");
	line_tail_release(&t);
	is_str(tail_of("x\n42\n\n  \n", 100, &t), "42", "blank lines are skipped");
	line_tail_release(&t);
	is_str(tail_of("x\r\n", 100, &t), "x", "CR of a CRLF is dropped");
	line_tail_release(&t);
	ok(tail_of("", 100, &t) == NULL, "no output, no line");
	line_tail_release(&t);
	ok(tail_of("short\n0123456789abc\n", 10, &t) == NULL, "a last line over the cap is no candidate");
	line_tail_release(&t);
	is_str(tail_of("0123456789abc\nok\n", 10, &t), "ok", "a long earlier line does not matter");
	line_tail_release(&t);
}

static void test_output(void)
{
	json_t *out = NULL;
	char err[256];
	char big[300];

	rm("output.json");
	ok(collect_output(dir, "{\"a\":1}", 1024, &out, err, sizeof(err)) == 0 &&
	   json_integer_value(json_object_get(out, "a")) == 1, "last stdout line as output");
	json_decref(out);
	ok(collect_output(dir, "hello world", 1024, &out, err, sizeof(err)) == 0 && json_is_null(out),
	   "a non-JSON last line gives null");
	json_decref(out);
	ok(collect_output(dir, NULL, 1024, &out, err, sizeof(err)) == 0 && json_is_null(out),
	   "no line gives null");
	json_decref(out);

	put("output.json", "{\"b\": [1,2]}\n", 13);
	ok(collect_output(dir, "{\"a\":1}", 1024, &out, err, sizeof(err)) == 0 &&
	   json_array_size(json_object_get(out, "b")) == 2, "output.json wins over stdout");
	json_decref(out);

	put("output.json", "{\"b\": ", 6);
	ok(collect_output(dir, NULL, 1024, &out, err, sizeof(err)) == -1 && out == NULL,
	   "invalid output.json is refused");
	ok(strstr(err, "output.json is not valid JSON") != NULL, "and says why: %s", err);

	put("output.json", "\"\\u0000\"", 8);
	ok(collect_output(dir, NULL, 1024, &out, err, sizeof(err)) == -1, "a NUL in output.json is refused");

	memset(big, ' ', sizeof(big));
	big[0] = '1';
	put("output.json", big, sizeof(big));
	ok(collect_output(dir, NULL, 200, &out, err, sizeof(err)) == -1 && strstr(err, "larger than 200"),
	   "output.json over the cap is refused: %s", err);

	rm("output.json");
	{
		char path[128];

		snprintf(path, sizeof(path), "%s/output.json", dir);
		if (symlink("/etc/hostname", path) < 0)
			bail("symlink failed");
	}
	ok(collect_output(dir, NULL, 1024, &out, err, sizeof(err)) == -1 && strstr(err, "symbolic link"),
	   "a symlinked output.json is not followed: %s", err);
	rm("output.json");
	{
		char path[128];

		snprintf(path, sizeof(path), "%s/output.json", dir);
		if (mkfifo(path, 0600) < 0)
			bail("mkfifo failed");
	}
	ok(collect_output(dir, NULL, 1024, &out, err, sizeof(err)) == -1 && strstr(err, "not a regular file"),
	   "a FIFO output.json does not block: %s", err);
	rm("output.json");
}

static void test_effects(void)
{
	json_t *eff = NULL;
	char err[256];
	const char *good = "{\"key\":\"a\",\"n\":1}\n\n{\"key\":\"b\"}";
	const char *dup = "{\"key\":\"a\"}\n{\"key\":\"a\"}\n";

	rm("effects.jsonl");
	ok(collect_effects(dir, 1024, &eff, err, sizeof(err)) == 0 && json_array_size(eff) == 0,
	   "no effects file, no effects");
	json_decref(eff);

	put("effects.jsonl", good, strlen(good));
	ok(collect_effects(dir, 1024, &eff, err, sizeof(err)) == 0 && json_array_size(eff) == 2,
	   "two effects, blank line skipped");
	is_str(json_string_value(json_object_get(json_array_get(eff, 1), "key")), "b", "in file order");
	json_decref(eff);

	put("effects.jsonl", dup, strlen(dup));
	ok(collect_effects(dir, 1024, &eff, err, sizeof(err)) == -1 && eff == NULL, "a repeated key is refused");
	ok(strstr(err, "line 2 repeats key \"a\"") != NULL, "and named: %s", err);

	put("effects.jsonl", "[1]\n", 4);
	ok(collect_effects(dir, 1024, &eff, err, sizeof(err)) == -1, "a non-object line is refused: %s", err);
	put("effects.jsonl", "{\"key\":1}\n", 10);
	ok(collect_effects(dir, 1024, &eff, err, sizeof(err)) == -1, "a non-string key is refused: %s", err);
	put("effects.jsonl", "{\"key\":\"\"}\n", 11);
	ok(collect_effects(dir, 1024, &eff, err, sizeof(err)) == -1, "an empty key is refused: %s", err);
	put("effects.jsonl", "{\"key\":\"a\"}\n{nope\n", 18);
	ok(collect_effects(dir, 1024, &eff, err, sizeof(err)) == -1 && strstr(err, "line 2"),
	   "invalid JSON names the line: %s", err);
	put("effects.jsonl", good, strlen(good));
	ok(collect_effects(dir, 10, &eff, err, sizeof(err)) == -1 && strstr(err, "larger than 10"),
	   "effects over the cap are refused: %s", err);
	put("effects.jsonl", "{\"key\":\"a\"}\0\n", 13);
	ok(collect_effects(dir, 1024, &eff, err, sizeof(err)) == -1, "a NUL byte is refused: %s", err);
	rm("effects.jsonl");
}

static void test_text(void)
{
	json_t *s;

	s = collect_text("plain", 5);
	is_str(json_string_value(s), "plain", "valid text is kept");
	json_decref(s);
	s = collect_text("h\xC3\xA9", 3);
	is_str(json_string_value(s), "h\xC3\xA9", "valid UTF-8 is kept");
	json_decref(s);
	s = collect_text("a\xFF" "b", 3);
	is_str(json_string_value(s), "a\xEF\xBF\xBD" "b", "an invalid byte becomes U+FFFD");
	json_decref(s);
	s = collect_text("a\0b", 3);
	is_str(json_string_value(s), "a\xEF\xBF\xBD" "b", "NUL becomes U+FFFD");
	json_decref(s);
	s = collect_text("\xE2\x82", 2);
	is_str(json_string_value(s), "\xEF\xBF\xBD\xEF\xBF\xBD", "a cut sequence is replaced bytewise");
	json_decref(s);
	s = collect_text("\xED\xA0\x80", 3);
	ok(s && !strstr(json_string_value(s), "\xED"), "a surrogate is replaced");
	json_decref(s);
	s = collect_text(NULL, 0);
	is_str(json_string_value(s), "", "empty text");
	json_decref(s);
}

int main(void)
{
	char cmd[128];

	snprintf(dir, sizeof(dir), "/tmp/cn-collect.XXXXXX");
	if (!mkdtemp(dir))
		bail("mkdtemp failed");
	if (chdir(dir) < 0)
		bail("chdir failed");
	test_tail();
	test_output();
	test_effects();
	test_text();
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
	if (system(cmd) != 0)
		diag("could not remove %s", dir);
	return done_testing();
}
