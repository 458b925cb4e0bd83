/* workflow: checks a submitted definition against every rule and builds
 * the normalized form the store reads. It reports problems as data (an
 * array of {path, message}); it never logs, exits or touches the store.
 * Only known structure is walked, so hostile nesting cannot deepen the stack. */
#include "workflow.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PATHLEN 256
#define MAX_DURATION_MS (365LL * 86400 * 1000)
#define MAX_SIZE_BYTES (1LL << 50)
#define MAX_TEXT 4096
#define MAX_ARGS 4096
#define MAX_ARG_BYTES (128 * 1024)
#define MAX_RUN_BYTES (1024 * 1024)
#define MAX_ENV 256
#define MAX_ENV_NAME 256
#define MAX_ENV_VALUE (64 * 1024)
#define MAX_SECRETS 64
#define MAX_LIST 64
#define MAX_SYSCALLS 512
#define MAX_INPUT_DEPTH 64

#define ID_CHARS "_-"
#define NAME_CHARS "_.-"
#define KEY_CHARS "_.:-"
/* Decimal digits and unit letters only: strtod inside the parsers would
 * also take hexadecimal and exponent forms ("0x10s", "1e3"). */
#define DURATION_CHARS "0123456789.msdh"
#define SIZE_CHARS "0123456789.kKmMgGtTiBb"

struct ctx {
	json_t *errors;
	int nerr;
	json_t *ids;		/* step id -> index, for the steps being checked */
	const json_t *known;	/* step id -> true, steps already in the run (or NULL) */
	bool open_world;	/* steps outside ids may exist: the store checks them */
};

struct retry {
	int64_t max_attempts, initial_ms, max_ms;
	bool exponential, jitter;
	bool perm[256];
};

struct defaults {
	int64_t timeout_ms;
	struct retry retry;
	char queue[65];
	int64_t priority;
	json_t *env;		/* owned */
	json_t *sandbox;	/* owned, normalized */
};

/* A short, printable copy of a value taken from the input, for messages. */
struct quoted {
	char s[72];
};

static struct quoted q(const char *s)
{
	struct quoted r;
	size_t i;

	for (i = 0; s[i] && i < 64; i++)
		r.s[i] = (s[i] >= 0x20 && s[i] < 0x7f && s[i] != '"' && s[i] != '\\') ? s[i] : '?';
	if (s[i])
		memcpy(r.s + i, "...", 4);
	else
		r.s[i] = '\0';
	return r;
}

