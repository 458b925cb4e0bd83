/* collect: reads what a finished step left in its out/ folder and on its
 * stdout, under caps, and validates it. It never follows a symlink the step
 * planted, never blocks on a FIFO, and never talks to the database. */
#define _GNU_SOURCE
#include "collect.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

void line_tail_init(struct line_tail *t, size_t max)
{
	buf_init(&t->cur);
	buf_init(&t->last);
	t->max = max;
	t->cur_over = false;
	t->have_last = false;
}

void line_tail_release(struct line_tail *t)
{
	buf_release(&t->cur);
	buf_release(&t->last);
}

static bool blank(const char *s, size_t len)
{
	for (size_t i = 0; i < len; i++)
		if (s[i] != ' ' && s[i] != '\t' && s[i] != '\r' && s[i] != '\f' && s[i] != '\v')
			return false;
	return true;
}

/* The current line is complete: it becomes the last line unless blank. */
static void line_tail_end_line(struct line_tail *t)
{
	if (t->cur_over) {
		t->have_last = false;
		buf_reset(&t->last);
	} else if (!blank(t->cur.data ? t->cur.data : "", t->cur.len)) {
		struct buf tmp = t->last;

		t->last = t->cur;
		t->cur = tmp;
		t->have_last = true;
	}
	buf_reset(&t->cur);
	t->cur_over = false;
}

void line_tail_feed(struct line_tail *t, const char *data, size_t len)
{
	while (len) {
		const char *nl = memchr(data, '\n', len);
		size_t n = nl ? (size_t)(nl - data) : len;

		if (!t->cur_over) {
			if (t->cur.len + n > t->max) {
				t->cur_over = true;
				buf_reset(&t->cur);
			} else {
				buf_add(&t->cur, data, n);
			}
		}
		if (!nl)
			break;
		line_tail_end_line(t);
		data += n + 1;
		len -= n + 1;
	}
}

const char *line_tail_finish(struct line_tail *t)
{
	if (t->cur.len || t->cur_over)
		line_tail_end_line(t);
	if (!t->have_last)
		return NULL;
	if (t->last.len && t->last.data[t->last.len - 1] == '\r')
		t->last.data[--t->last.len] = '\0';
	return t->last.data;
}

/* Reads out_dir/name without following symlinks, at most max bytes.
 * Returns 0 with a new NUL-terminated buffer, 1 when the file does not
 * exist, -1 with err set. */
