/* util: buffers, duration/size parsing and clocks. No I/O beyond
 * read_file_max, no global state. */
#include "util.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

void *xmalloc(size_t n)
{
	void *p = malloc(n ? n : 1);

	if (!p)
		abort();
	return p;
}

void *xcalloc(size_t n, size_t m)
{
	void *p = calloc(n ? n : 1, m ? m : 1);

	if (!p)
		abort();
	return p;
}

void *xrealloc(void *p, size_t n)
{
	p = realloc(p, n ? n : 1);
	if (!p)
		abort();
	return p;
}

char *xstrdup(const char *s)
{
	char *p = strdup(s);

	if (!p)
		abort();
	return p;
}

void buf_init(struct buf *b)
{
	b->data = NULL;
	b->len = b->cap = 0;
}

void buf_release(struct buf *b)
{
	free(b->data);
	buf_init(b);
}

void buf_reset(struct buf *b)
{
	b->len = 0;
	if (b->data)
		b->data[0] = '\0';
}

static void buf_grow(struct buf *b, size_t extra)
{
	size_t need = b->len + extra + 1;

	if (need <= b->cap)
		return;
	size_t cap = b->cap ? b->cap : 64;
	while (cap < need)
		cap *= 2;
	b->data = xrealloc(b->data, cap);
	b->cap = cap;
}

void buf_add(struct buf *b, const void *data, size_t len)
{
	buf_grow(b, len);
	memcpy(b->data + b->len, data, len);
	b->len += len;
	b->data[b->len] = '\0';
}

void buf_adds(struct buf *b, const char *s)
{
	buf_add(b, s, strlen(s));
}

void buf_addf(struct buf *b, const char *fmt, ...)
{
	va_list ap;
	int n;

	va_start(ap, fmt);
	n = vsnprintf(NULL, 0, fmt, ap);
	va_end(ap);
	if (n < 0)
		return;
	buf_grow(b, (size_t)n);
	va_start(ap, fmt);
	vsnprintf(b->data + b->len, (size_t)n + 1, fmt, ap);
	va_end(ap);
	b->len += (size_t)n;
}

char *buf_detach(struct buf *b)
{
	char *p = b->data ? b->data : xstrdup("");

	buf_init(b);
	return p;
}

/* Parses a non-negative decimal ("12", "1.5"; no sign, exponent or hex, and
 * not locale-dependent); returns the characters used, 0 if none. */
static int parse_number(const char *s, double *out)
{
	double v = 0, scale = 1;
	int n = 0, digits = 0;
	bool frac = false;

	for (; s[n]; n++) {
		if (s[n] >= '0' && s[n] <= '9') {
			if (frac)
				v += (s[n] - '0') * (scale /= 10);
			else
				v = v * 10 + (s[n] - '0');
			digits++;
		} else if (s[n] == '.' && !frac && digits) {
			frac = true;
		} else {
			break;
		}
	}
	if (!digits || s[n - 1] == '.' || v > 1e18)
		return 0;
	*out = v;
	return n;
}

int duration_parse(const char *s, int64_t *ms)
{
	static const struct { const char *unit; double ms; } units[] = {
		{ "ms", 1 }, { "s", 1000 }, { "m", 60000 }, { "h", 3600000 }, { "d", 86400000 },
	};
	double total = 0, last_unit = 1e300;
	int parts = 0;

	if (!s || !*s)
		return -1;
	while (*s) {
		double v;
		int n = parse_number(s, &v);
		size_t best = 0;
		double mult = 0;

		if (!n)
			return -1;
		s += n;
		if (!*s && parts == 0) { /* a bare number means seconds */
			total = v * 1000;
			parts++;
			break;
		}
		for (size_t i = 0; i < sizeof(units) / sizeof(units[0]); i++) {
			size_t ul = strlen(units[i].unit);
			if (strncmp(s, units[i].unit, ul) == 0 && ul > best &&
			    !(ul == 1 && s[0] == 'm' && s[1] == 's')) {
				best = ul;
				mult = units[i].ms;
			}
		}
		if (!best || mult >= last_unit)
			return -1; /* unknown unit, or units repeated or out of order */
		last_unit = mult;
		s += best;
		total += v * mult;
		parts++;
	}
	if (total > (double)INT64_MAX / 2)
		return -1;
	*ms = (int64_t)(total + 0.5);
	return 0;
}

void duration_format(int64_t ms, char *out, size_t outlen)
{
	int64_t h, m;
	double sec;
	size_t n = 0;

	if (!outlen)
		return;
	out[0] = '\0';
	if (ms < 0)
		ms = 0;
	h = ms / 3600000;
	m = (ms / 60000) % 60;
	sec = (double)(ms % 60000) / 1000.0;
	if (h)
		n += (size_t)snprintf(out + n, outlen - n, "%lldh", (long long)h);
	if (m && n < outlen)
		n += (size_t)snprintf(out + n, outlen - n, "%lldm", (long long)m);
	if ((sec > 0 || (!h && !m)) && n < outlen)
		snprintf(out + n, outlen - n, ms < 1000 ? "%gms" : "%gs", ms < 1000 ? sec * 1000 : sec);
}

int size_parse(const char *s, int64_t *bytes)
{
	double v;
	int n;
	double mult = 1;

	if (!s || !(n = parse_number(s, &v)))
		return -1;
	s += n;
	switch (*s) {
	case '\0': case 'B': case 'b': break;
	case 'k': case 'K': mult = 1024.0; s++; break;
	case 'm': case 'M': mult = 1024.0 * 1024; s++; break;
	case 'g': case 'G': mult = 1024.0 * 1024 * 1024; s++; break;
	case 't': case 'T': mult = 1024.0 * 1024 * 1024 * 1024; s++; break;
	default: return -1;
	}
	if (*s == 'i' && mult > 1)
		s++;
	if (*s == 'B' || *s == 'b')
		s++;
	if (*s)
		return -1;
	if (v * mult > (double)INT64_MAX / 2)
		return -1;
	*bytes = (int64_t)(v * mult);
	return 0;
}

int64_t mono_us(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

int64_t mono_ms(void)
{
	return mono_us() / 1000;
}

int64_t wall_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int read_file_max(const char *path, size_t max, char **out, size_t *len)
{
	struct buf b = BUF_INIT;
	char chunk[65536];
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	int rc = -1;

	if (fd < 0)
		return -1;
	for (;;) {
		ssize_t n = read(fd, chunk, sizeof(chunk));
		if (n < 0) {
			if (errno == EINTR)
				continue;
			goto out;
		}
		if (n == 0)
			break;
		if (b.len + (size_t)n > max) {
			errno = EFBIG;
			goto out;
		}
		buf_add(&b, chunk, (size_t)n);
	}
	if (len)
		*len = b.len;
	*out = buf_detach(&b);
	rc = 0;
out:
	if (rc)
		buf_release(&b);
	close(fd);
	return rc;
}
