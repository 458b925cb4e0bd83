/* test-util: buffers, allocation, duration and size parsing and
 * formatting, bounded file reads and clocks (engine/util.c). */
#include "util.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../tap.h"

static int failures;

/* Counts failures for the exit status. */
#define OK(...) ((void)(ok(__VA_ARGS__) || ++failures))
#define IS_INT(...) ((void)(is_int(__VA_ARGS__) || ++failures))
#define IS_STR(...) ((void)(is_str(__VA_ARGS__) || ++failures))

static void test_buf(void)
{
	struct buf b = BUF_INIT;
	char *s;

	buf_adds(&b, "abc");
	IS_STR(b.data, "abc", "buf_adds");
	IS_INT(b.len, 3, "length");
	for (int i = 0; i < 100; i++)
		buf_addf(&b, "%d,", i);
	IS_INT(b.len, 3 + 10 * 2 + 90 * 3, "buf_addf grows past the first allocation");
	OK(b.data[b.len] == '\0', "NUL-terminated");
	OK(strncmp(b.data + b.len - 3, "99,", 3) == 0, "last piece in place");
	buf_add(&b, "x\0y", 3);
	IS_INT(b.len, 3 + 20 + 270 + 3, "buf_add takes embedded NUL");
	buf_reset(&b);
	IS_INT(b.len, 0, "buf_reset empties");
	IS_STR(b.data, "", "buf_reset leaves an empty string");
	buf_adds(&b, "keep");
	s = buf_detach(&b);
	IS_STR(s, "keep", "buf_detach hands the data over");
	OK(b.data == NULL && b.len == 0 && b.cap == 0, "buf_detach resets");
	free(s);
	s = buf_detach(&b);
	IS_STR(s, "", "buf_detach of an empty buffer gives an empty string");
	free(s);
	buf_release(&b);

	s = xmalloc(0);
	OK(s != NULL, "xmalloc(0) is not NULL");
	free(s);
	s = xcalloc(16, 1);
	OK(s[0] == 0 && s[15] == 0, "xcalloc zeroes");
	free(s);
	s = xstrdup("dup");
	IS_STR(s, "dup", "xstrdup");
	free(s);
}

static void test_duration_parse(void)
{
	static const struct { const char *in; int64_t ms; } good[] = {
		{ "250ms", 250 }, { "2s", 2000 }, { "10m", 600000 }, { "1h", 3600000 },
		{ "1d", 86400000 }, { "1h30m", 5400000 }, { "90", 90000 }, { "1.5s", 1500 },
		{ "0", 0 }, { "0s", 0 }, { "1m30s", 90000 }, { "2h45m10s500ms", 9910500 },
		{ "0.25", 250 }, { "0.5h", 1800000 }, { "365d", 31536000000LL }, { "1ms", 1 },
	};
	static const char *const bad[] = {
		"", "s", "ms", "10x", "-1s", " 1s", "1s ", "1h30", "1.5.5s", "1min", "abc", "1e400s",
		"99999999999999999d", ".5s", "1 s", "1S", "1H", "+1s", "1s-", "nan", "infs",
	};
	int64_t ms;

	for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++) {
		ms = -1;
		OK(duration_parse(good[i].in, &ms) == 0 && ms == good[i].ms, "duration \"%s\" = %lld ms (got %lld)",
		   good[i].in, (long long)good[i].ms, (long long)ms);
	}
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		ms = 12345;
		OK(duration_parse(bad[i], &ms) < 0 && ms == 12345, "duration \"%s\" refused, output untouched", bad[i]);
	}
	OK(duration_parse(NULL, &ms) < 0, "NULL duration refused");

	OK(duration_parse("1.s", &ms) < 0, "a number ending in a dot \"1.s\" refused", "");
	OK(duration_parse("1s1h", &ms) < 0, "units out of order \"1s1h\" refused", "");
	OK(duration_parse("1h1h", &ms) < 0, "a repeated unit \"1h1h\" refused", "");
	OK(duration_parse("1h30m", &ms) == 0 && ms == 5400000, "\"1h30m\" = 5400000 ms", "");
	OK(duration_parse("0x10s", &ms) < 0, "hexadecimal duration \"0x10s\" refused",
	     "strtod takes hex: parsed as 16s");
	OK(duration_parse("1e3", &ms) < 0, "exponent duration \"1e3\" refused",
	     "strtod takes exponents: parsed as 1000s");
}