static int read_out_file(const char *out_dir, const char *name, size_t max,
			 char **data, size_t *len, char *err, size_t errlen)
{
	struct buf b = BUF_INIT;
	struct stat st;
	char chunk[65536];
	int dfd = -1, fd = -1, rc = -1;

	dfd = open(out_dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (dfd < 0) {
		if (errno == ENOENT) {
			rc = 1;
			goto out;
		}
		snprintf(err, errlen, "could not open \"%s\": %s", out_dir, strerror(errno));
		goto out;
	}
	fd = openat(dfd, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
	if (fd < 0) {
		if (errno == ENOENT) {
			rc = 1;
			goto out;
		}
		snprintf(err, errlen, "could not open \"%s\": %s", name,
			 errno == ELOOP ? "it is a symbolic link" : strerror(errno));
		goto out;
	}
	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
		snprintf(err, errlen, "\"%s\" is not a regular file", name);
		goto out;
	}
	for (;;) {
		ssize_t n = read(fd, chunk, sizeof(chunk));

		if (n < 0) {
			if (errno == EINTR)
				continue;
			snprintf(err, errlen, "could not read \"%s\": %s", name, strerror(errno));
			goto out;
		}
		if (n == 0)
			break;
		if (b.len + (size_t)n > max) {
			snprintf(err, errlen, "\"%s\" is larger than %zu bytes", name, max);
			goto out;
		}
		buf_add(&b, chunk, (size_t)n);
	}
	*len = b.len;
	*data = buf_detach(&b);
	rc = 0;
out:
	buf_release(&b);
	if (fd >= 0)
		close(fd);
	if (dfd >= 0)
		close(dfd);
	return rc;
}

int collect_output(const char *out_dir, const char *last_line, size_t max,
		   json_t **output, char *err, size_t errlen)
{
	json_error_t jerr;
	char *data = NULL;
	size_t len = 0;
	int rc = -1, r;

	*output = NULL;
	r = read_out_file(out_dir, "output.json", max, &data, &len, err, errlen);
	if (r < 0)
		goto out;
	if (r == 0) {
		*output = json_loadb(data, len, JSON_DECODE_ANY, &jerr);
		if (!*output) {
			snprintf(err, errlen, "output.json is not valid JSON: %s (line %d, column %d)",
				 jerr.text, jerr.line, jerr.column);
			goto out;
		}
		rc = 0;
		goto out;
	}
	if (last_line && strlen(last_line) <= max)
		*output = json_loads(last_line, JSON_DECODE_ANY, NULL);
	if (!*output)
		*output = json_null();
	rc = 0;
out:
	free(data);
	return rc;
}

int collect_effects(const char *out_dir, size_t max, json_t **effects,
		    char *err, size_t errlen)
{
	json_t *arr = json_array(), *seen = json_object();
	char *data = NULL, *line, *next;
	size_t len = 0;
	int rc = -1, r, lineno = 0;

	*effects = NULL;
	r = read_out_file(out_dir, "effects.jsonl", max, &data, &len, err, errlen);
	if (r < 0)
		goto out;
	if (r == 0 && memchr(data, '\0', len)) {
		snprintf(err, errlen, "effects.jsonl contains a NUL byte");
		goto out;
	}
	for (line = r == 0 ? data : NULL; line && *line; line = next) {
		json_error_t jerr;
		json_t *obj, *key;
		const char *k;

		lineno++;
		next = strchr(line, '\n');
		if (next)
			*next++ = '\0';
		if (blank(line, strlen(line)))
			continue;
		obj = json_loads(line, 0, &jerr);
		if (!obj || !json_is_object(obj)) {
			snprintf(err, errlen, "effects.jsonl line %d is not a JSON object%s%s",
				 lineno, obj ? "" : ": ", obj ? "" : jerr.text);
			json_decref(obj);
			goto out;
		}
		key = json_object_get(obj, "key");
		k = json_string_value(key);
		if (!k || !*k) {
			snprintf(err, errlen, "effects.jsonl line %d has no string \"key\"", lineno);
			json_decref(obj);
			goto out;
		}
		if (json_object_get(seen, k)) {
			snprintf(err, errlen, "effects.jsonl line %d repeats key \"%.200s\"", lineno, k);
			json_decref(obj);
			goto out;
		}
		json_object_set_new(seen, k, json_true());
		json_array_append_new(arr, obj);
	}
	*effects = arr;
	arr = NULL;
	rc = 0;
out:
	free(data);
	json_decref(arr);
	json_decref(seen);
	return rc;
}

/* Length of the valid UTF-8 sequence at s (at most n bytes), 0 if invalid. */
static size_t utf8_seq(const unsigned char *s, size_t n)
{
	unsigned char c = s[0];
	size_t need;
	unsigned char lo = 0x80, hi = 0xBF;

	if (c >= 0x01 && c <= 0x7F)
		return 1;
	if (c >= 0xC2 && c <= 0xDF)
		need = 2;
	else if (c >= 0xE0 && c <= 0xEF) {
		need = 3;
		if (c == 0xE0)
			lo = 0xA0;
		else if (c == 0xED)
			hi = 0x9F;
	} else if (c >= 0xF0 && c <= 0xF4) {
		need = 4;
		if (c == 0xF0)
			lo = 0x90;
		else if (c == 0xF4)
			hi = 0x8F;
	} else
		return 0;
	if (n < need || s[1] < lo || s[1] > hi)
		return 0;
	for (size_t i = 2; i < need; i++)
		if (s[i] < 0x80 || s[i] > 0xBF)
			return 0;
	return need;
}

json_t *collect_text(const char *data, size_t len)
{
	const unsigned char *s = (const unsigned char *)data;
	struct buf b = BUF_INIT;
	json_t *str;
	size_t i = 0, clean = 0;

	while (i < len) {
		size_t n = utf8_seq(s + i, len - i);

		if (n) {
			i += n;
			continue;
		}
		buf_add(&b, data + clean, i - clean);
		buf_adds(&b, "\xEF\xBF\xBD");
		i++;
		clean = i;
	}
	if (!len)
		return json_string("");
	if (!clean)
		return json_stringn(data, len);
	buf_add(&b, data + clean, len - clean);
	str = json_stringn(b.data, b.len);
	buf_release(&b);
	return str;
}
