/* test-checkpoint: full and delta round trips, tree hashes, hostile blobs,
 * chain fallback and compaction, on real directories under $TMPDIR. */
#define _GNU_SOURCE
#include "../tap.h"
#include "checkpoint.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <lz4frame.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char root[256];
static char err[1024];

static char *P(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static char *P(const char *fmt, ...)
{
	static char bufs[8][1024];
	static int k;
	char *b = bufs[k++ % 8];
	int n = snprintf(b, 1024, "%s/", root);
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(b + n, 1024 - n, fmt, ap);
	va_end(ap);
	return b;
}

static void put_file(const char *path, const void *data, size_t len, mode_t mode)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);

	if (fd < 0 || write(fd, data, len) != (ssize_t)len)
		bail("could not write \"%s\": %m", path);
	fchmod(fd, mode);
	close(fd);
}

static void put_pattern(const char *path, size_t len, unsigned seed, mode_t mode)
{
	unsigned char *b = malloc(len + 1);

	for (size_t i = 0; i < len; i++) {
		seed = seed * 1103515245 + 12345;
		b[i] = (i % 3) ? 'a' + (seed >> 16) % 26 : (seed >> 16);
	}
	put_file(path, b, len, mode);
	free(b);
}

static void patch_file(const char *path, off_t off, const char *s)
{
	int fd = open(path, O_WRONLY);

	if (fd < 0 || pwrite(fd, s, strlen(s), off) != (ssize_t)strlen(s))
		bail("could not patch \"%s\": %m", path);
	close(fd);
}

static void xmkdir(const char *path, mode_t mode)
{
	if (mkdir(path, 0700) < 0 || chmod(path, mode) < 0)
		bail("mkdir \"%s\": %m", path);
}

static void xsymlink(const char *target, const char *path)
{
	if (symlink(target, path) < 0)
		bail("symlink \"%s\": %m", path);
}

static int rm_rf(const char *path)
{
	char cmd[1200];

	snprintf(cmd, sizeof(cmd), "chmod -R u+rwx '%s' 2>/dev/null; rm -rf '%s'", path, path);
	return system(cmd);
}

static int read_all(int dfd, const char *name, char **out, size_t *len)
{
	int fd = openat(dfd, name, O_RDONLY | O_NOFOLLOW);
	struct stat st;

	if (fd < 0 || fstat(fd, &st) < 0)
		return -1;
	*out = malloc(st.st_size + 1);
	*len = st.st_size;
	if (read(fd, *out, st.st_size) != st.st_size) {
		close(fd);
		return -1;
	}
	close(fd);
	return 0;
}

/* Compares two trees entry by entry; returns the number of differences. */
static int tree_diff(int afd, int bfd, const char *rel)
{
	DIR *d = fdopendir(dup(afd));
	struct dirent *de;
	int diffs = 0, na = 0, nb = 0;

	if (!d)
		return 1;
	while ((de = readdir(d))) {
		struct stat sa, sb;

		if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
			continue;
		na++;
		if (fstatat(afd, de->d_name, &sa, AT_SYMLINK_NOFOLLOW) < 0 ||
		    fstatat(bfd, de->d_name, &sb, AT_SYMLINK_NOFOLLOW) < 0) {
			diag("missing: %s/%s", rel, de->d_name);
			diffs++;
			continue;
		}
		if ((sa.st_mode & S_IFMT) != (sb.st_mode & S_IFMT) ||
		    (!S_ISLNK(sa.st_mode) && (sa.st_mode & 0777) != (sb.st_mode & 0777)) ||
		    (S_ISREG(sa.st_mode) && sa.st_size != sb.st_size)) {
			diag("differs: %s/%s (mode %o vs %o, size %lld vs %lld)", rel, de->d_name,
			     sa.st_mode, sb.st_mode, (long long)sa.st_size, (long long)sb.st_size);
			diffs++;
			continue;
		}
		if (S_ISREG(sa.st_mode)) {
			char *x = NULL, *y = NULL;
			size_t lx = 0, ly = 0;

			if (read_all(afd, de->d_name, &x, &lx) || read_all(bfd, de->d_name, &y, &ly) ||
			    lx != ly || memcmp(x, y, lx)) {
				diag("content differs: %s/%s", rel, de->d_name);
				diffs++;
			}
			free(x);
			free(y);
		} else if (S_ISLNK(sa.st_mode)) {
			char x[4096], y[4096];
			ssize_t lx = readlinkat(afd, de->d_name, x, sizeof(x)), ly = readlinkat(bfd, de->d_name, y, sizeof(y));

			if (lx != ly || lx < 0 || memcmp(x, y, lx)) {
				diag("link differs: %s/%s", rel, de->d_name);
				diffs++;
			}
		} else if (S_ISDIR(sa.st_mode)) {
			int a = openat(afd, de->d_name, O_RDONLY | O_DIRECTORY), b = openat(bfd, de->d_name, O_RDONLY | O_DIRECTORY);
			char sub[1024];

			snprintf(sub, sizeof(sub), "%s/%s", rel, de->d_name);
			diffs += (a < 0 || b < 0) ? 1 : tree_diff(a, b, sub);
			if (a >= 0)
				close(a);
			if (b >= 0)
				close(b);
		}
	}
	closedir(d);
	d = fdopendir(dup(bfd));
	while (d && (de = readdir(d)))
		if (strcmp(de->d_name, ".") && strcmp(de->d_name, ".."))
			nb++;
	if (d)
		closedir(d);
	if (na != nb) {
		diag("%s: %d entries vs %d", rel, na, nb);
		diffs++;
	}
	return diffs;
}

