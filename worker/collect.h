/* collect: what a finished step leaves behind. Reads out/output.json,
 * the last line of stdout and out/effects.jsonl, each under a size cap,
 * and turns raw process output into JSON-safe text. */
#ifndef CAIRN_COLLECT_H
#define CAIRN_COLLECT_H

#include <stdbool.h>
#include <stddef.h>
#include <jansson.h>

#include "util.h"

/* Default cap for output.json and effects.jsonl. */
#define COLLECT_DOC_MAX (1024 * 1024)

/* Follows a byte stream and remembers its last non-empty line. A line
 * longer than max is remembered as "not a candidate". */
struct line_tail {
	struct buf cur, last;
	size_t max;
	bool cur_over, have_last;
};

void line_tail_init(struct line_tail *t, size_t max);
void line_tail_feed(struct line_tail *t, const char *data, size_t len);
/* Ends the stream: returns the last non-empty line without its line end
 * (borrowed, valid until line_tail_release), or NULL when there is none or
 * it was too long. */
const char *line_tail_finish(struct line_tail *t);
void line_tail_release(struct line_tail *t);

/* The step's output: out_dir/output.json when present (at most max bytes,
 * valid JSON), else last_line when it parses as JSON, else null. Returns 0
 * and a new reference in *output, or -1 with a message in err (the step
 * then fails with reason "bad_output"). out_dir is not followed if it is a
 * symlink, nor is output.json. */
int collect_output(const char *out_dir, const char *last_line, size_t max,
		   json_t **output, char *err, size_t errlen) WARN_UNUSED;

/* The step's effects: one JSON object per line of out_dir/effects.jsonl,
 * each with a non-empty string "key", no key twice. Returns 0 and a new
 * array in *effects (empty when the file is absent), or -1 with a message
 * in err (reason "bad_effects"). */
int collect_effects(const char *out_dir, size_t max, json_t **effects,
		    char *err, size_t errlen) WARN_UNUSED;

/* A JSON string holding data[0..len): invalid UTF-8 and NUL bytes become
 * U+FFFD, so any process output can be stored. Returns new. */
json_t *collect_text(const char *data, size_t len);

#endif