static void test_duration_format(void)
{
	static const struct { int64_t ms; const char *out; } cases[] = {
		{ 0, "0ms" }, { 1, "1ms" }, { 999, "999ms" }, { 1000, "1s" }, { 1500, "1.5s" },
		{ 60000, "1m" }, { 60500, "1m0.5s" }, { 3600000, "1h" }, { 5400000, "1h30m" },
		{ 86400000, "24h" }, { 90061001, "25h1m1.001s" },
	};
	char out[64], small[8];
	int64_t back;
	unsigned seed = 42;
	bool all = true;

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		duration_format(cases[i].ms, out, sizeof(out));
		IS_STR(out, cases[i].out, "format %lld ms", (long long)cases[i].ms);
	}
	for (int i = 0; i < 2000 && all; i++) {
		int64_t ms = ((int64_t)rand_r(&seed) << 16 ^ rand_r(&seed)) % (400LL * 86400000);

		duration_format(ms, out, sizeof(out));
		if (duration_parse(out, &back) < 0 || back != ms) {
			diag("%lld -> \"%s\" -> %lld", (long long)ms, out, (long long)back);
			all = false;
		}
	}
	OK(all, "format then parse gives the same value (2000 random durations up to 400 days)");
	memset(small, 'x', sizeof(small));
	duration_format(90061001, small, sizeof(small));
	OK(memchr(small, '\0', sizeof(small)) != NULL, "a short buffer is cut and terminated: \"%s\"", small);
}

static void test_size_parse(void)
{
	static const struct { const char *in; int64_t bytes; } good[] = {
		{ "1024", 1024 }, { "64k", 65536 }, { "64K", 65536 }, { "512M", 512LL << 20 },
		{ "2G", 2LL << 30 }, { "1T", 1LL << 40 }, { "1KiB", 1024 }, { "1kb", 1024 },
		{ "1.5k", 1536 }, { "0", 0 }, { "1MB", 1 << 20 }, { "1Gi", 1LL << 30 },
		{ "4096T", 4096LL << 40 },
	};
	static const char *const bad[] = {
		"", "k", "1x", "-1", "1 k", "1kk", "1P", "99999999999T", " 1", "1k ", "1iB", "1ib", "K1",
		"1e400", "nan",
	};
	int64_t n;

	for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++) {
		n = -1;
		OK(size_parse(good[i].in, &n) == 0 && n == good[i].bytes, "size \"%s\" = %lld (got %lld)",
		   good[i].in, (long long)good[i].bytes, (long long)n);
	}
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		n = 12345;
		OK(size_parse(bad[i], &n) < 0 && n == 12345, "size \"%s\" refused, output untouched", bad[i]);
	}
	OK(size_parse(NULL, &n) < 0, "NULL size refused");

	OK(size_parse("0x10", &n) < 0, "hexadecimal size \"0x10\" refused", "strtod takes hex: parsed as 16");
	OK(size_parse("1e3k", &n) < 0, "exponent size \"1e3k\" refused", "strtod takes exponents: 1000 KiB");
	OK(size_parse("10B", &n) == 0 && n == 10, "size \"10B\" = 10", "a bare B suffix is refused (\"1kB\" is not)");
}

static void test_read_file_max(void)
{
	char path[] = "/tmp/cn.utXXXXXX";
	char *data = NULL;
	size_t len = 0;
	int fd = mkstemp(path);
	char block[1000];

	if (fd < 0)
		bail("mkstemp: %s", strerror(errno));
	memset(block, 'a', sizeof(block));
	for (int i = 0; i < 100; i++)
		if (write(fd, block, sizeof(block)) != (ssize_t)sizeof(block))
			bail("write: %s", strerror(errno));
	close(fd);

	OK(read_file_max(path, 100000, &data, &len) == 0, "a file of exactly max bytes is read");
	IS_INT(len, 100000, "its length");
	OK(data && data[len] == '\0' && data[len - 1] == 'a', "NUL-terminated");
	free(data);
	data = NULL;
	errno = 0;
	OK(read_file_max(path, 99999, &data, &len) < 0 && errno == EFBIG, "one byte over max: EFBIG");
	OK(data == NULL, "no buffer on failure");
	unlink(path);
	errno = 0;
	OK(read_file_max(path, 10, &data, &len) < 0 && errno == ENOENT, "missing file: ENOENT");
	OK(read_file_max("/dev/null", 10, &data, NULL) == 0 && data && data[0] == '\0', "empty file, len optional");
	free(data);
}

static void test_clocks(void)
{
	int64_t a = mono_ms(), ua = mono_us(), w = wall_ms();

	usleep(2000);
	OK(mono_ms() >= a + 1, "mono_ms moves forward");
	OK(mono_us() >= ua + 1000, "mono_us moves forward");
	OK(w > 1600000000000LL, "wall_ms is epoch milliseconds");
}

int main(void)
{
	test_buf();
	test_duration_parse();
	test_duration_format();
	test_size_parse();
	test_read_file_max();
	test_clocks();
	done_testing();
	return failures ? 1 : 0;
}