static void err_at(struct ctx *c, const char *path, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

static void err_at(struct ctx *c, const char *path, const char *fmt, ...)
{
	char msg[1200];
	va_list ap;

	if (c->nerr > WORKFLOW_MAX_ERRORS)
		return;
	c->nerr++;
	if (c->nerr > WORKFLOW_MAX_ERRORS) {
		json_array_append_new(c->errors, json_pack("{s:s, s:s}", "path", "$", "message",
				      "too many errors; the rest are not listed"));
		return;
	}
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	json_array_append_new(c->errors, json_pack("{s:s, s:s}", "path", path, "message", msg));
}

static bool word_char(char ch, const char *extra)
{
	return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
	       (ch && strchr(extra, ch));
}

static bool name_ok(const char *s, size_t len, size_t max, const char *extra)
{
	if (len < 1 || len > max)
		return false;
	for (size_t i = 0; i < len; i++)
		if (!word_char(s[i], extra))
			return false;
	return true;
}

/* Formats a JSON path into out (PATHLEN bytes); a longer one is cut. */
static void pathf(char *out, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void pathf(char *out, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(out, PATHLEN, fmt, ap);
	va_end(ap);
}

/* Appends ".key" (or ["key"] when key is not a plain word) to base. */
static void path_key(char *out, const char *base, const char *key)
{
	if (name_ok(key, strlen(key), 64, "_"))
		pathf(out, "%s.%s", base, key);
	else
		pathf(out, "%s[\"%s\"]", base, q(key).s);
}

static void path_idx(char *out, const char *base, size_t i)
{
	pathf(out, "%s[%zu]", base, i);
}

static const char *type_name(const json_t *v)
{
	switch (json_typeof(v)) {
	case JSON_OBJECT: return "an object";
	case JSON_ARRAY: return "an array";
	case JSON_STRING: return "a string";
	case JSON_INTEGER: return "an integer";
	case JSON_REAL: return "a number";
	case JSON_TRUE:
	case JSON_FALSE: return "a boolean";
	case JSON_NULL: return "null";
	}
	return "unknown";
}

static bool want_type(struct ctx *c, const json_t *v, json_type t, const char *what, const char *path)
{
	if (json_typeof(v) == t || (t == JSON_TRUE && json_is_boolean(v)))
		return true;
	err_at(c, path, "must be %s, not %s", what, type_name(v));
	return false;
}

/* A string value without NUL bytes, at most max bytes; NULL (reported) otherwise. */
static const char *get_str(struct ctx *c, const json_t *v, const char *path, size_t min, size_t max)
{
	const char *s;
	size_t len;

	if (!want_type(c, v, JSON_STRING, "a string", path))
		return NULL;
	s = json_string_value(v);
	len = json_string_length(v);
	if (strlen(s) != len) {
		err_at(c, path, "must not contain NUL characters");
		return NULL;
	}
	if (len < min) {
		err_at(c, path, "must not be empty");
		return NULL;
	}
	if (len > max) {
		err_at(c, path, "is too long (%zu bytes, at most %zu)", len, max);
		return NULL;
	}
	return s;
}

/* A string made of letters, digits and the characters in extra. */
static const char *get_name(struct ctx *c, const json_t *v, const char *path, size_t max,
			    const char *extra, const char *what)
{
	const char *s;

	if (!want_type(c, v, JSON_STRING, "a string", path))
		return NULL;
	s = json_string_value(v);
	if (!name_ok(s, json_string_length(v), max, extra)) {
		err_at(c, path, "invalid %s \"%s\": use 1 to %zu letters, digits or \"%s\"",
		       what, q(s).s, max, extra);
		return NULL;
	}
	return s;
}

static int get_int(struct ctx *c, const json_t *v, const char *path, int64_t min, int64_t max,
		   int64_t *out)
{
	json_int_t n;

	if (!want_type(c, v, JSON_INTEGER, "an integer", path))
		return -1;
	n = json_integer_value(v);
	if (n < min || n > max) {
		err_at(c, path, "must be between %" PRId64 " and %" PRId64 ", not %lld",
		       min, max, (long long)n);
		return -1;
	}
	*out = n;
	return 0;
}

static int get_bool(struct ctx *c, const json_t *v, const char *path, bool *out)
{
	if (!want_type(c, v, JSON_TRUE, "true or false", path))
		return -1;
	*out = json_is_true(v);
	return 0;
}

/* A duration ("1h30m", or a number of seconds) in [min_ms, MAX_DURATION_MS]. */
static int get_duration(struct ctx *c, const json_t *v, const char *path, int64_t min_ms,
			int64_t *out)
{
	int64_t ms;

	if (json_is_string(v)) {
		const char *s = json_string_value(v);

		if (strlen(s) != json_string_length(v) || strspn(s, DURATION_CHARS) != strlen(s) ||
		    duration_parse(s, &ms) < 0) {
			err_at(c, path, "invalid duration \"%s\": use e.g. \"250ms\", \"30s\", \"10m\", \"1h30m\"",
			       q(s).s);
			return -1;
		}
	} else if (json_is_number(v)) {
		double d = json_number_value(v);

		if (!isfinite(d) || d < 0 || d > (double)MAX_DURATION_MS / 1000) {
			err_at(c, path, "invalid duration %g: must be a number of seconds from 0 to 365 days", d);
			return -1;
		}
		ms = json_is_integer(v) ? (int64_t)json_integer_value(v) * 1000 : llround(d * 1000);
	} else {
		err_at(c, path, "must be a duration string, not %s", type_name(v));
		return -1;
	}
	if (ms > MAX_DURATION_MS) {
		err_at(c, path, "duration is too long (at most 365d)");
		return -1;
	}
	if (ms < min_ms) {
		char b[32];

		duration_format(min_ms, b, sizeof(b));
		err_at(c, path, "duration must be at least %s", b);
		return -1;
	}
	*out = ms;
	return 0;
}

/* A size ("512M", or a number of bytes) from 1 byte to 1 PiB. */
static int get_size(struct ctx *c, const json_t *v, const char *path, int64_t *out)
{
	int64_t n;

	if (json_is_string(v)) {
		const char *s = json_string_value(v);

		if (strlen(s) != json_string_length(v) || strspn(s, SIZE_CHARS) != strlen(s) ||
		    size_parse(s, &n) < 0) {
			err_at(c, path, "invalid size \"%s\": use e.g. \"64k\", \"512M\", \"2G\"", q(s).s);
			return -1;
		}
	} else if (json_is_integer(v)) {
		n = json_integer_value(v);
	} else {
		err_at(c, path, "must be a size string or a number of bytes, not %s", type_name(v));
		return -1;
	}
	if (n < 1 || n > MAX_SIZE_BYTES) {
		err_at(c, path, "size must be between 1 byte and 1024T");
		return -1;
	}
	*out = n;
	return 0;
}

/* Reports keys of obj that are not in allowed (NULL-terminated). */
static void check_keys(struct ctx *c, json_t *obj, const char *path, const char *const *allowed)
{
	const char *key;
	size_t klen;
	json_t *v;

	json_object_keylen_foreach(obj, key, klen, v) {
		bool found = false;

		for (size_t i = 0; allowed[i] && !found; i++)
			found = strlen(key) == klen && strcmp(key, allowed[i]) == 0;
		if (!found) {
			char p[PATHLEN];

			path_key(p, path, key);
			err_at(c, p, "unknown key \"%s\"", q(key).s);
		}
	}
}

static bool depth_ok(const json_t *v, int depth)
{
	const char *key;
	json_t *item;
	size_t i;

	if (depth > MAX_INPUT_DEPTH)
		return false;
	if (json_is_object(v)) {
		json_object_foreach((json_t *)v, key, item)
			if (!depth_ok(item, depth + 1))
				return false;
	} else if (json_is_array(v)) {
		json_array_foreach(v, i, item)
			if (!depth_ok(item, depth + 1))
				return false;
	}
	return true;
}

/* Whether id names a step of this definition (or of the run, when adding). */
static bool step_exists(struct ctx *c, const char *id)
{
	return json_object_get(c->ids, id) || (c->known && json_object_get(c->known, id)) ||
	       c->open_world;
}

static void retry_builtin(struct retry *r)
{
	memset(r, 0, sizeof(*r));
	r->max_attempts = 3;
	r->exponential = true;
	r->initial_ms = 2000;
	r->max_ms = 60000;
	r->jitter = true;
}

/* Reads a retry object over *r (fields not given keep their value). */
static void parse_retry(struct ctx *c, json_t *v, const char *path, struct retry *r)
{
	static const char *const keys[] = { "max_attempts", "backoff", "initial", "max", "jitter",
					     "permanent_exit_codes", NULL };
	char p[PATHLEN];
	json_t *f;

	if (!want_type(c, v, JSON_OBJECT, "an object", path))
		return;
	check_keys(c, v, path, keys);
	if ((f = json_object_get(v, "max_attempts"))) {
		path_key(p, path, "max_attempts");
		get_int(c, f, p, 1, 100, &r->max_attempts);
	}
	if ((f = json_object_get(v, "backoff"))) {
		const char *s;

		path_key(p, path, "backoff");
		if ((s = get_str(c, f, p, 0, 64))) {
			if (strcmp(s, "exponential") == 0)
				r->exponential = true;
			else if (strcmp(s, "fixed") == 0)
				r->exponential = false;
			else
				err_at(c, p, "invalid backoff \"%s\": use \"exponential\" or \"fixed\"", q(s).s);
		}
	}
	if ((f = json_object_get(v, "initial"))) {
		path_key(p, path, "initial");
		get_duration(c, f, p, 0, &r->initial_ms);
	}
	if ((f = json_object_get(v, "max"))) {
		path_key(p, path, "max");
		get_duration(c, f, p, 0, &r->max_ms);
	}
	if ((f = json_object_get(v, "jitter"))) {
		path_key(p, path, "jitter");
		get_bool(c, f, p, &r->jitter);
	}
	if ((f = json_object_get(v, "permanent_exit_codes"))) {
		json_t *code;
		size_t i;

		path_key(p, path, "permanent_exit_codes");
		if (!want_type(c, f, JSON_ARRAY, "an array of exit codes", p))
			return;
		memset(r->perm, 0, sizeof(r->perm));
		json_array_foreach(f, i, code) {
			char pi[PATHLEN];
			int64_t n;

			path_idx(pi, p, i);
			if (get_int(c, code, pi, 1, 255, &n) == 0)
				r->perm[n] = true;
		}
	}
}

static json_t *retry_json(const struct retry *r)
{
	json_t *codes = json_array();

	for (int i = 1; i < 256; i++)
		if (r->perm[i])
			json_array_append_new(codes, json_integer(i));
	return json_pack("{s:I, s:s, s:I, s:I, s:b, s:o}", "max_attempts", (json_int_t)r->max_attempts,
			 "backoff", r->exponential ? "exponential" : "fixed",
			 "initial_ms", (json_int_t)r->initial_ms, "max_ms", (json_int_t)r->max_ms,
			 "jitter", r->jitter, "permanent_exit_codes", codes);
}

/* "host:port", "[v6]:port"; host names are letters, digits, '.', '-' (and a leading "*."). */
static bool hostport_ok(const char *s)
{
	const char *colon = strrchr(s, ':');
	char *end;
	long port;
	size_t hlen;

	if (!colon || !colon[1])
		return false;
	errno = 0;
	port = strtol(colon + 1, &end, 10);
	if (*end || errno || port < 1 || port > 65535 || colon[1] < '0' || colon[1] > '9')
		return false;
	hlen = (size_t)(colon - s);
	if (hlen >= 2 && s[0] == '[' && s[hlen - 1] == ']') {
		for (size_t i = 1; i + 1 < hlen; i++)
			if (!word_char(s[i], ":.") )
				return false;
		return hlen > 2 && hlen <= 48;
	}
	if (hlen > 2 && s[0] == '*' && s[1] == '.') {
		s += 2;
		hlen -= 2;
	}
	return name_ok(s, hlen, 253, ".-");
}

/* An absolute path without NUL, "." or ".." components. */
static bool abspath_ok(const char *s, size_t len)
{
	if (len < 1 || len > 4096 || s[0] != '/' || strlen(s) != len)
		return false;
	for (const char *p = s; *p; ) {
		const char *e = strchr(p + 1, '/');
		size_t n = e ? (size_t)(e - p - 1) : strlen(p + 1);

		if ((n == 2 && p[1] == '.' && p[2] == '.') || (n == 1 && p[1] == '.'))
			return false;
		if (!e)
			break;
		p = e;
	}
	return true;
}

static json_t *norm_path(struct ctx *c, json_t *v, const char *path)
{
	if (!want_type(c, v, JSON_STRING, "an absolute path", path))
		return NULL;
	if (!abspath_ok(json_string_value(v), json_string_length(v))) {
		err_at(c, path, "invalid path \"%s\": must be absolute, without \".\" or \"..\" components",
		       q(json_string_value(v)).s);
		return NULL;
	}
	return json_copy(v);
}

static json_t *norm_network(struct ctx *c, json_t *v, const char *path)
{
	static const char *const keys[] = { "allow", NULL };
	char p[PATHLEN];
	json_t *allow, *list, *item;
	size_t i;

	if (json_is_string(v)) {
		if (strcmp(json_string_value(v), "none") == 0)
			return json_string("none");
		err_at(c, path, "invalid network \"%s\": use \"none\" or {\"allow\": [\"host:port\", ...]}",
		       q(json_string_value(v)).s);
		return NULL;
	}
	if (!want_type(c, v, JSON_OBJECT, "\"none\" or an object", path))
		return NULL;
	check_keys(c, v, path, keys);
	path_key(p, path, "allow");
	allow = json_object_get(v, "allow");
	if (!allow) {
		err_at(c, path, "missing \"allow\"");
		return NULL;
	}
	if (!want_type(c, allow, JSON_ARRAY, "an array of \"host:port\" strings", p))
		return NULL;
	if (json_array_size(allow) > MAX_LIST) {
		err_at(c, p, "too many entries (%zu, at most %d)", json_array_size(allow), MAX_LIST);
		return NULL;
	}
	list = json_array();
	json_array_foreach(allow, i, item) {
		char pi[PATHLEN];
		const char *s;

		path_idx(pi, p, i);
		if (!(s = get_str(c, item, pi, 1, 300)))
			continue;
		if (!hostport_ok(s))
			err_at(c, pi, "invalid address \"%s\": use \"host:port\"", q(s).s);
		else
			json_array_append(list, item);
	}
	return json_pack("{s:o}", "allow", list);
}

static json_t *norm_mounts(struct ctx *c, json_t *v, const char *path)
{
	static const char *const keys[] = { "src", "dst", "rw", NULL };
	json_t *list, *m;
	size_t i;

	if (!want_type(c, v, JSON_ARRAY, "an array", path))
		return NULL;
	if (json_array_size(v) > MAX_LIST) {
		err_at(c, path, "too many mounts (%zu, at most %d)", json_array_size(v), MAX_LIST);
		return NULL;
	}
	list = json_array();
	json_array_foreach(v, i, m) {
		char pm[PATHLEN], p[PATHLEN];
		json_t *src = NULL, *dst = NULL, *f;
		bool rw = false;

		path_idx(pm, path, i);
		if (!want_type(c, m, JSON_OBJECT, "an object", pm))
			continue;
		check_keys(c, m, pm, keys);
		path_key(p, pm, "src");
		if (!(f = json_object_get(m, "src")))
			err_at(c, pm, "missing \"src\"");
		else
			src = norm_path(c, f, p);
		path_key(p, pm, "dst");
		if (!(f = json_object_get(m, "dst")))
			err_at(c, pm, "missing \"dst\"");
		else if ((dst = norm_path(c, f, p)) && strcmp(json_string_value(dst), "/") == 0)
			err_at(c, p, "must not be \"/\"");
		path_key(p, pm, "rw");
		if ((f = json_object_get(m, "rw")))
			get_bool(c, f, p, &rw);
		if (src && dst)
			json_array_append_new(list, json_pack("{s:O, s:O, s:b}", "src", src, "dst", dst, "rw", rw));
		json_decref(src);
		json_decref(dst);
	}
	return list;
}

static json_t *norm_syscalls(struct ctx *c, json_t *v, const char *path)
{
	json_t *list, *item;
	size_t i;

	if (!want_type(c, v, JSON_ARRAY, "an array of system call names", path))
		return NULL;
	if (json_array_size(v) > MAX_SYSCALLS) {
		err_at(c, path, "too many system calls (%zu, at most %d)", json_array_size(v), MAX_SYSCALLS);
		return NULL;
	}
	list = json_array();
	json_array_foreach(v, i, item) {
		char p[PATHLEN];
		const char *s;

		path_idx(p, path, i);
		if (!want_type(c, item, JSON_STRING, "a string", p))
			continue;
		s = json_string_value(item);
		if (!name_ok(s, json_string_length(item), 64, "_") || strpbrk(s, "ABCDEFGHIJKLMNOPQRSTUVWXYZ"))
			err_at(c, p, "invalid system call name \"%s\"", q(s).s);
		else
			json_array_append(list, item);
	}
	return list;
}

static json_t *norm_seccomp(struct ctx *c, json_t *v, const char *path)
{
	static const char *const keys[] = { "deny", "enosys", "kill", NULL };
	char p[PATHLEN];
	json_t *out, *f;

	if (!want_type(c, v, JSON_OBJECT, "an object", path))
		return NULL;
	if (json_object_get(v, "allow"))
		err_at(c, path, "a step may only add refusals (\"deny\", \"enosys\", \"kill\"), not \"allow\"");
	else
		check_keys(c, v, path, keys);
	out = json_object();
	for (int i = 0; keys[i]; i++) {
		if (!(f = json_object_get(v, keys[i])))
			continue;
		path_key(p, path, keys[i]);
		json_object_set_new(out, keys[i], norm_syscalls(c, f, p));
	}
	return out;
}

enum sb_type { SB_NETWORK, SB_SIZE, SB_INT, SB_CPU, SB_DURATION, SB_PATH, SB_MOUNTS, SB_SECCOMP,
	       SB_OUTPUT_CAP, SB_BOOL };

/* Sandbox settings: the name written, the normalized name, and limits
 * (those of the worker's sandbox, so what passes here runs there). */
static const struct sb_key {
	const char *in, *out;
	enum sb_type type;
	int64_t min, max;
} sb_keys[] = {
	{ "network", "network", SB_NETWORK, 0, 0 },
	{ "memory", "memory", SB_SIZE, 4 << 20, 0 },
	{ "pids", "pids", SB_INT, 2, 1000000 },
	{ "cpu", "cpu", SB_CPU, 0, 0 },
	{ "timeout", "timeout_ms", SB_DURATION, 1, 0 },
	{ "rootfs", "rootfs", SB_PATH, 0, 0 },
	{ "mounts", "mounts", SB_MOUNTS, 0, 0 },
	{ "seccomp", "seccomp", SB_SECCOMP, 0, 0 },
	{ "output_limit", "output", SB_SIZE, 1024, 0 },
	{ "output", "output", SB_SIZE, 1024, 0 },
	{ "on_output_cap", "on_output_cap", SB_OUTPUT_CAP, 0, 0 },
	{ "file_size", "file_size", SB_SIZE, 4096, 0 },
	{ "tmp_size", "tmp_size", SB_SIZE, 1 << 20, 0 },
	{ "nofile", "open_files", SB_INT, 16, 1 << 20 },
	{ "open_files", "open_files", SB_INT, 16, 1 << 20 },
	{ "cpu_time", "cpu_time_ms", SB_DURATION, 1000, 0 },
	{ "kill_grace", "kill_grace_ms", SB_DURATION, 0, 0 },
	{ "unix_sockets", "unix_sockets", SB_BOOL, 0, 0 },
};

static json_t *norm_sb_value(struct ctx *c, const struct sb_key *k, json_t *f, const char *p)
{
	int64_t n;
	bool b;

	switch (k->type) {
	case SB_NETWORK:
		return norm_network(c, f, p);
	case SB_SIZE:
		if (get_size(c, f, p, &n) < 0)
			return NULL;
		if (n < k->min) {
			if (k->min % (1 << 20) == 0)
				err_at(c, p, "size must be at least %" PRId64 "M", k->min >> 20);
			else
				err_at(c, p, "size must be at least %" PRId64 " bytes", k->min);
			return NULL;
		}
		return json_integer(n);
	case SB_INT:
		return get_int(c, f, p, k->min, k->max, &n) == 0 ? json_integer(n) : NULL;
	case SB_CPU:
		if (!json_is_number(f)) {
			err_at(c, p, "must be a number of CPUs, not %s", type_name(f));
			return NULL;
		}
		if (!isfinite(json_number_value(f)) || json_number_value(f) < 0.01 ||
		    json_number_value(f) > 1024) {
			err_at(c, p, "must be a number of CPUs from 0.01 to 1024");
			return NULL;
		}
		return json_real(json_number_value(f));
	case SB_DURATION:
		return get_duration(c, f, p, k->min, &n) == 0 ? json_integer(n) : NULL;
	case SB_PATH:
		return norm_path(c, f, p);
	case SB_MOUNTS:
		return norm_mounts(c, f, p);
	case SB_SECCOMP:
		return norm_seccomp(c, f, p);
	case SB_OUTPUT_CAP: {
		const char *s = get_str(c, f, p, 0, 64);

		if (!s)
			return NULL;
		if (strcmp(s, "kill") && strcmp(s, "truncate")) {
			err_at(c, p, "invalid on_output_cap \"%s\": use \"kill\" or \"truncate\"", q(s).s);
			return NULL;
		}
		return json_string(s);
	}
	case SB_BOOL:
		return get_bool(c, f, p, &b) == 0 ? json_boolean(b) : NULL;
	}
	return NULL;
}

/* Normalizes a sandbox object (see workflow.h for the keys it yields). */
static json_t *norm_sandbox(struct ctx *c, json_t *v, const char *path)
{
	const char *key;
	size_t klen;
	json_t *out, *f;

	if (!want_type(c, v, JSON_OBJECT, "an object", path))
		return json_object();
	out = json_object();
	json_object_keylen_foreach(v, key, klen, f) {
		const struct sb_key *k = NULL;
		char p[PATHLEN];
		json_t *val;

		path_key(p, path, key);
		for (size_t i = 0; i < sizeof(sb_keys) / sizeof(sb_keys[0]) && !k; i++)
			if (strlen(key) == klen && strcmp(key, sb_keys[i].in) == 0)
				k = &sb_keys[i];
		if (!k) {
			err_at(c, p, "unknown key \"%s\"", q(key).s);
			continue;
		}
		if (json_object_get(out, k->out)) {
			err_at(c, p, "\"%s\" is given twice (under two names)", k->out);
			continue;
		}
		if ((val = norm_sb_value(c, k, f, p)))
			json_object_set_new(out, k->out, val);
	}
	return out;
}

/* Checks an env object; returns a new copy (empty on errors). */
static json_t *norm_env(struct ctx *c, json_t *v, const char *path)
{
	const char *key;
	size_t klen;
	json_t *val, *out = json_object();

	if (!want_type(c, v, JSON_OBJECT, "an object of strings", path))
		return out;
	if (json_object_size(v) > MAX_ENV) {
		err_at(c, path, "too many variables (%zu, at most %d)", json_object_size(v), MAX_ENV);
		return out;
	}
	json_object_keylen_foreach(v, key, klen, val) {
		char p[PATHLEN];

		path_key(p, path, key);
		if (klen == 0 || klen > MAX_ENV_NAME || strlen(key) != klen || strchr(key, '=')) {
			err_at(c, p, "invalid variable name \"%s\": must be 1 to %d bytes without \"=\" or NUL",
			       q(key).s, MAX_ENV_NAME);
			continue;
		}
		if (strncmp(key, "CAIRN_", 6) == 0) {
			err_at(c, p, "variable name \"%s\" is reserved: names starting with CAIRN_ are set by cairn",
			       q(key).s);
			continue;
		}
		if (get_str(c, val, p, 0, MAX_ENV_VALUE))
			json_object_set(out, key, val);
	}
	return out;
}

/* A step-id list (approval "show"): every id must exist. */
static json_t *norm_show(struct ctx *c, json_t *v, const char *path, const char *self)
{
	json_t *out, *item;
	size_t i;

	if (!want_type(c, v, JSON_ARRAY, "an array of step ids", path))
		return json_array();
	if (json_array_size(v) > MAX_LIST) {
		err_at(c, path, "too many steps (%zu, at most %d)", json_array_size(v), MAX_LIST);
		return json_array();
	}
	out = json_array();
	json_array_foreach(v, i, item) {
		char p[PATHLEN];
		const char *s;

		path_idx(p, path, i);
		if (!(s = get_name(c, item, p, 64, ID_CHARS, "step id")))
			continue;
		if (self && strcmp(s, self) == 0)
			err_at(c, p, "a step cannot show its own output");
		else if (!step_exists(c, s))
			err_at(c, p, "unknown step \"%s\"", q(s).s);
		else
			json_array_append(out, item);
	}
	return out;
}

static json_t *norm_approval(struct ctx *c, json_t *v, const char *path, const char *self)
{
	static const char *const keys[] = { "prompt", "timeout", "on_timeout", "on_reject", "quorum",
					     "show", NULL };
	char p[PATHLEN], dflt[128];
	const char *prompt = NULL, *on_timeout = "reject", *on_reject = "fail";
	json_t *f, *timeout = json_null(), *show = NULL;
	int64_t quorum = 1, n;

	if (!want_type(c, v, JSON_OBJECT, "an object", path))
		return NULL;
	check_keys(c, v, path, keys);
	if ((f = json_object_get(v, "prompt"))) {
		path_key(p, path, "prompt");
		prompt = get_str(c, f, p, 0, MAX_TEXT);
	}
	if (!prompt) {
		snprintf(dflt, sizeof(dflt), "approve step \"%s\"?", self ? self : "");
		prompt = dflt;
	}
	if ((f = json_object_get(v, "timeout"))) {
		path_key(p, path, "timeout");
		if (get_duration(c, f, p, 1, &n) == 0)
			timeout = json_integer(n);
	}
	if ((f = json_object_get(v, "on_timeout"))) {
		const char *s;

		path_key(p, path, "on_timeout");
		if ((s = get_str(c, f, p, 0, 64))) {
			if (strcmp(s, "reject") && strcmp(s, "approve") && strcmp(s, "fail"))
				err_at(c, p, "invalid on_timeout \"%s\": use \"reject\", \"approve\" or \"fail\"",
				       q(s).s);
			else
				on_timeout = s;
		}
	}
	if ((f = json_object_get(v, "on_reject"))) {
		const char *s;

		path_key(p, path, "on_reject");
		if ((s = get_str(c, f, p, 0, 64))) {
			if (strcmp(s, "fail") && strcmp(s, "skip"))
				err_at(c, p, "invalid on_reject \"%s\": use \"fail\" or \"skip\"", q(s).s);
			else
				on_reject = s;
		}
	}
	if ((f = json_object_get(v, "quorum"))) {
		path_key(p, path, "quorum");
		get_int(c, f, p, 1, 100, &quorum);
	}
	if ((f = json_object_get(v, "show"))) {
		path_key(p, path, "show");
		show = norm_show(c, f, p, self);
	}
	return json_pack("{s:s, s:o, s:s, s:s, s:I, s:o}", "prompt", prompt, "timeout_ms", timeout,
			 "on_timeout", on_timeout, "on_reject", on_reject, "quorum", (json_int_t)quorum,
			 "show", show ? show : json_array());
}

static json_t *norm_signal(struct ctx *c, json_t *v, const char *path)
{
	static const char *const keys[] = { "name", "timeout", NULL };
	char p[PATHLEN];
	const char *name = NULL;
	json_t *f, *timeout = json_null();
	int64_t n;

	if (json_is_string(v)) {
		name = get_name(c, v, path, 128, NAME_CHARS, "signal name");
	} else if (want_type(c, v, JSON_OBJECT, "a signal name or an object", path)) {
		check_keys(c, v, path, keys);
		path_key(p, path, "name");
		if (!(f = json_object_get(v, "name")))
			err_at(c, path, "missing \"name\"");
		else
			name = get_name(c, f, p, 128, NAME_CHARS, "signal name");
		if ((f = json_object_get(v, "timeout"))) {
			path_key(p, path, "timeout");
			if (get_duration(c, f, p, 1, &n) == 0)
				timeout = json_integer(n);
		}
	}
	if (!name) {
		json_decref(timeout);
		return NULL;
	}
	return json_pack("{s:s, s:o}", "name", name, "timeout_ms", timeout);
}

static json_t *norm_run(struct ctx *c, json_t *v, const char *path)
{
	json_t *out, *arg;
	size_t i, total = 0;

	if (json_is_string(v)) {
		const char *s = get_str(c, v, path, 1, MAX_RUN_BYTES);

		return s ? json_pack("[s, s, s]", "sh", "-c", s) : NULL;
	}
	if (!want_type(c, v, JSON_ARRAY, "an array of strings or a shell command string", path))
		return NULL;
	if (json_array_size(v) == 0) {
		err_at(c, path, "must not be empty");
		return NULL;
	}
	if (json_array_size(v) > MAX_ARGS) {
		err_at(c, path, "too many arguments (%zu, at most %d)", json_array_size(v), MAX_ARGS);
		return NULL;
	}
	out = json_array();
	json_array_foreach(v, i, arg) {
		char p[PATHLEN];

		path_idx(p, path, i);
		if (get_str(c, arg, p, i == 0 ? 1 : 0, MAX_ARG_BYTES)) {
			json_array_append(out, arg);
			total += json_string_length(arg) + 1;
		}
	}
	if (total > MAX_RUN_BYTES)
		err_at(c, path, "command line is too long (%zu bytes, at most %d)", total, MAX_RUN_BYTES);
	return out;
}

static json_t *norm_secrets(struct ctx *c, json_t *v, const char *path)
{
	json_t *out, *item;
	size_t i;

	if (!want_type(c, v, JSON_ARRAY, "an array of secret names", path))
		return json_array();
	if (json_array_size(v) > MAX_SECRETS) {
		err_at(c, path, "too many secrets (%zu, at most %d)", json_array_size(v), MAX_SECRETS);
		return json_array();
	}
	out = json_array();
	json_array_foreach(v, i, item) {
		char p[PATHLEN];
		const char *s;
		bool dup = false;
		size_t j;
		json_t *prev;

		path_idx(p, path, i);
		if (!(s = get_name(c, item, p, 128, NAME_CHARS, "secret name")))
			continue;
		json_array_foreach(out, j, prev)
			dup = dup || strcmp(json_string_value(prev), s) == 0;
		if (dup)
			err_at(c, p, "duplicate secret \"%s\"", q(s).s);
		else
			json_array_append(out, item);
	}
	return out;
}

/* {"key": ..., field: 1..max}, for concurrency and rate. */
static json_t *norm_keyed(struct ctx *c, json_t *v, const char *path, const char *field, int64_t max)
{
	const char *const keys[] = { "key", field, NULL };
	char p[PATHLEN];
	const char *key = NULL;
	json_t *f;
	int64_t n = 0;
	int rc = -1;

	if (!want_type(c, v, JSON_OBJECT, "an object", path))
		return NULL;
	check_keys(c, v, path, keys);
	path_key(p, path, "key");
	if (!(f = json_object_get(v, "key")))
		err_at(c, path, "missing \"key\"");
	else
		key = get_name(c, f, p, 128, KEY_CHARS, "key");
	path_key(p, path, field);
	if (!(f = json_object_get(v, field)))
		err_at(c, path, "missing \"%s\"", field);
	else
		rc = get_int(c, f, p, 1, max, &n);
	if (!key || rc < 0)
		return NULL;
	return json_pack("{s:s, s:I}", "key", key, field, (json_int_t)n);
}

static json_t *norm_checkpoint(struct ctx *c, json_t *v, const char *path)
{
	static const char *const keys[] = { "every", NULL };
	char p[PATHLEN];
	json_t *f;
	int64_t n;

	if (!want_type(c, v, JSON_OBJECT, "an object", path))
		return NULL;
	check_keys(c, v, path, keys);
	path_key(p, path, "every");
	if (!(f = json_object_get(v, "every"))) {
		err_at(c, path, "missing \"every\"");
		return NULL;
	}
	if (get_duration(c, f, p, 1000, &n) < 0)
		return NULL;
	return json_pack("{s:I}", "every_ms", (json_int_t)n);
}

static void defaults_init(struct defaults *d)
{
	d->timeout_ms = 600000;
	retry_builtin(&d->retry);
	strcpy(d->queue, "default");
	d->priority = 0;
	d->env = json_object();
	d->sandbox = json_object();
}

static void defaults_release(struct defaults *d)
{
	json_decref(d->env);
	json_decref(d->sandbox);
	d->env = d->sandbox = NULL;
}

/* Reads the common fields (timeout, retry, queue, priority) of obj over d. */
static void parse_common(struct ctx *c, json_t *obj, const char *path, struct defaults *d)
{
	char p[PATHLEN];
	json_t *f;
	const char *s;

	if ((f = json_object_get(obj, "timeout"))) {
		path_key(p, path, "timeout");
		get_duration(c, f, p, 1, &d->timeout_ms);
	}
	if ((f = json_object_get(obj, "retry"))) {
		path_key(p, path, "retry");
		parse_retry(c, f, p, &d->retry);
		if (d->retry.max_ms < d->retry.initial_ms)
			err_at(c, p, "max (%" PRId64 "ms) is less than initial (%" PRId64 "ms)",
			       d->retry.max_ms, d->retry.initial_ms);
	}
	if ((f = json_object_get(obj, "queue"))) {
		path_key(p, path, "queue");
		if ((s = get_name(c, f, p, 64, ID_CHARS, "queue name")))
			snprintf(d->queue, sizeof(d->queue), "%s", s);
	}
	if ((f = json_object_get(obj, "priority"))) {
		path_key(p, path, "priority");
		get_int(c, f, p, -1000, 1000, &d->priority);
	}
}

static void parse_defaults(struct ctx *c, json_t *v, const char *path, struct defaults *d)
{
	static const char *const keys[] = { "timeout", "retry", "queue", "priority", "env", "sandbox",
					     NULL };
	char p[PATHLEN];
	json_t *f;

	if (!want_type(c, v, JSON_OBJECT, "an object", path))
		return;
	check_keys(c, v, path, keys);
	parse_common(c, v, path, d);
	if ((f = json_object_get(v, "env"))) {
		path_key(p, path, "env");
		json_decref(d->env);
		d->env = norm_env(c, f, p);
	}
	if ((f = json_object_get(v, "sandbox"))) {
		path_key(p, path, "sandbox");
		json_decref(d->sandbox);
		d->sandbox = norm_sandbox(c, f, p);
	}
}

static const char *const step_keys[] = {
	"id", "needs", "run", "approval", "sleep", "wait_signal", "workflow", "timeout", "retry", "queue",
	"priority", "env", "secrets", "sandbox", "checkpoint", "approve", "concurrency", "rate",
	"description", NULL
};
static const char *const kind_keys[] = { "run", "approval", "sleep", "wait_signal", "workflow", NULL };
static const char *const run_only_keys[] = { "env", "secrets", "sandbox", "checkpoint", "approve",
					      "concurrency", "rate", NULL };

/* How deep child definitions nest inside one another, at most. */
#define MAX_CHILD_DEPTH 4
static __thread int child_depth;

/* A child run: {"definition": {...}} normalized here (its errors under
 * path.definition), or {"name": N, "version": V} of a stored definition
 * the store looks up when the step starts; "input" optional. */
static json_t *norm_child(struct ctx *c, json_t *v, const char *path)
{
	static const char *const keys[] = { "definition", "name", "version", "input", NULL };
	char p[PATHLEN];
	json_t *out = json_object(), *f, *def = NULL, *errs = NULL, *e;
	size_t i;

	if (!want_type(c, v, JSON_OBJECT, "an object with \"definition\" or \"name\"", path))
		return out;
	check_keys(c, v, path, keys);
	if (!!json_object_get(v, "definition") == !!json_object_get(v, "name"))
		err_at(c, path, "needs exactly one of \"definition\" and \"name\"");
	if ((f = json_object_get(v, "name"))) {
		path_key(p, path, "name");
		if (get_name(c, f, p, 128, NAME_CHARS, "workflow name"))
			json_object_set(out, "name", f);
	}
	if ((f = json_object_get(v, "version"))) {
		int64_t n;

		path_key(p, path, "version");
		if (get_int(c, f, p, 1, INT32_MAX, &n) == 0)
			json_object_set_new(out, "version", json_integer(n));
	}
	if ((f = json_object_get(v, "input"))) {
		path_key(p, path, "input");
		if (!depth_ok(f, 0))
			err_at(c, p, "is nested too deeply (at most %d levels)", MAX_INPUT_DEPTH);
		else
			json_object_set_new(out, "input", json_deep_copy(f));
	}
	if ((f = json_object_get(v, "definition"))) {
		path_key(p, path, "definition");
		if (child_depth >= MAX_CHILD_DEPTH) {
			err_at(c, p, "child workflows nest too deeply (at most %d levels)", MAX_CHILD_DEPTH);
		} else {
			child_depth++;
			if (workflow_normalize(f, &def, &errs) == 0) {
				json_object_set_new(out, "definition", def);
			} else {
				json_array_foreach(errs, i, e) {
					const char *ep = json_string_value(json_object_get(e, "path"));
					char full[PATHLEN];

					snprintf(full, sizeof(full), "%s%s", p, ep && ep[0] == '$' ? ep + 1 : "");
					err_at(c, full, "%s", json_string_value(json_object_get(e, "message")));
				}
				json_decref(errs);
			}
			child_depth--;
		}
	}
	return out;
}

struct graph {
	size_t n;
	size_t *deg;
	size_t **adj;		/* adj[i]: indexes of the steps step i needs */
};

/* Checks needs; records edges to steps of this definition in g. */
static json_t *norm_needs(struct ctx *c, json_t *v, const char *path, const char *self,
			  struct graph *g, size_t idx)
{
	json_t *out, *item, *seen;
	size_t i;

	if (!want_type(c, v, JSON_ARRAY, "an array of step ids", path))
		return json_array();
	if (json_array_size(v) > WORKFLOW_MAX_STEPS) {
		err_at(c, path, "too many needs (%zu, at most %d)", json_array_size(v), WORKFLOW_MAX_STEPS);
		return json_array();
	}
	out = json_array();
	seen = json_object();
	g->adj[idx] = xcalloc(json_array_size(v), sizeof(size_t));
	json_array_foreach(v, i, item) {
		char p[PATHLEN];
		const char *s;
		json_t *at;

		path_idx(p, path, i);
		if (!(s = get_name(c, item, p, 64, ID_CHARS, "step id")))
			continue;
		if (self && strcmp(s, self) == 0) {
			err_at(c, p, "step \"%s\" needs itself", q(s).s);
			continue;
		}
		if (json_object_get(seen, s)) {
			err_at(c, p, "duplicate need \"%s\"", q(s).s);
			continue;
		}
		json_object_set_new(seen, s, json_true());
		if (!step_exists(c, s)) {
			err_at(c, p, "unknown step \"%s\"", q(s).s);
			continue;
		}
		json_array_append(out, item);
		if ((at = json_object_get(c->ids, s)))
			g->adj[idx][g->deg[idx]++] = (size_t)json_integer_value(at);
	}
	json_decref(seen);
	return out;
}

/* Validates one step; returns its normalized form (meaningful only when no
 * error was reported). */
static json_t *norm_step(struct ctx *c, json_t *st, const char *path, size_t idx,
			 const struct defaults *dflt, struct graph *g)
{
	char p[PATHLEN];
	const char *id = NULL, *kind = NULL;
	json_t *out = NULL, *f, *kv;
	struct defaults d;
	int nkinds = 0;

	if (!want_type(c, st, JSON_OBJECT, "an object", path))
		return NULL;
	check_keys(c, st, path, step_keys);
	if ((f = json_object_get(st, "id")) && json_is_string(f) &&
	    (kv = json_object_get(c->ids, json_string_value(f))) &&
	    json_integer_value(kv) == (json_int_t)idx)
		id = json_string_value(f);

	for (int i = 0; kind_keys[i]; i++) {
		if (!json_object_get(st, kind_keys[i]))
			continue;
		if (nkinds++ == 0)
			kind = kind_keys[i];
		else
			err_at(c, path, "has both \"%s\" and \"%s\": a step has exactly one kind", kind,
			       kind_keys[i]);
	}
	if (!kind)
		err_at(c, path, "missing kind: a step needs one of \"run\", \"approval\", \"sleep\", \"wait_signal\" or \"workflow\"");

	d = *dflt;
	d.env = d.sandbox = NULL;
	parse_common(c, st, path, &d);

	out = json_object();
	json_object_set_new(out, "id", json_string(id ? id : ""));
	json_object_set_new(out, "kind", json_string(kind ? kind : ""));
	path_key(p, path, "needs");
	json_object_set_new(out, "needs", (f = json_object_get(st, "needs")) ?
			    norm_needs(c, f, p, id, g, idx) : json_array());
	if ((f = json_object_get(st, "description"))) {
		path_key(p, path, "description");
		if (get_str(c, f, p, 0, MAX_TEXT))
			json_object_set(out, "description", f);
	}
	json_object_set_new(out, "timeout_ms", json_integer(d.timeout_ms));
	json_object_set_new(out, "queue", json_string(d.queue));
	json_object_set_new(out, "priority", json_integer(d.priority));
	json_object_set_new(out, "retry", retry_json(&d.retry));

	if (kind && strcmp(kind, "run") != 0) {
		for (int i = 0; run_only_keys[i]; i++) {
			if (!json_object_get(st, run_only_keys[i]))
				continue;
			path_key(p, path, run_only_keys[i]);
			err_at(c, p, "\"%s\" is only allowed on run steps", run_only_keys[i]);
		}
	}

	if ((kv = json_object_get(st, "run"))) {
		json_t *env, *sandbox;

		path_key(p, path, "run");
		json_object_set_new(out, "run", norm_run(c, kv, p));

		env = json_deep_copy(dflt->env);
		if ((f = json_object_get(st, "env"))) {
			json_t *e;

			path_key(p, path, "env");
			e = norm_env(c, f, p);
			json_object_update(env, e);
			json_decref(e);
			if (json_object_size(env) > MAX_ENV)
				err_at(c, p, "too many variables with the defaults (%zu, at most %d)",
				       json_object_size(env), MAX_ENV);
		}
		json_object_set_new(out, "env", env);

		path_key(p, path, "secrets");
		json_object_set_new(out, "secrets", (f = json_object_get(st, "secrets")) ?
				    norm_secrets(c, f, p) : json_array());

		sandbox = json_deep_copy(dflt->sandbox);
		if ((f = json_object_get(st, "sandbox"))) {
			json_t *s;

			path_key(p, path, "sandbox");
			s = norm_sandbox(c, f, p);
			json_object_update(sandbox, s);
			json_decref(s);
		}
		/* A sandbox timeout only ever shortens the step's. */
		if ((f = json_object_get(sandbox, "timeout_ms"))) {
			if (json_integer_value(f) < d.timeout_ms)
				json_object_set_new(out, "timeout_ms", json_integer(json_integer_value(f)));
			json_object_del(sandbox, "timeout_ms");
		}
		json_object_set_new(out, "sandbox", sandbox);

		path_key(p, path, "checkpoint");
		f = json_object_get(st, "checkpoint");
		json_object_set_new(out, "checkpoint", f ? norm_checkpoint(c, f, p) : json_null());
		path_key(p, path, "approve");
		f = json_object_get(st, "approve");
		json_object_set_new(out, "approve", f ? norm_approval(c, f, p, id) : json_null());
		path_key(p, path, "concurrency");
		f = json_object_get(st, "concurrency");
		json_object_set_new(out, "concurrency", f ? norm_keyed(c, f, p, "limit", 10000) : json_null());
		path_key(p, path, "rate");
		f = json_object_get(st, "rate");
		json_object_set_new(out, "rate", f ? norm_keyed(c, f, p, "per_minute", 1000000) : json_null());
	}
	if ((kv = json_object_get(st, "approval"))) {
		path_key(p, path, "approval");
		json_object_set_new(out, "approval", norm_approval(c, kv, p, id));
	}
	if ((kv = json_object_get(st, "sleep"))) {
		int64_t ms;

		path_key(p, path, "sleep");
		if (get_duration(c, kv, p, 0, &ms) == 0)
			json_object_set_new(out, "sleep_ms", json_integer(ms));
	}
	if ((kv = json_object_get(st, "wait_signal"))) {
		path_key(p, path, "wait_signal");
		json_object_set_new(out, "signal", norm_signal(c, kv, p));
	}
	if ((kv = json_object_get(st, "workflow"))) {
		path_key(p, path, "workflow");
		json_object_set_new(out, "workflow", norm_child(c, kv, p));
	}
	return out;
}

/* Reports the dependency cycles found by a depth-first walk, one per step
 * that closes a cycle. Edges only lead to steps with valid, unique ids, so
 * every step on a cycle has one. */
static void find_cycles(struct ctx *c, json_t *steps, const char *spath, const struct graph *g)
{
	size_t n = g->n;
	unsigned char *color = xcalloc(n ? n : 1, 1);	/* 0 new, 1 on the stack, 2 done */
	size_t *stack = xcalloc(n ? n : 1, sizeof(size_t));
	size_t *edge = xcalloc(n ? n : 1, sizeof(size_t));
	size_t *pos = xcalloc(n ? n : 1, sizeof(size_t));
	unsigned char *reported = xcalloc(n ? n : 1, 1);	/* one cycle per step is enough */

	for (size_t s = 0; s < n; s++) {
		size_t sp = 0;

		if (color[s])
			continue;
		color[s] = 1;
		pos[s] = 0;
		stack[sp] = s;
		edge[sp++] = 0;
		while (sp > 0) {
			size_t u = stack[sp - 1], v;

			if (edge[sp - 1] >= g->deg[u]) {
				color[u] = 2;
				sp--;
				continue;
			}
			v = g->adj[u][edge[sp - 1]++];
			if (color[v] == 0) {
				color[v] = 1;
				pos[v] = sp;
				stack[sp] = v;
				edge[sp++] = 0;
			} else if (color[v] == 1 && !reported[v] && c->nerr <= WORKFLOW_MAX_ERRORS) {
				struct buf b = BUF_INIT;

				reported[v] = 1;
				char p[PATHLEN];

				for (size_t k = pos[v]; k < sp; k++) {
					if (b.len > 800) {
						buf_adds(&b, "... -> ");
						break;
					}
					buf_addf(&b, "%s -> ", json_string_value(json_object_get(
						json_array_get(steps, stack[k]), "id")));
				}
				buf_adds(&b, json_string_value(json_object_get(json_array_get(steps, v), "id")));
				pathf(p, "%s[%zu].needs", spath, v);
				err_at(c, p, "dependency cycle: %s", b.data);
				buf_release(&b);
			}
		}
	}
	free(color);
	free(stack);
	free(edge);
	free(pos);
	free(reported);
}

/* Validates and normalizes a steps array into *out (a new array). */
static void norm_steps(struct ctx *c, json_t *steps, const char *spath, const struct defaults *d,
		       json_t **out)
{
	struct graph g = { 0 };
	json_t *st, *norm = json_array();
	size_t i;

	g.n = json_array_size(steps);
	g.deg = xcalloc(g.n ? g.n : 1, sizeof(size_t));
	g.adj = xcalloc(g.n ? g.n : 1, sizeof(size_t *));

	/* First the ids, so needs and show can refer to any step. */
	json_array_foreach(steps, i, st) {
		char p[PATHLEN], pi[PATHLEN];
		const char *id;
		json_t *f, *prev;

		path_idx(pi, spath, i);
		if (!json_is_object(st))
			continue;
		path_key(p, pi, "id");
		if (!(f = json_object_get(st, "id"))) {
			err_at(c, pi, "missing \"id\"");
			continue;
		}
		if (!(id = get_name(c, f, p, 64, ID_CHARS, "step id")))
			continue;
		if ((prev = json_object_get(c->ids, id)))
			err_at(c, p, "duplicate step id \"%s\" (also %s[%lld])", id, spath,
			       (long long)json_integer_value(prev));
		else if (c->known && json_object_get(c->known, id))
			err_at(c, p, "step id \"%s\" is already in the run", id);
		else
			json_object_set_new(c->ids, id, json_integer((json_int_t)i));
	}

	json_array_foreach(steps, i, st) {
		char pi[PATHLEN];
		json_t *s;

		path_idx(pi, spath, i);
		if ((s = norm_step(c, st, pi, i, d, &g)))
			json_array_append_new(norm, s);
	}
	find_cycles(c, steps, spath, &g);

	for (i = 0; i < g.n; i++)
		free(g.adj[i]);
	free(g.adj);
	free(g.deg);
	*out = norm;
}

static void norm_limits(struct ctx *c, json_t *v, const char *path, json_t **out)
{
	static const char *const keys[] = { "max_steps", "max_duration", "max_attempts_total", NULL };
	char p[PATHLEN];
	json_t *f;
	int64_t n;

	*out = json_pack("{s:n, s:n, s:n}", "max_steps", "max_duration_ms", "max_attempts_total");
	if (!v)
		return;
	if (!want_type(c, v, JSON_OBJECT, "an object", path))
		return;
	check_keys(c, v, path, keys);
	if ((f = json_object_get(v, "max_steps"))) {
		path_key(p, path, "max_steps");
		if (get_int(c, f, p, 1, 100000, &n) == 0)
			json_object_set_new(*out, "max_steps", json_integer(n));
	}
	if ((f = json_object_get(v, "max_duration"))) {
		path_key(p, path, "max_duration");
		if (get_duration(c, f, p, 1000, &n) == 0)
			json_object_set_new(*out, "max_duration_ms", json_integer(n));
	}
	if ((f = json_object_get(v, "max_attempts_total"))) {
		path_key(p, path, "max_attempts_total");
		if (get_int(c, f, p, 1, 1000000, &n) == 0)
			json_object_set_new(*out, "max_attempts_total", json_integer(n));
	}
}

static int finish(struct ctx *c, json_t *result, json_t **out, json_t **errors)
{
	json_decref(c->ids);
	if (c->nerr) {
		json_decref(result);
		*out = NULL;
		if (errors)
			*errors = c->errors;
		else
			json_decref(c->errors);
		return -1;
	}
	json_decref(c->errors);
	*out = result;
	if (errors)
		*errors = NULL;
	return 0;
}

int workflow_normalize(json_t *def, json_t **out, json_t **errors)
{
	static const char *const keys[] = { "name", "description", "version", "defaults", "steps",
					     "limits", "input", NULL };
	struct ctx c = { json_array(), 0, json_object(), NULL, false };
	struct defaults d;
	json_t *res = NULL, *f, *steps, *limits = NULL;

	defaults_init(&d);
	if (!def || !json_is_object(def)) {
		err_at(&c, "$", "a workflow definition must be an object, not %s",
		       def ? type_name(def) : "nothing");
		goto out;
	}
	check_keys(&c, def, "$", keys);
	res = json_object();
	if (!(f = json_object_get(def, "name"))) {
		err_at(&c, "$", "missing \"name\"");
	} else {
		const char *name = get_name(&c, f, "$.name", 128, NAME_CHARS, "workflow name");

		if (name)
			json_object_set(res, "name", f);
	}
	if ((f = json_object_get(def, "description")) && get_str(&c, f, "$.description", 0, MAX_TEXT))
		json_object_set(res, "description", f);
	if ((f = json_object_get(def, "version"))) {
		int64_t n;

		if (json_is_string(f)) {
			if (get_str(&c, f, "$.version", 1, 64))
				json_object_set(res, "version", f);
		} else if (json_is_integer(f)) {
			if (get_int(&c, f, "$.version", 0, INT32_MAX, &n) == 0)
				json_object_set(res, "version", f);
		} else {
			err_at(&c, "$.version", "must be an integer or a string, not %s", type_name(f));
		}
	}
	if ((f = json_object_get(def, "input"))) {
		if (!depth_ok(f, 0))
			err_at(&c, "$.input", "is nested too deeply (at most %d levels)", MAX_INPUT_DEPTH);
		else
			json_object_set_new(res, "input", json_deep_copy(f));
	}
	norm_limits(&c, json_object_get(def, "limits"), "$.limits", &limits);
	if ((f = json_object_get(def, "defaults"))) {
		parse_defaults(&c, f, "$.defaults", &d);
		if (json_is_object(f) && depth_ok(f, 0))
			json_object_set_new(res, "defaults", json_deep_copy(f));
	}

	if (!(f = json_object_get(def, "steps"))) {
		err_at(&c, "$", "missing \"steps\"");
	} else if (want_type(&c, f, JSON_ARRAY, "an array", "$.steps")) {
		json_t *max = json_object_get(limits, "max_steps");

		if (json_array_size(f) == 0)
			err_at(&c, "$.steps", "must not be empty");
		else if (json_array_size(f) > WORKFLOW_MAX_STEPS)
			err_at(&c, "$.steps", "too many steps (%zu, at most %d)", json_array_size(f),
			       WORKFLOW_MAX_STEPS);
		else if (json_is_integer(max) && json_array_size(f) > (size_t)json_integer_value(max))
			err_at(&c, "$.steps", "more steps (%zu) than limits.max_steps (%lld)",
			       json_array_size(f), (long long)json_integer_value(max));
		if (json_array_size(f) <= WORKFLOW_MAX_STEPS) {
			norm_steps(&c, f, "$.steps", &d, &steps);
			json_object_set_new(res, "steps", steps);
		}
	}
	json_object_set_new(res, "limits", limits);
out:
	defaults_release(&d);
	return finish(&c, res, out, errors);
}

int workflow_normalize_steps(const json_t *def, json_t *steps, json_t **out, json_t **errors)
{
	const char *spath = "$.cairn.add_steps";
	struct ctx c = { json_array(), 0, json_object(), NULL, false };
	struct defaults d;
	json_t *known = json_object(), *res = NULL, *st, *f, *max;
	size_t i;

	defaults_init(&d);
	json_array_foreach(json_object_get(def, "steps"), i, st)
		if (json_is_string(f = json_object_get(st, "id")))
			json_object_set_new(known, json_string_value(f), json_true());
	c.known = known;
	c.open_world = !json_is_array(json_object_get(def, "steps"));
	if ((f = json_object_get(def, "defaults")))
		parse_defaults(&c, f, "$.defaults", &d);
	if (!steps || !json_is_array(steps)) {
		err_at(&c, spath, "must be an array of steps, not %s", steps ? type_name(steps) : "nothing");
		goto out;
	}
	if (json_array_size(steps) > WORKFLOW_MAX_STEPS) {
		err_at(&c, spath, "too many steps (%zu, at most %d)", json_array_size(steps),
		       WORKFLOW_MAX_STEPS);
		goto out;
	}
	max = json_object_get(json_object_get(def, "limits"), "max_steps");
	if (json_is_integer(max) &&
	    json_object_size(known) + json_array_size(steps) > (size_t)json_integer_value(max))
		err_at(&c, spath, "adding %zu steps to %zu would exceed limits.max_steps (%lld)",
		       json_array_size(steps), json_object_size(known), (long long)json_integer_value(max));
	norm_steps(&c, steps, spath, &d, &res);
out:
	defaults_release(&d);
	json_decref(known);
	return finish(&c, res, out, errors);
}

int workflow_load_buffer(const char *data, size_t len, const char *name, json_t **def,
			 char *err, size_t errlen)
{
	json_error_t jerr;

	*def = NULL;
	if (len > WORKFLOW_MAX_FILE) {
		snprintf(err, errlen, "workflow \"%s\" is too large (%zu bytes, at most %d)", name, len,
			 WORKFLOW_MAX_FILE);
		return -1;
	}
	*def = json_loadb(data, len, JSON_REJECT_DUPLICATES, &jerr);
	if (!*def) {
		snprintf(err, errlen, "could not parse \"%s\": line %d, column %d: %s", name, jerr.line,
			 jerr.column, jerr.text);
		return -1;
	}
	return 0;
}

int workflow_load_file(const char *path, json_t **def, char *err, size_t errlen)
{
	char *data = NULL;
	size_t len = 0;
	int rc = -1;

	*def = NULL;
	if (read_file_max(path, WORKFLOW_MAX_FILE, &data, &len) < 0) {
		if (errno == EFBIG)
			snprintf(err, errlen, "could not read \"%s\": larger than %d bytes", path,
				 WORKFLOW_MAX_FILE);
		else
			snprintf(err, errlen, "could not read \"%s\": %s", path, strerror(errno));
		goto out;
	}
	rc = workflow_load_buffer(data, len, path, def, err, errlen);
out:
	free(data);
	return rc;
}

char *workflow_errors_string(const json_t *errors)
{
	struct buf b = BUF_INIT;
	json_t *e;
	size_t i;

	json_array_foreach(errors, i, e)
		buf_addf(&b, "%s: %s\n", json_string_value(json_object_get(e, "path")) ?: "$",
			 json_string_value(json_object_get(e, "message")) ?: "");
	return buf_detach(&b);
}