static int trees_differ(const char *a, const char *b)
{
	int x = open(a, O_RDONLY | O_DIRECTORY), y = open(b, O_RDONLY | O_DIRECTORY);
	int d = (x < 0 || y < 0) ? 1 : tree_diff(x, y, ".");

	close(x);
	close(y);
	return d;
}

static char *fresh_dir(const char *name)
{
	char *p = P("%s", name);

	rm_rf(p);
	if (mkdir(p, 0700) < 0)
		bail("mkdir \"%s\": %m", p);
	return strdup(p);
}

static bool err_has(const char *s)
{
	if (strstr(err, s))
		return true;
	diag("error was: %s", err);
	return false;
}

/* ---- crafting blobs by hand (the format of docs/checkpoints.md) ---- */

struct rec {
	unsigned char b[1 << 20];
	size_t n;
};

static void r_put(struct rec *r, const void *p, size_t n)
{
	memcpy(r->b + r->n, p, n);
	r->n += n;
}

static void r_u32(unsigned char *p, uint32_t v)
{
	for (int i = 0; i < 4; i++)
		p[i] = v >> (8 * i);
}

static void r_entry(struct rec *r, int type, int flags, uint32_t mode, uint64_t size, const char *path, size_t plen,
		    const char *target)
{
	unsigned char h[24] = { 1, type, flags, 0 };
	size_t tlen = target ? strlen(target) : 0;

	r_u32(h + 4, mode);
	r_u32(h + 8, size);
	r_u32(h + 12, size >> 32);
	r_u32(h + 16, plen);
	r_u32(h + 20, tlen);
	r_put(r, h, 24);
	r_put(r, path, plen);
	if (tlen)
		r_put(r, target, tlen);
}

static void sha(const void *p, size_t n, unsigned char *out)
{
	unsigned int l;

	EVP_Digest(p, n, out, &l, EVP_sha256(), NULL);
}

static bool r_bad_hash;

static void r_block(struct rec *r, uint32_t idx, const void *data, uint32_t len)
{
	unsigned char h[44] = { 2 };

	r_u32(h + 4, idx);
	r_u32(h + 8, len);
	sha(data, len, h + 12);
	if (r_bad_hash)
		h[20] ^= 1;
	r_put(r, h, 44);
	r_put(r, data, len);
}

/* Content hash of a one-block file. */
static void r_file_end(struct rec *r, const void *data, uint32_t len, bool wrong)
{
	unsigned char h[36] = { 3 }, in[40] = { 0 };

	for (int i = 0; i < 8; i++)
		in[i] = (uint64_t)len >> (8 * i);
	if (len)
		sha(data, len, in + 8);
	sha(in, len ? 40 : 8, h + 4);
	if (wrong)
		h[10] ^= 1;
	r_put(r, h, 36);
}

static uint32_t r_entries;

static void r_end(struct rec *r, uint32_t entries)
{
	r_entries = entries;
	unsigned char h[40] = { 5 };

	r_u32(h + 4, entries);
	r_put(r, h, 40);
}

/* A blob around one frame of records; tree hash zeros (so a well-formed
 * blob still fails the final check, after everything it says was done). */
static unsigned char *r_blob(struct rec *r, bool delta, const unsigned char *base, size_t *len)
{
	LZ4F_preferences_t prefs = { 0 };
	size_t cap = LZ4F_compressFrameBound(r->n, &prefs) + 200;
	unsigned char *b = calloc(1, cap), check[32];
	size_t z;

	prefs.frameInfo.contentChecksumFlag = LZ4F_contentChecksumEnabled;
	prefs.frameInfo.blockChecksumFlag = LZ4F_blockChecksumEnabled;
	memcpy(b, "CAIRNCKP", 8);
	b[8] = 1;
	b[10] = delta;
	r_u32(b + 12, 65536);
	r_u32(b + 16, r->n);
	r_u32(b + 24, 1);
	r_u32(b + 28, r_entries);
	if (base)
		memcpy(b + 64, base, 32);
	z = LZ4F_compressFrame(b + 112, cap - 112, r->b, r->n, &prefs);
	r_u32(b + 104, z);
	r_u32(b + 108, r->n);
	sha(b, 96, check);
	memcpy(b + 96, check, 4);
	*len = 112 + z;
	return b;
}

