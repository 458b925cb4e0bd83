/* bench-checkpoint: times checkpoints of a generated 256 MiB workspace
 * (text-like and incompressible files): full capture, a delta after 1% of
 * it changed, restores; and the lz4 command line on the same bytes, in the
 * same run. Prints a table and one "bench-checkpoint: key=value" line.
 * Usage: bench-checkpoint [MiB [LZ4 acceleration]] (default 256 MiB, the
 * library's default acceleration). Uses $TMPDIR or /tmp. */
#define _GNU_SOURCE
#include "checkpoint.h"
#include "log.h"
#include "util.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

static char err[1024];
static uint64_t rng = 88172645463325252ULL;

static uint64_t next_rand(void)
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return rng;
}

/* Source-code-like text: words, punctuation, indentation, newlines. */
static void fill_text(char *b, size_t n)
{
	static const char *w[] = { "the", "quick", "brown", "fox", "jumps", "over", "lazy", "dog", "int",
		"return", "struct", "static", "void", "char", "if", "else", "for", "while", "workflow",
		"checkpoint", "engine", "worker", "lease", "epoch", "run_id", "step", "0x1f", "{", "}",
		"(", ")", ";", "=", "+", "printf", "error", "buffer", "size_t", "const", "unsigned",
		"memory", "thread", "mutex", "signal", "process", "agent", "observe", "plan", "tool",
		"result", "json", "http", "request", "response", "token", "model", "output", "input" };
	size_t nw = sizeof(w) / sizeof(w[0]), p = 0;
	int col = 0;

	while (p < n) {
		const char *x = w[next_rand() % nw];
		size_t l = strlen(x);

		if (p + l + 1 > n)
			break;
		memcpy(b + p, x, l);
		p += l;
		col += l + 1;
		if (col > 70 || next_rand() % 11 == 0) {
			b[p++] = '\n';
			col = 0;
			for (int i = next_rand() % 4; i > 0 && p < n; i--)
				b[p++] = '\t';
		} else {
			b[p++] = ' ';
		}
	}
	while (p < n)
		b[p++] = '\n';
}

static void fill_random(char *b, size_t n)
{
	for (size_t i = 0; i + 8 <= n; i += 8) {
		uint64_t r = next_rand();

		memcpy(b + i, &r, 8);
	}
}

static void put(const char *path, const char *data, size_t len)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);

	if (fd < 0 || write(fd, data, len) != (ssize_t)len)
		die("could not write \"%s\": %m", path);
	close(fd);
}

