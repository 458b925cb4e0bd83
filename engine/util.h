/* util: small helpers every program uses: growable byte buffers,
 * durations and sizes as written in workflow files, clocks. */
#ifndef CAIRN_UTIL_H
#define CAIRN_UTIL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define WARN_UNUSED __attribute__((warn_unused_result))

/* A growable buffer, always NUL-terminated (git's strbuf). */
struct buf {
	char *data;
	size_t len, cap;
};
#define BUF_INIT { NULL, 0, 0 }

void buf_init(struct buf *b);
/* Frees the contents; the struct may be reused after buf_init. */
void buf_release(struct buf *b);
void buf_reset(struct buf *b);
void buf_add(struct buf *b, const void *data, size_t len);
void buf_adds(struct buf *b, const char *s);
void buf_addf(struct buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Returns the contents and resets b; caller frees with free(). */
char *buf_detach(struct buf *b);

/* Allocation that aborts on out-of-memory (the only sane answer in a daemon). */
void *xmalloc(size_t n);
void *xcalloc(size_t n, size_t m);
void *xrealloc(void *p, size_t n);
char *xstrdup(const char *s);

/* "250ms", "2s", "10m", "1h", "1d", "1h30m" or a bare number of seconds.
 * Returns 0 and sets *ms, or -1 for anything else (including overflow). */
int duration_parse(const char *s, int64_t *ms) WARN_UNUSED;
/* Formats ms compactly ("1h2m3.5s") into out. */
void duration_format(int64_t ms, char *out, size_t outlen);

/* "512M", "2G", "64k", "1024" (bytes). Returns 0 and sets *bytes, or -1. */
int size_parse(const char *s, int64_t *bytes) WARN_UNUSED;

/* Monotonic and wall clocks in milliseconds / microseconds. */
int64_t mono_ms(void);
int64_t mono_us(void);
int64_t wall_ms(void);

/* Read a whole file (at most max bytes); returns 0 and a new NUL-terminated
 * buffer in *out (caller frees), or -1 with errno set (EFBIG if too large). */
int read_file_max(const char *path, size_t max, char **out, size_t *len) WARN_UNUSED;

#endif