static void build_tree(void)
{
	char *w = fresh_dir("w");

	xmkdir(P("w/src"), 0755);
	xmkdir(P("w/src/deep"), 0750);
	xmkdir(P("w/src/deep/er"), 0700);
	xmkdir(P("w/ro"), 0555 | 0200);
	xmkdir(P("w/gone"), 0755);
	xmkdir(P("w/becomes-file"), 0755);
	put_file(P("w/empty"), "", 0, 0644);
	put_file(P("w/hello.txt"), "hello\n", 6, 0644);
	put_file(P("w/script.sh"), "#!/bin/sh\necho hi\n", 18, 0755);
	put_file(P("w/readonly"), "ro\n", 3, 0444);
	put_pattern(P("w/big.bin"), 5 * 65536 + 123, 1, 0644);
	put_pattern(P("w/exact.bin"), 2 * 65536, 2, 0600);
	put_pattern(P("w/src/deep/er/leaf.c"), 1000, 3, 0644);
	put_pattern(P("w/gone/a"), 70000, 4, 0644);
	put_file(P("w/gone/b"), "b", 1, 0644);
	put_file(P("w/becomes-file/x"), "x", 1, 0644);
	put_file(P("w/becomes-dir"), "file", 4, 0644);
	put_file(P("w/rename-me"), "rename me", 9, 0644);
	put_pattern(P("w/shrinks"), 3 * 65536 + 10, 5, 0644);
	put_pattern(P("w/grows"), 65536 + 5, 6, 0644);
	put_file(P("w/name with spaces & ünïcode"), "u", 1, 0644);
	xsymlink("hello.txt", P("w/link"));
	xsymlink("/etc/passwd", P("w/abs-link"));
	xsymlink("does/not/exist", P("w/dangling"));
	xsymlink("src", P("w/dirlink"));
	chmod(P("w/ro"), 0555);
	free(w);
}

/* The changes a delta must carry. */
static void change_tree(void)
{
	chmod(P("w/ro"), 0755);
	patch_file(P("w/big.bin"), 2 * 65536 + 7, "CHANGED");
	truncate(P("w/shrinks"), 65536 + 3);
	{
		int fd = open(P("w/grows"), O_WRONLY | O_APPEND);

		if (write(fd, "more", 4) != 4)
			bail("append");
		close(fd);
	}
	rm_rf(P("w/gone"));
	rm_rf(P("w/becomes-file"));
	put_file(P("w/becomes-file"), "now a file", 10, 0644);
	unlink(P("w/becomes-dir"));
	xmkdir(P("w/becomes-dir"), 0700);
	put_file(P("w/becomes-dir/inside"), "in", 2, 0600);
	rename(P("w/rename-me"), P("w/src/renamed"));
	chmod(P("w/script.sh"), 0700);
	unlink(P("w/link"));
	xsymlink("script.sh", P("w/link"));
	put_file(P("w/new-empty"), "", 0, 0644);
	put_file(P("w/hello.txt"), "hello\n", 6, 0644);	/* rewritten, same bytes */
	chmod(P("w/ro"), 0555);
}