static int run(const char *cmd)
{
	int st = system(cmd);

	return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* CPU time of this process (all threads) or of its waited-for children. */
static int64_t cpu_us(int who)
{
	struct rusage ru;

	getrusage(who, &ru);
	return (int64_t)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1000000 + ru.ru_utime.tv_usec + ru.ru_stime.tv_usec;
}

static double mbps(uint64_t bytes, int64_t us)
{
	return us > 0 ? bytes / (double)us : 0;
}

/* Times `lz4 -1` on a tar of dir; returns microseconds, or -1. */
static int64_t time_lz4(const char *dir, const char *tmp, const char *name, uint64_t *in, uint64_t *out, int64_t *cpu)
{
	char cmd[4096], tarf[1024], lzf[1024];
	struct stat st;
	int64_t t0, us;

	snprintf(tarf, sizeof(tarf), "%s/%s.tar", tmp, name);
	snprintf(lzf, sizeof(lzf), "%s/%s.tar.lz4", tmp, name);
	snprintf(cmd, sizeof(cmd), "tar -cf '%s' -C '%s' .", tarf, dir);
	if (run(cmd))
		return -1;
	/* read it once so both sides start from the page cache */
	snprintf(cmd, sizeof(cmd), "cat '%s' > /dev/null", tarf);
	(void)run(cmd);
	snprintf(cmd, sizeof(cmd), "lz4 -1 -q -f '%s' '%s'", tarf, lzf);
	t0 = mono_us();
	*cpu = cpu_us(RUSAGE_CHILDREN);
	if (run(cmd))
		return -1;
	us = mono_us() - t0;
	*cpu = cpu_us(RUSAGE_CHILDREN) - *cpu;
	if (stat(tarf, &st) < 0)
		return -1;
	*in = st.st_size;
	if (stat(lzf, &st) < 0)
		return -1;
	*out = st.st_size;
	unlink(tarf);
	unlink(lzf);
	return us;
}

static void row(const char *what, int64_t us, int64_t cpu, uint64_t bytes, uint64_t raw, uint64_t stored)
{
	printf("%-34s %9.1f %9.1f %8.0f", what, us / 1e3, cpu / 1e3, mbps(bytes, us));
	if (stored)
		printf(" %7.2f %12llu", (double)raw / stored, (unsigned long long)stored);
	printf("\n");
}

static void fresh(const char *path)
{
	if (mkdir(path, 0700) < 0)
		die("mkdir \"%s\": %m", path);
}

int main(int argc, char **argv)
{
	const char *t = getenv("TMPDIR");
	char tmp[512], ws[600], text[700], bin[700], r1[600], r2[600], r3[600], path[900], cmd[1300];
	uint64_t mib = argc > 1 ? strtoull(argv[1], NULL, 10) : 256;
	uint64_t total = mib << 20, text_bytes = total * 5 / 8, bin_bytes = total - text_bytes, changed = 0;
	struct checkpoint_result full, delta, textfull;
	struct checkpoint_manifest *rm = NULL;
	char *buf;
	int64_t t0, c0, us_full, us_delta, us_text, us_restore, us_restore2, us_restore3, us_lz4, us_lz4_text;
	int64_t cpu_full, cpu_delta, cpu_text, cpu_restore, cpu_restore2, cpu_restore3, cpu_lz4 = 0, cpu_lz4_text = 0;
	uint64_t lz_in = 0, lz_out = 0, lzt_in = 0, lzt_out = 0;

	struct checkpoint_options copt;

	log_init("bench-checkpoint", LOG_INFO);
	checkpoint_options_init(&copt);
	if (argc > 2)
		copt.acceleration = atoi(argv[2]);
	if (!mib || mib > 16384)
		die("usage: bench-checkpoint [MiB]");
	snprintf(tmp, sizeof(tmp), "%s/cn-bench.XXXXXX", t && *t ? t : "/tmp");
	if (!mkdtemp(tmp))
		die("mkdtemp: %m");
	snprintf(ws, sizeof(ws), "%s/ws", tmp);
	snprintf(text, sizeof(text), "%s/text", ws);
	snprintf(bin, sizeof(bin), "%s/bin", ws);
	fresh(ws);
	fresh(text);
	fresh(bin);

	/* text: 16 directories of 64 KiB .. 256 KiB files, plus a few 4 MiB
	 * ones; binary: 8 MiB files of random bytes */
	buf = xmalloc(8 << 20);
	{
		uint64_t left = text_bytes, big = text_bytes / 3;
		int n = 0;

		for (int d = 0; d < 16; d++) {
			snprintf(path, sizeof(path), "%s/d%02d", text, d);
			fresh(path);
		}
		while (left) {
			size_t len = big ? 4 << 20 : (64 << 10) * (1 + next_rand() % 4);

			if (len > left)
				len = left;
			fill_text(buf, len);
			if (big) {
				snprintf(path, sizeof(path), "%s/big%02d.txt", text, n);
				big = big > len ? big - len : 0;
			} else {
				snprintf(path, sizeof(path), "%s/d%02d/f%05d.c", text, n % 16, n);
			}
			put(path, buf, len);
			left -= len;
			n++;
		}
		left = bin_bytes;
		for (n = 0; left; n++) {
			size_t len = left < (8 << 20) ? left : 8 << 20;

			fill_random(buf, len);
			snprintf(path, sizeof(path), "%s/blob%02d.bin", bin, n);
			put(path, buf, len);
			left -= len;
		}
	}
	snprintf(cmd, sizeof(cmd), "ln -s text/big00.txt '%s/link'; sync", ws);
	(void)run(cmd);
	usleep(50000);

	/* full checkpoint of the text part alone, then of everything */
	t0 = mono_us();
	c0 = cpu_us(RUSAGE_SELF);
	if (checkpoint_capture(text, NULL, &copt, &textfull, err, sizeof(err)) < 0)
		die("text capture: %s", err);
	us_text = mono_us() - t0;
	cpu_text = cpu_us(RUSAGE_SELF) - c0;
	t0 = mono_us();
	c0 = cpu_us(RUSAGE_SELF);
	if (checkpoint_capture(ws, NULL, &copt, &full, err, sizeof(err)) < 0)
		die("full capture: %s", err);
	us_full = mono_us() - t0;
	cpu_full = cpu_us(RUSAGE_SELF) - c0;

	/* change 1%: one block in each big text file, rewrite some small
	 * files, append to one, delete some, add some */
	{
		uint64_t target = total / 100;

		for (int i = 0; changed < target / 4; i++) {
			int fd;

			snprintf(path, sizeof(path), "%s/big%02d.txt", text, i);
			if ((fd = open(path, O_WRONLY)) < 0)
				break;
			fill_text(buf, 65536);
			if (pwrite(fd, buf, 65536, (off_t)(i % 60) * 65536) != 65536)
				die("pwrite: %m");
			close(fd);
			changed += 65536;
		}
		for (int n = 0; changed < target * 3 / 4; n++) {
			snprintf(path, sizeof(path), "%s/d%02d/new%05d.c", text, n % 16, n);
			fill_text(buf, 96 << 10);
			put(path, buf, 96 << 10);
			changed += 96 << 10;
		}
		snprintf(path, sizeof(path), "%s/blob00.bin", bin);
		{
			int fd = open(path, O_WRONLY | O_APPEND);

			fill_random(buf, target - changed);
			if (fd < 0 || write(fd, buf, target - changed) != (ssize_t)(target - changed))
				die("append: %m");
			close(fd);
			changed = target;
		}
		snprintf(cmd, sizeof(cmd), "rm -f '%s'/d03/f*0.c", text);
		(void)run(cmd);
	}
	t0 = mono_us();
	c0 = cpu_us(RUSAGE_SELF);
	if (checkpoint_capture(ws, full.manifest, &copt, &delta, err, sizeof(err)) < 0)
		die("delta capture: %s", err);
	us_delta = mono_us() - t0;
	cpu_delta = cpu_us(RUSAGE_SELF) - c0;

	/* restores */
	snprintf(r1, sizeof(r1), "%s/r1", tmp);
	snprintf(r2, sizeof(r2), "%s/r2", tmp);
	snprintf(r3, sizeof(r3), "%s/r3", tmp);
	fresh(r1);
	fresh(r2);
	fresh(r3);
	{
		struct checkpoint_blob chain[2] = {
			{ full.blob, full.stored_size, full.tree_hash },
			{ delta.blob, delta.stored_size, delta.tree_hash },
		};

		t0 = mono_us();
	c0 = cpu_us(RUSAGE_SELF);
		if (checkpoint_restore(r1, chain, 1, full.tree_hash, NULL, NULL, err, sizeof(err)) < 0)
			die("restore: %s", err);
		us_restore = mono_us() - t0;
	cpu_restore = cpu_us(RUSAGE_SELF) - c0;
		t0 = mono_us();
	c0 = cpu_us(RUSAGE_SELF);
		if (checkpoint_restore(r2, chain, 2, delta.tree_hash, NULL, &rm, err, sizeof(err)) < 0)
			die("restore of full + delta: %s", err);
		us_restore2 = mono_us() - t0;
	cpu_restore2 = cpu_us(RUSAGE_SELF) - c0;
		{
			struct checkpoint_options o;

			checkpoint_options_init(&o);
			o.verify_data = true;
			t0 = mono_us();
	c0 = cpu_us(RUSAGE_SELF);
			if (checkpoint_restore(r3, chain, 1, full.tree_hash, &o, NULL, err, sizeof(err)) < 0)
				die("restore with verify_data: %s", err);
			us_restore3 = mono_us() - t0;
	cpu_restore3 = cpu_us(RUSAGE_SELF) - c0;
		}
	}

	/* the lz4 command line on the same bytes */
	us_lz4 = time_lz4(ws, tmp, "ws", &lz_in, &lz_out, &cpu_lz4);
	us_lz4_text = time_lz4(text, tmp, "text", &lzt_in, &lzt_out, &cpu_lz4_text);

	printf("%-34s %9s %9s %8s %7s %12s\n", "", "wall ms", "cpu ms", "MB/s", "ratio", "stored bytes");
	row("full checkpoint, text only", us_text, cpu_text, textfull.tree_bytes, textfull.raw_size, textfull.stored_size);
	row("full checkpoint, mixed", us_full, cpu_full, full.tree_bytes, full.raw_size, full.stored_size);
	row("delta checkpoint (1% changed)", us_delta, cpu_delta, delta.data_bytes, delta.raw_size, delta.stored_size);
	row("restore full", us_restore, cpu_restore, full.tree_bytes, 0, 0);
	row("restore full + delta", us_restore2, cpu_restore2, delta.tree_bytes, 0, 0);
	row("restore full, rehashing all data", us_restore3, cpu_restore3, full.tree_bytes, 0, 0);
	if (us_lz4 >= 0)
		row("lz4 -1 CLI, tar of mixed", us_lz4, cpu_lz4, lz_in, lz_in, lz_out);
	if (us_lz4_text >= 0)
		row("lz4 -1 CLI, tar of text only", us_lz4_text, cpu_lz4_text, lzt_in, lzt_in, lzt_out);
	printf("tree %llu bytes, %llu entries; delta carried %llu bytes of %llu changed, hashed %llu; "
	       "delta/full time %.1f%%\n",
	       (unsigned long long)full.tree_bytes, (unsigned long long)full.entries,
	       (unsigned long long)delta.data_bytes, (unsigned long long)changed,
	       (unsigned long long)delta.hashed_bytes, 100.0 * us_delta / us_full);
	printf("bench-checkpoint: tree_bytes=%llu full_ms=%.1f full_mbps=%.0f full_ratio=%.3f full_stored=%zu "
	       "text_mbps=%.0f text_ratio=%.3f delta_ms=%.1f delta_stored=%zu delta_pct_of_full=%.1f "
	       "restore_ms=%.1f restore_mbps=%.0f restore_chain_ms=%.1f restore_chain_mbps=%.0f restore_verify_mbps=%.0f "
	       "lz4cli_mbps=%.0f lz4cli_ratio=%.3f lz4cli_text_mbps=%.0f lz4cli_text_ratio=%.3f "
	       "full_cpu_ms=%.0f text_cpu_ms=%.0f restore_cpu_ms=%.0f lz4cli_text_cpu_ms=%.0f\n",
	       (unsigned long long)full.tree_bytes, us_full / 1e3, mbps(full.tree_bytes, us_full),
	       (double)full.raw_size / full.stored_size, full.stored_size,
	       mbps(textfull.tree_bytes, us_text), (double)textfull.raw_size / textfull.stored_size,
	       us_delta / 1e3, delta.stored_size, 100.0 * us_delta / us_full,
	       us_restore / 1e3, mbps(full.tree_bytes, us_restore),
	       us_restore2 / 1e3, mbps(delta.tree_bytes, us_restore2), mbps(full.tree_bytes, us_restore3),
	       us_lz4 >= 0 ? mbps(lz_in, us_lz4) : 0, lz_out ? (double)lz_in / lz_out : 0,
	       us_lz4_text >= 0 ? mbps(lzt_in, us_lz4_text) : 0, lzt_out ? (double)lzt_in / lzt_out : 0,
	       cpu_full / 1e3, cpu_text / 1e3, cpu_restore / 1e3, cpu_lz4_text / 1e3);

	checkpoint_manifest_free(rm);
	checkpoint_result_release(&full);
	checkpoint_result_release(&delta);
	checkpoint_result_release(&textfull);
	free(buf);
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", tmp);
	(void)run(cmd);
	return 0;
}