static void test_round_trips(void)
{
	struct checkpoint_result full, d1, d2;
	struct checkpoint_options o;
	struct checkpoint_manifest *rm = NULL;
	char *r1, *r2;
	int rc;

	build_tree();
	usleep(30000);	/* older than a clock tick: stat hints are trusted */
	checkpoint_options_init(&o);
	rc = checkpoint_capture(P("w"), NULL, NULL, &full, err, sizeof(err));
	if (!is_int(rc, 0, "full capture")) diag("%s", err);
	ok(full.full && full.entries == 25, "full: 25 entries (got %llu)", (unsigned long long)full.entries);
	{
		struct checkpoint_info info;

		ok(checkpoint_blob_info(full.blob, full.stored_size, &info, err, sizeof(err)) == 0 &&
		   info.full && info.entries == 25 && !memcmp(info.tree_hash, full.tree_hash, 32),
		   "blob header says what the capture did");
	}

	r1 = fresh_dir("r1");
	struct checkpoint_blob chain[3] = { { full.blob, full.stored_size, full.tree_hash } };
	rc = checkpoint_restore(r1, chain, 1, full.tree_hash, NULL, &rm, err, sizeof(err));
	if (!is_int(rc, 0, "full restore")) diag("%s", err);
	is_int(trees_differ(P("w"), r1), 0, "restored tree equals the source");
	ok(rm && !memcmp(checkpoint_manifest_tree_hash(rm), full.tree_hash, 32), "restored manifest has the tree hash");
	{
		struct checkpoint_result again;

		rc = checkpoint_capture(r1, NULL, NULL, &again, err, sizeof(err));
		ok(rc == 0 && !memcmp(again.tree_hash, full.tree_hash, 32), "capture of the restored tree: same tree hash");
		checkpoint_result_release(&again);
	}

	/* unchanged tree: an empty delta */
	rc = checkpoint_capture(P("w"), full.manifest, NULL, &d1, err, sizeof(err));
	ok(rc == 0 && d1.changed == 0 && d1.deleted == 0 && d1.data_bytes == 0 &&
	   !memcmp(d1.tree_hash, full.tree_hash, 32), "no change: empty delta, same tree hash");
	ok(d1.hashed_bytes < 65536, "no change: stat hints skip hashing (%llu bytes hashed)",
	   (unsigned long long)d1.hashed_bytes);
	checkpoint_result_release(&d1);

	change_tree();
	rc = checkpoint_capture(P("w"), full.manifest, NULL, &d1, err, sizeof(err));
	if (!is_int(rc, 0, "delta capture")) diag("%s", err);
	ok(!d1.full && !memcmp(d1.base_hash, full.tree_hash, 32), "delta names its base");
	ok(d1.data_bytes < 4 * 65536 + 100, "delta carries changed blocks only (%llu bytes)",
	   (unsigned long long)d1.data_bytes);
	ok(d1.deleted == 7, "deletions: gone/, gone/a, gone/b, becomes-file/, becomes-file/x, becomes-dir, rename-me (got %llu)",
	   (unsigned long long)d1.deleted);
	{
		json_t *s = checkpoint_summary_json(&d1);
		char *txt = json_dumps(s, JSON_COMPACT);

		ok(txt && strstr(txt, "\"kind\":\"delta\"") && strstr(txt, "src/renamed"), "summary json lists the changes");
		free(txt);
		json_decref(s);
	}

	/* the same chain, restored elsewhere */
	r2 = fresh_dir("r2");
	chain[1] = (struct checkpoint_blob){ d1.blob, d1.stored_size, d1.tree_hash };
	rc = checkpoint_restore(r2, chain, 2, d1.tree_hash, NULL, NULL, err, sizeof(err));
	if (!is_int(rc, 0, "full + delta restore")) diag("%s", err);
	is_int(trees_differ(P("w"), r2), 0, "full + delta: tree equals the changed source");

	/* the restored tree as the base of the next delta (another worker) */
	checkpoint_manifest_free(rm);
	rm = NULL;
	rm_rf(r2);
	mkdir(r2, 0700);
	rc = checkpoint_restore(r2, chain, 2, d1.tree_hash, NULL, &rm, err, sizeof(err));
	ok(rc == 0, "restore again for a takeover");
	put_file(P("r2/src/added-after-takeover"), "new", 3, 0644);
	patch_file(P("r2/big.bin"), 10, "X");
	rc = checkpoint_capture(r2, rm, NULL, &d2, err, sizeof(err));
	ok(rc == 0 && d2.data_bytes <= 65536 + 3, "delta after takeover: changed block only (%llu bytes)",
	   (unsigned long long)d2.data_bytes);
	chain[2] = (struct checkpoint_blob){ d2.blob, d2.stored_size, d2.tree_hash };
	rm_rf(r1);
	mkdir(r1, 0700);
	rc = checkpoint_restore(r1, chain, 3, d2.tree_hash, NULL, NULL, err, sizeof(err));
	if (!is_int(rc, 0, "chain of three restores")) diag("%s", err);
	is_int(trees_differ(r2, r1), 0, "chain of three: tree equals");

	/* stat hints: same size and mtime, different content */
	{
		struct stat st;
		struct checkpoint_result d3;
		struct timespec ts[2];

		stat(P("w/hello.txt"), &st);
		put_file(P("w/hello.txt"), "HELLO\n", 6, 0644);
		ts[0] = st.st_atim;
		ts[1] = st.st_mtim;
		utimensat(AT_FDCWD, P("w/hello.txt"), ts, 0);
		rc = checkpoint_capture(P("w"), d1.manifest, NULL, &d3, err, sizeof(err));
		ok(rc == 0 && d3.changed == 1 && memcmp(d3.tree_hash, d1.tree_hash, 32),
		   "content change behind an unchanged mtime is caught");
		checkpoint_result_release(&d3);
	}

	/* JSON manifest round trip, and as a capture base */
	{
		json_t *j = checkpoint_manifest_to_json(full.manifest);
		char *txt = json_dumps(j, JSON_COMPACT);
		json_t *back = json_loads(txt, 0, NULL);
		struct checkpoint_manifest *jm = NULL;
		struct checkpoint_result dj;

		rc = checkpoint_manifest_from_json(back, NULL, &jm, err, sizeof(err));
		ok(rc == 0 && !memcmp(checkpoint_manifest_tree_hash(jm), full.tree_hash, 32),
		   "manifest json round trip keeps the tree hash");
		rc = checkpoint_capture(P("w"), jm, NULL, &dj, err, sizeof(err));
		ok(rc == 0, "delta against a json manifest");
		chain[1] = (struct checkpoint_blob){ dj.blob, dj.stored_size, dj.tree_hash };
		rm_rf(r1);
		mkdir(r1, 0700);
		rc = checkpoint_restore(r1, chain, 2, NULL, NULL, NULL, err, sizeof(err));
		ok(rc == 0 && trees_differ(P("w"), r1) == 0, "full + delta from json base restores the tree");
		for (size_t i = 0; i < json_array_size(json_object_get(back, "entries")); i++) {
			json_t *e = json_array_get(json_object_get(back, "entries"), i);

			if (!strcmp(json_string_value(json_object_get(e, "type")), "file")) {
				json_object_set_new(e, "mode", json_integer(0700));
				break;
			}
		}
		checkpoint_manifest_free(jm);
		jm = NULL;
		ok(checkpoint_manifest_from_json(back, NULL, &jm, err, sizeof(err)) < 0 && err_has("tree_hash"),
		   "edited json manifest is refused");
		checkpoint_result_release(&dj);
		json_decref(j);
		json_decref(back);
		free(txt);
	}

	/* a capture stays within the blob size cap */
	{
		struct checkpoint_result big;
		struct checkpoint_options small;

		checkpoint_options_init(&small);
		small.max_blob_size = 4096;
		ok(checkpoint_capture(P("w"), NULL, &small, &big, err, sizeof(err)) < 0 &&
		   err_has("larger than 4096 bytes") && !big.blob, "capture refuses to exceed max_blob_size");
	}

	/* single-threaded blobs are restorable by the threaded reader and back */
	{
		struct checkpoint_result st1;

		o.threads = 1;
		rc = checkpoint_capture(P("w"), NULL, &o, &st1, err, sizeof(err));
		chain[0] = (struct checkpoint_blob){ st1.blob, st1.stored_size, NULL };
		rm_rf(r1);
		mkdir(r1, 0700);
		ok(rc == 0 && checkpoint_restore(r1, chain, 1, st1.tree_hash, NULL, NULL, err, sizeof(err)) == 0 &&
		   trees_differ(P("w"), r1) == 0, "one thread: round trip");
		checkpoint_result_release(&st1);
	}

	/* the whole chain again, hashing every byte written */
	{
		o.threads = 0;
		o.verify_data = true;
		chain[0] = (struct checkpoint_blob){ full.blob, full.stored_size, full.tree_hash };
		chain[1] = (struct checkpoint_blob){ d1.blob, d1.stored_size, d1.tree_hash };
		chain[2] = (struct checkpoint_blob){ d2.blob, d2.stored_size, d2.tree_hash };
		rm_rf(r1);
		mkdir(r1, 0700);
		rc = checkpoint_restore(r1, chain, 3, d2.tree_hash, &o, NULL, err, sizeof(err));
		if (!ok(rc == 0 && trees_differ(r2, r1) == 0, "verify_data: chain of three restores"))
			diag("%s", err);
	}

	/* chain fallback and compaction */
	{
		size_t used = 9;
		struct checkpoint_result cpt;
		uint8_t *bad = malloc(d2.stored_size);

		chain[0] = (struct checkpoint_blob){ full.blob, full.stored_size, full.tree_hash };
		chain[1] = (struct checkpoint_blob){ d1.blob, d1.stored_size, d1.tree_hash };
		memcpy(bad, d2.blob, d2.stored_size);
		bad[d2.stored_size - 20] ^= 0x40;
		chain[2] = (struct checkpoint_blob){ bad, d2.stored_size, d2.tree_hash };
		checkpoint_manifest_free(rm);
		rm = NULL;
		rm_rf(r1);
		mkdir(r1, 0700);
		rc = checkpoint_restore_newest(r1, chain, 3, NULL, &used, &rm, err, sizeof(err));
		ok(rc == 0 && used == 2, "corrupt newest delta: falls back to the one before (used %zu)", used);
		ok(err_has("checkpoint 3 of 3"), "and says which one was refused");
		ok(rm && !memcmp(checkpoint_manifest_tree_hash(rm), d1.tree_hash, 32), "fallback tree is the second checkpoint's");
		checkpoint_manifest_free(rm);
		rm = NULL;
		chain[2].data = d2.blob;
		rc = checkpoint_compact(chain, 3, root, NULL, &cpt, err, sizeof(err));
		ok(rc == 0 && cpt.full && !memcmp(cpt.tree_hash, d2.tree_hash, 32), "compaction: one full checkpoint, same tree");
		ok(rc == 0 && cpt.stored_size < full.stored_size + d1.stored_size + d2.stored_size, "compaction: smaller than the chain");
		chain[0] = (struct checkpoint_blob){ cpt.blob, cpt.stored_size, cpt.tree_hash };
		rm_rf(r1);
		mkdir(r1, 0700);
		ok(checkpoint_restore(r1, chain, 1, d2.tree_hash, NULL, NULL, err, sizeof(err)) == 0 &&
		   trees_differ(r2, r1) == 0, "compacted checkpoint restores the tree");
		checkpoint_result_release(&cpt);
		free(bad);
	}

	checkpoint_manifest_free(rm);
	checkpoint_result_release(&full);
	checkpoint_result_release(&d1);
	checkpoint_result_release(&d2);
	free(r1);
	free(r2);
}

/* A directory removed by one delta and created again by the next one. */
static void test_dir_comes_back(void)
{
	struct checkpoint_result c[3];
	struct checkpoint_blob chain[3];
	char *w = fresh_dir("w2"), *r;
	int rc = 0;

	xmkdir(P("w2/a"), 0755);
	put_file(P("w2/a/y"), "y", 1, 0640);
	for (int i = 0; i < 3; i++) {
		if (i == 1)
			rm_rf(P("w2/a"));
		if (i == 2) {
			xmkdir(P("w2/a"), 0711);
			put_file(P("w2/a/z"), "z", 1, 0400);
			xmkdir(P("w2/a/b"), 0500);
		}
		rc |= checkpoint_capture(w, i ? c[i - 1].manifest : NULL, NULL, &c[i], err, sizeof(err));
		chain[i] = (struct checkpoint_blob){ c[i].blob, c[i].stored_size, c[i].tree_hash };
	}
	r = fresh_dir("r3");
	if (!rc)
		rc = checkpoint_restore(r, chain, 3, c[2].tree_hash, NULL, NULL, err, sizeof(err));
	if (!ok(rc == 0, "a directory deleted by one delta and re-created by the next"))
		diag("%s", err);
	is_int(trees_differ(w, r), 0, "and the modes of read-only directories and files are kept");
	for (int i = 0; i < 3; i++)
		checkpoint_result_release(&c[i]);
	free(w);
	free(r);

	/* an empty workspace */
	w = fresh_dir("w3");
	r = fresh_dir("r4");
	rc = checkpoint_capture(w, NULL, NULL, &c[0], err, sizeof(err));
	chain[0] = (struct checkpoint_blob){ c[0].blob, c[0].stored_size, c[0].tree_hash };
	ok(rc == 0 && c[0].entries == 0 && checkpoint_restore(r, chain, 1, c[0].tree_hash, NULL, NULL, err, sizeof(err)) == 0,
	   "an empty workspace round-trips");
	checkpoint_result_release(&c[0]);
	free(w);
	free(r);
}

/* Restores a crafted blob into a fresh directory; returns the result. */
static int try_blob(struct rec *r, const struct checkpoint_options *o)
{
	size_t len;
	unsigned char *b = r_blob(r, false, NULL, &len);
	struct checkpoint_blob c = { b, len, NULL };
	char *d = fresh_dir("h");
	int rc = checkpoint_restore(d, &c, 1, NULL, o, NULL, err, sizeof(err));

	free(b);
	free(d);
	return rc;
}

static bool outside_clean(void)
{
	struct stat st;

	return lstat(P("x"), &st) < 0 && lstat(P("outside/x"), &st) < 0 && lstat(P("etc-x"), &st) < 0;
}

static void test_hostile(void)
{
	static struct rec r;
	struct checkpoint_options o;

	rm_rf(P("outside"));
	xmkdir(P("outside"), 0755);

	r.n = 0;
	r_entry(&r, 1, 0, 0644, 1, "../x", 4, NULL);
	r_block(&r, 0, "!", 1);
	r_file_end(&r, "!", 1, false);
	r_end(&r, 1);
	ok(try_blob(&r, NULL) < 0 && err_has("entry 1 \"../x\": path component \"..\" is not allowed"), "\"../x\" refused");

	r.n = 0;
	r_entry(&r, 1, 0, 0644, 1, "a/../../x", 9, NULL);
	r_end(&r, 1);
	ok(try_blob(&r, NULL) < 0 && err_has("\"..\" is not allowed"), "\"a/../../x\" refused");

	r.n = 0;
	{
		char abs[300];

		snprintf(abs, sizeof(abs), "%s/etc-x", root);
		r_entry(&r, 1, 0, 0644, 0, abs, strlen(abs), NULL);
	}
	r_file_end(&r, "", 0, false);
	r_end(&r, 1);
	ok(try_blob(&r, NULL) < 0 && err_has("absolute path"), "absolute path refused");

	r.n = 0;
	r_entry(&r, 1, 0, 0644, 1, "/etc/x", 6, NULL);
	r_block(&r, 0, "!", 1);
	r_file_end(&r, "!", 1, false);
	r_end(&r, 1);
	{
		struct stat st;
		bool before = lstat("/etc/x", &st) == 0;

		ok(try_blob(&r, NULL) < 0 && err_has("entry 1 \"/etc/x\": absolute path") &&
		   (before || lstat("/etc/x", &st) < 0), "\"/etc/x\" refused");
	}

	r.n = 0;
	r_entry(&r, 2, 0, 0755, 0, "a//b", 4, NULL);
	r_end(&r, 1);
	ok(try_blob(&r, NULL) < 0 && err_has("empty path component"), "empty component refused");

	r.n = 0;
	r_entry(&r, 2, 0, 0755, 0, "a\0b", 3, NULL);
	r_end(&r, 1);
	ok(try_blob(&r, NULL) < 0 && err_has("NUL"), "NUL in a path refused");

	/* a symlink to the outside, then a file through it */
	r.n = 0;
	r_entry(&r, 3, 0, 0777, strlen(P("outside")), "l", 1, P("outside"));
	r_entry(&r, 1, 0, 0644, 1, "l/x", 3, NULL);
	r_block(&r, 0, "!", 1);
	r_file_end(&r, "!", 1, false);
	r_end(&r, 2);
	ok(try_blob(&r, NULL) < 0 && err_has("entry 2 \"l/x\": parent is not a directory"), "write through a symlink refused");

	/* a symlink, then a file of the same name (would follow it) */
	r.n = 0;
	r_entry(&r, 3, 0, 0777, strlen(P("outside/x")), "l", 1, P("outside/x"));
	r_entry(&r, 1, 0, 0644, 1, "l", 1, NULL);
	r_block(&r, 0, "!", 1);
	r_file_end(&r, "!", 1, false);
	r_end(&r, 2);
	ok(try_blob(&r, NULL) < 0 && err_has("out of order or duplicate"), "file over a symlink refused");

	r.n = 0;
	r_entry(&r, 2, 0, 0755, 0, "d", 1, NULL);
	r_entry(&r, 2, 0, 0755, 0, "d", 1, NULL);
	r_end(&r, 1);
	ok(try_blob(&r, NULL) < 0 && err_has("entry 2 \"d\": out of order or duplicate"), "duplicate entry refused");

	checkpoint_options_init(&o);
	o.max_total_size = 1000;
	r.n = 0;
	r_entry(&r, 1, 0, 0644, 1ull << 40, "huge", 4, NULL);
	r_end(&r, 1);
	ok(try_blob(&r, &o) < 0 && err_has("entry 1 \"huge\": the tree would exceed the size limit"), "oversize file refused");

	o.max_entries = 2;
	r.n = 0;
	r_entry(&r, 2, 0, 0755, 0, "a", 1, NULL);
	r_entry(&r, 2, 0, 0755, 0, "b", 1, NULL);
	r_entry(&r, 2, 0, 0755, 0, "c", 1, NULL);
	r_end(&r, 3);
	ok(try_blob(&r, &o) < 0 && err_has("entry 3 \"c\": more than 2 entries"), "too many entries refused");

	checkpoint_options_init(&o);
	o.max_path = 10;
	r.n = 0;
	r_entry(&r, 2, 0, 0755, 0, "abcdefghijk", 11, NULL);
	r_end(&r, 1);
	ok(try_blob(&r, &o) < 0 && err_has("longer than 10 bytes"), "long path refused");

	r.n = 0;
	r_entry(&r, 1, 0, 0644, 1, "f", 1, NULL);
	r_block(&r, 0, "!", 1);
	r_file_end(&r, "!", 1, true);
	r_end(&r, 1);
	ok(try_blob(&r, NULL) < 0 && err_has("entry 1 \"f\": content does not match its hash"), "content hash mismatch refused");

	checkpoint_options_init(&o);
	o.verify_data = true;
	r.n = 0;
	r_entry(&r, 1, 0, 0644, 1, "f", 1, NULL);
	r_bad_hash = true;
	r_block(&r, 0, "!", 1);
	r_bad_hash = false;
	r_file_end(&r, "!", 1, false);
	r_end(&r, 1);
	ok(try_blob(&r, &o) < 0 && err_has("entry 1 \"f\": data does not match the hash of block 0"),
	   "verify_data: a block that does not match its recorded hash is refused");

	r.n = 0;
	r_entry(&r, 1, 0, 0644, 5, "f", 1, NULL);
	r_block(&r, 0, "!", 1);
	r_file_end(&r, "!", 1, false);
	r_end(&r, 1);
	ok(try_blob(&r, NULL) < 0 && err_has("entry 1 \"f\": bad length for block 0"), "short block refused");

	r.n = 0;
	r_entry(&r, 1, 0, 0644, 1, "f", 1, NULL);
	r_block(&r, 0, "!", 1);
	r_file_end(&r, "!", 1, false);
	r_end(&r, 1);
	ok(try_blob(&r, NULL) < 0 && err_has("tree hash mismatch"), "wrong tree hash refused");

	r.n = 0;
	r_entry(&r, 1, 0, 0644, 1, "f", 1, NULL);
	r_block(&r, 0, "!", 1);
	ok(try_blob(&r, NULL) < 0 && err_has("no end record"), "missing end record refused");

	ok(outside_clean(), "nothing was written outside the target");

	/* truncated and bit-flipped real blobs */
	{
		struct checkpoint_result full;
		struct checkpoint_blob c;
		char *d;
		size_t cuts[] = { 0, 50, 103, 104, 112, 400 };
		int refused = 0, flips = 0, npos = 0;

		if (checkpoint_capture(P("w"), NULL, NULL, &full, err, sizeof(err)) < 0)
			bail("capture: %s", err);
		for (size_t i = 0; i < sizeof(cuts) / sizeof(cuts[0]); i++) {
			c = (struct checkpoint_blob){ full.blob, cuts[i], NULL };
			d = fresh_dir("h");
			refused += checkpoint_restore(d, &c, 1, NULL, NULL, NULL, err, sizeof(err)) < 0 && strstr(err, "truncated");
			free(d);
		}
		c = (struct checkpoint_blob){ full.blob, full.stored_size - 1, NULL };
		d = fresh_dir("h");
		refused += checkpoint_restore(d, &c, 1, NULL, NULL, NULL, err, sizeof(err)) < 0;
		free(d);
		is_int(refused, 7, "truncated blobs refused");
		diag("last: %s", err);

		unsigned char *b = malloc(full.stored_size);
		for (size_t pos = 5; pos < full.stored_size; pos += full.stored_size / 23 + 1) {
			memcpy(b, full.blob, full.stored_size);
			b[pos] ^= 0x10;
			npos++;
			c = (struct checkpoint_blob){ b, full.stored_size, NULL };
			d = fresh_dir("h");
			if (checkpoint_restore(d, &c, 1, NULL, NULL, NULL, err, sizeof(err)) < 0)
				flips++;
			else
				diag("flip at %zu was not caught", pos);
			free(d);
		}
		is_int(flips, npos, "bit flips anywhere are refused (%d positions)", npos);
		memcpy(b, full.blob, full.stored_size);
		b[full.stored_size / 2] ^= 1;
		c = (struct checkpoint_blob){ b, full.stored_size, NULL };
		d = fresh_dir("h");
		ok(checkpoint_restore(d, &c, 1, NULL, NULL, NULL, err, sizeof(err)) < 0 &&
		   err_has("checkpoint 1 of 1: frame") && err_has("lz4"), "a flipped data bit: checksum error names the frame");
		free(d);
		b[full.stored_size / 2] ^= 1;
		b[40] ^= 1;
		d = fresh_dir("h");
		ok(checkpoint_restore(d, &c, 1, NULL, NULL, NULL, err, sizeof(err)) < 0 && err_has("header checksum"),
		   "a flipped header bit is refused");
		free(d);
		free(b);

		/* a delta whose base is not the checkpoint before it */
		struct checkpoint_blob two[2] = { { full.blob, full.stored_size, NULL }, { full.blob, full.stored_size, NULL } };
		d = fresh_dir("h");
		ok(checkpoint_restore(d, two, 2, NULL, NULL, NULL, err, sizeof(err)) < 0 && err_has("full checkpoint inside a chain"),
		   "two full checkpoints are not a chain");
		free(d);
		d = fresh_dir("h");
		put_file(P("h/junk"), "j", 1, 0644);
		ok(checkpoint_restore(d, two, 1, NULL, NULL, NULL, err, sizeof(err)) < 0 && err_has("not empty"),
		   "restore into a non-empty directory refused");
		free(d);
		checkpoint_result_release(&full);
	}
	ok(outside_clean(), "still nothing outside the target");
}

int main(void)
{
	const char *tmp = getenv("TMPDIR");

	snprintf(root, sizeof(root), "%s/cn-ckpt.XXXXXX", tmp && *tmp ? tmp : "/tmp");
	if (!mkdtemp(root))
		bail("mkdtemp: %m");
	test_round_trips();
	test_dir_comes_back();
	test_hostile();
	rm_rf(root);
	return done_testing();
}
