/* checkpoint: capture a workspace tree into a full or delta blob, restore a
 * chain of blobs into an empty directory and verify it. Owns the blob format
 * and the manifest. Never follows a symlink, never writes outside the
 * target directory, and treats every byte of a blob as hostile. No database
 * code: callers store and fetch blobs. */
#define _GNU_SOURCE
#include "checkpoint.h"
#include "util.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <lz4frame.h>
#include <openssl/evp.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

/* Blob header (little-endian):
 *   0  magic "CAIRNCKP"     8  u16 version     10 u16 flags (1 = delta)
 *   12 u32 block size       16 u64 raw size    24 u32 frames
 *   28 u32 entries          32 tree hash[32]   64 base hash[32]
 *   96 u32 check (first 4 bytes of SHA-256 of bytes 0..95)   100 u32 zero
 * then `frames` times: u32 stored length, u32 raw length, one LZ4 frame
 * (content size, content checksum and block checksums on) holding whole
 * records; a record never straddles two frames. */
#define HDR_LEN 104
#define HDR_MAGIC "CAIRNCKP"
#define HDR_VERSION 1
#define HDR_DELTA 1
#define FRAME_PREFIX 8
#define CHUNK_CAP (4u << 20)

/* Records, each starting with its op byte. */
enum {
	REC_ENTRY = 1,		/* type u8, flags u8, pad u8, mode u32, size u64,
				 * path len u32, target len u32, path, target */
	REC_BLOCK = 2,		/* pad[3], index u32, len u32, hash[32], data */
	REC_FILE_END = 3,	/* pad[3], content hash[32] */
	REC_DELETE = 4,		/* pad[3], path len u32, path */
	REC_END = 5,		/* pad[3], entries u32, tree hash[32] */
};
#define ENTRY_HDR 24
#define BLOCK_HDR 44
#define FILE_END_LEN 36
#define DELETE_HDR 8
#define END_LEN 40
#define ENTRY_PATCH 1

#define MAX_DEPTH 256
#define LIST_CAP 64

struct checkpoint_manifest {
	struct checkpoint_entry *e;
	size_t n, cap;
	uint8_t tree_hash[CHECKPOINT_HASH_LEN];
	/* coarse wall clock (ns) when the tree was read or written: a stat
	 * hint whose ctime is not older than this is not trusted */
	int64_t stamp_ns;
};

static const uint8_t zero_hash[CHECKPOINT_HASH_LEN];

static void seterr(char *err, size_t errlen, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void seterr(char *err, size_t errlen, const char *fmt, ...)
{
	va_list ap;

	if (!err || !errlen)
		return;
	va_start(ap, fmt);
	vsnprintf(err, errlen, fmt, ap);
	va_end(ap);
}

/* Prefixes err with "prefix: ", in place. */
static void preerr(char *err, size_t errlen, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void preerr(char *err, size_t errlen, const char *fmt, ...)
{
	char pre[128], *old;
	va_list ap;

	if (!err || !errlen)
		return;
	va_start(ap, fmt);
	vsnprintf(pre, sizeof(pre), fmt, ap);
	va_end(ap);
	old = xstrdup(err);
	snprintf(err, errlen, "%s: %s", pre, old);
	free(old);
}

static inline void put16(uint8_t *p, uint16_t v) { p[0] = v; p[1] = v >> 8; }
static inline void put32(uint8_t *p, uint32_t v) { for (int i = 0; i < 4; i++) p[i] = v >> (8 * i); }
static inline void put64(uint8_t *p, uint64_t v) { for (int i = 0; i < 8; i++) p[i] = v >> (8 * i); }
static inline uint16_t get16(const uint8_t *p) { return p[0] | (uint16_t)p[1] << 8; }
static inline uint32_t get32(const uint8_t *p)
{
	return p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}
static inline uint64_t get64(const uint8_t *p) { return get32(p) | (uint64_t)get32(p + 4) << 32; }

/* ---- hashing ---- */

static EVP_MD *sha256_md;
static pthread_once_t sha256_once = PTHREAD_ONCE_INIT;

static void sha256_init_once(void)
{
	sha256_md = EVP_MD_fetch(NULL, "SHA256", NULL);
}

static const EVP_MD *md(void)
{
	pthread_once(&sha256_once, sha256_init_once);
	return sha256_md ? sha256_md : EVP_sha256();
}

static void sha256(const void *data, size_t len, uint8_t *out)
{
	unsigned int n = 0;

	if (!EVP_Digest(data, len, out, &n, md(), NULL))
		abort();
}

struct hasher {
	EVP_MD_CTX *ctx;
};

static void hasher_begin(struct hasher *h)
{
	h->ctx = EVP_MD_CTX_new();
	if (!h->ctx || !EVP_DigestInit_ex(h->ctx, md(), NULL))
		abort();
}

static void hasher_add(struct hasher *h, const void *data, size_t len)
{
	if (!EVP_DigestUpdate(h->ctx, data, len))
		abort();
}

static void hasher_end(struct hasher *h, uint8_t *out)
{
	unsigned int n = 0;

	if (!EVP_DigestFinal_ex(h->ctx, out, &n))
		abort();
	EVP_MD_CTX_free(h->ctx);
	h->ctx = NULL;
}

/* Length of block i of a file of the given size. */
static size_t old_block_len(uint64_t size, uint32_t i)
{
	uint64_t start = (uint64_t)i * CHECKPOINT_BLOCK_SIZE;

	return size <= start ? 0 : size - start < CHECKPOINT_BLOCK_SIZE ? size - start : CHECKPOINT_BLOCK_SIZE;
}

/* A file's content hash: SHA-256 of its size and its block hashes. */
static void file_hash(uint64_t size, const uint8_t (*blocks)[CHECKPOINT_HASH_LEN], uint32_t n, uint8_t *out)
{
	struct hasher h;
	uint8_t sz[8];

	put64(sz, size);
	hasher_begin(&h);
	hasher_add(&h, sz, 8);
	if (n)
		hasher_add(&h, blocks, (size_t)n * CHECKPOINT_HASH_LEN);
	hasher_end(&h, out);
}

/* The tree hash: SHA-256 over every entry in path order. */
static void tree_hash(const struct checkpoint_entry *e, size_t n, uint8_t *out)
{
	static const char tag[] = "cairn-tree-v1";
	struct hasher h;
	uint8_t hdr[17];

	hasher_begin(&h);
	hasher_add(&h, tag, sizeof(tag));
	put32(hdr, CHECKPOINT_BLOCK_SIZE);
	hasher_add(&h, hdr, 4);
	for (size_t i = 0; i < n; i++) {
		size_t plen = strlen(e[i].path);

		hdr[0] = e[i].type;
		put32(hdr + 1, e[i].mode);
		put64(hdr + 5, e[i].size);
		put32(hdr + 13, plen);
		hasher_add(&h, hdr, 17);
		hasher_add(&h, e[i].path, plen);
		hasher_add(&h, e[i].hash, CHECKPOINT_HASH_LEN);
	}
	hasher_end(&h, out);
}

void checkpoint_hash_hex(const uint8_t *hash, char *out)
{
	static const char hx[] = "0123456789abcdef";

	for (int i = 0; i < CHECKPOINT_HASH_LEN; i++) {
		out[2 * i] = hx[hash[i] >> 4];
		out[2 * i + 1] = hx[hash[i] & 15];
	}
	out[2 * CHECKPOINT_HASH_LEN] = '\0';
}

static int hexval(char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

int checkpoint_hash_parse(const char *hex, uint8_t *hash)
{
	if (!hex || strlen(hex) != 2 * CHECKPOINT_HASH_LEN)
		return -1;
	for (int i = 0; i < CHECKPOINT_HASH_LEN; i++) {
		int hi = hexval(hex[2 * i]), lo = hexval(hex[2 * i + 1]);

		if (hi < 0 || lo < 0)
			return -1;
		hash[i] = hi << 4 | lo;
	}
	return 0;
}

/* ---- options, manifests ---- */

void checkpoint_options_init(struct checkpoint_options *o)
{
	memset(o, 0, sizeof(*o));
	o->acceleration = 1;
	o->restat = true;
	o->max_total_size = (uint64_t)16 << 30;
	o->max_entries = 1000000;
	o->max_path = 4095;
	o->max_blob_size = (uint64_t)1000 << 20;
}

static void options_resolve(const struct checkpoint_options *in, struct checkpoint_options *o)
{
	if (in)
		*o = *in;
	else
		checkpoint_options_init(o);
	if (o->threads <= 0) {
		long n = sysconf(_SC_NPROCESSORS_ONLN);

		o->threads = n < 1 ? 1 : n > 4 ? 4 : (int)n;
	}
	if (o->threads > 16)
		o->threads = 16;
	if (o->acceleration < 1)
		o->acceleration = 1;
	if (!o->max_path || o->max_path > 65535)
		o->max_path = 4095;
	if (!o->max_blob_size)
		o->max_blob_size = (uint64_t)1000 << 20;
	if (!o->max_total_size)
		o->max_total_size = (uint64_t)16 << 30;
	if (!o->max_entries)
		o->max_entries = 1000000;
}

static void entry_release(struct checkpoint_entry *e)
{
	free(e->path);
	free(e->target);
	free(e->blocks);
	memset(e, 0, sizeof(*e));
}

static struct checkpoint_manifest *manifest_new(void)
{
	return xcalloc(1, sizeof(struct checkpoint_manifest));
}

void checkpoint_manifest_free(struct checkpoint_manifest *m)
{
	if (!m)
		return;
	for (size_t i = 0; i < m->n; i++)
		entry_release(&m->e[i]);
	free(m->e);
	free(m);
}

static struct checkpoint_entry *manifest_push(struct checkpoint_manifest *m)
{
	if (m->n == m->cap) {
		m->cap = m->cap ? 2 * m->cap : 64;
		m->e = xrealloc(m->e, m->cap * sizeof(*m->e));
	}
	memset(&m->e[m->n], 0, sizeof(m->e[0]));
	return &m->e[m->n++];
}

size_t checkpoint_manifest_count(const struct checkpoint_manifest *m)
{
	return m ? m->n : 0;
}

const struct checkpoint_entry *checkpoint_manifest_entry(const struct checkpoint_manifest *m, size_t i)
{
	return m && i < m->n ? &m->e[i] : NULL;
}

static ssize_t manifest_search(const struct checkpoint_manifest *m, const char *path)
{
	size_t lo = 0, hi = m ? m->n : 0;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		int c = strcmp(m->e[mid].path, path);

		if (!c)
			return mid;
		if (c < 0)
			lo = mid + 1;
		else
			hi = mid;
	}
	return -1;
}

const struct checkpoint_entry *checkpoint_manifest_find(const struct checkpoint_manifest *m, const char *path)
{
	ssize_t i = manifest_search(m, path);

	return i < 0 ? NULL : &m->e[i];
}

const uint8_t *checkpoint_manifest_tree_hash(const struct checkpoint_manifest *m)
{
	return m->tree_hash;
}

static int64_t coarse_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME_COARSE, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static void entry_set_stat(struct checkpoint_entry *e, const struct stat *st)
{
	e->has_stat = true;
	e->dev = st->st_dev;
	e->ino = st->st_ino;
	e->mtime_ns = (int64_t)st->st_mtim.tv_sec * 1000000000 + st->st_mtim.tv_nsec;
	e->ctime_ns = (int64_t)st->st_ctim.tv_sec * 1000000000 + st->st_ctim.tv_nsec;
}

static int cmp_entry(const void *a, const void *b)
{
	return strcmp(((const struct checkpoint_entry *)a)->path, ((const struct checkpoint_entry *)b)->path);
}

static const char *type_name(int t)
{
	return t == CHECKPOINT_FILE ? "file" : t == CHECKPOINT_DIR ? "dir" : t == CHECKPOINT_SYMLINK ? "symlink" : "?";
}

/* Checks a path from untrusted input: relative, '/'-separated, no empty,
 * "." or ".." component, no NUL, within max bytes. */
static int path_check(const char *p, size_t len, uint32_t max, char *err, size_t errlen)
{
	if (!len)
		return seterr(err, errlen, "empty path"), -1;
	if (len > max)
		return seterr(err, errlen, "path is longer than %u bytes", max), -1;
	if (memchr(p, '\0', len))
		return seterr(err, errlen, "path contains a NUL byte"), -1;
	if (p[0] == '/')
		return seterr(err, errlen, "absolute path"), -1;
	for (size_t i = 0; i < len;) {
		size_t j = i;

		while (j < len && p[j] != '/')
			j++;
		if (j == i)
			return seterr(err, errlen, "empty path component"), -1;
		if (j - i > NAME_MAX)
			return seterr(err, errlen, "path component is longer than %d bytes", NAME_MAX), -1;
		if ((j - i == 1 && p[i] == '.') || (j - i == 2 && p[i] == '.' && p[i + 1] == '.'))
			return seterr(err, errlen, "path component \"%.*s\" is not allowed", (int)(j - i), p + i), -1;
		i = j + 1;
		if (j + 1 == len)
			return seterr(err, errlen, "path ends with '/'"), -1;
	}
	return 0;
}

/* Quotes an untrusted path for a message: printable ASCII, capped. */
static const char *qpath(const char *p, size_t len, char *out, size_t outlen)
{
	size_t o = 0;

	for (size_t i = 0; i < len && o + 5 < outlen; i++) {
		unsigned char c = p[i];

		if (c >= 0x20 && c < 0x7f && c != '"' && c != '\\')
			out[o++] = c;
		else
			o += snprintf(out + o, outlen - o, "\\x%02x", c);
	}
	if (o >= outlen)
		o = outlen - 1;
	out[o] = '\0';
	return out;
}

/* ---- directories beneath a root, without following symlinks ---- */

struct dircache {
	int rootfd;
	char *path;		/* parent path of fd, or NULL */
	int fd;
};

static void dircache_init(struct dircache *dc, int rootfd)
{
	dc->rootfd = rootfd;
	dc->path = NULL;
	dc->fd = -1;
}

static void dircache_drop(struct dircache *dc)
{
	if (dc->fd >= 0)
		close(dc->fd);
	free(dc->path);
	dc->path = NULL;
	dc->fd = -1;
}

/* Returns a directory fd for the parent of path (borrowed, valid until
 * the next call) and the last component in *leaf; -1 with errno on
 * failure. Every component is opened with O_NOFOLLOW | O_DIRECTORY, so a
 * symlink anywhere on the way fails (ELOOP or ENOTDIR). */
static int dircache_parent(struct dircache *dc, const char *path, const char **leaf)
{
	const char *slash = strrchr(path, '/');
	size_t plen;
	int fd = -1;

	if (!slash) {
		*leaf = path;
		return dc->rootfd;
	}
	*leaf = slash + 1;
	plen = slash - path;
	if (dc->path && strlen(dc->path) == plen && !memcmp(dc->path, path, plen))
		return dc->fd;
	dircache_drop(dc);
	char *tmp = xmalloc(plen + 1);
	memcpy(tmp, path, plen);
	tmp[plen] = '\0';
	int cur = dc->rootfd;
	for (char *c = tmp, *next; c; c = next) {
		next = strchr(c, '/');
		if (next)
			*next++ = '\0';
		fd = openat(cur, c, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
		if (cur != dc->rootfd) {
			int e = errno;

			close(cur);
			errno = e;
		}
		if (fd < 0) {
			free(tmp);
			return -1;
		}
		cur = fd;
	}
	memcpy(tmp, path, plen);
	dc->path = tmp;
	dc->fd = cur;
	return cur;
}

/* Opens path beneath rootfd like dircache_parent + openat(O_NOFOLLOW),
 * without a cache, for use from several threads. */
static int open_beneath(int rootfd, const char *path, int flags)
{
	struct dircache dc;
	const char *leaf;
	int pfd, fd;

	dircache_init(&dc, rootfd);
	pfd = dircache_parent(&dc, path, &leaf);
	fd = pfd < 0 ? -1 : openat(pfd, leaf, flags | O_NOFOLLOW | O_CLOEXEC);
	{
		int e = errno;

		dircache_drop(&dc);
		errno = e;
	}
	return fd;
}

/* Removes everything inside the directory open as fd. */
static int empty_fd(int fd, int depth, char *err, size_t errlen)
{
	DIR *d = NULL;
	struct dirent *de;
	int dfd = dup(fd), rc = -1;

	if (depth > MAX_DEPTH)
		return seterr(err, errlen, "directory tree is deeper than %d levels", MAX_DEPTH), close(dfd), -1;
	if (dfd < 0 || !(d = fdopendir(dfd))) {
		seterr(err, errlen, "could not read directory: %m");
		if (dfd >= 0)
			close(dfd);
		return -1;
	}
	while ((errno = 0, de = readdir(d))) {
		struct stat st;

		if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
			continue;
		if (fstatat(fd, de->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0) {
			seterr(err, errlen, "could not stat \"%s\": %m", de->d_name);
			goto out;
		}
		if (S_ISDIR(st.st_mode)) {
			int sub = openat(fd, de->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);

			if (sub < 0) {
				seterr(err, errlen, "could not open \"%s\": %m", de->d_name);
				goto out;
			}
			(void)fchmod(sub, 0700);
			int r = empty_fd(sub, depth + 1, err, errlen);
			close(sub);
			if (r < 0)
				goto out;
			if (unlinkat(fd, de->d_name, AT_REMOVEDIR) < 0) {
				seterr(err, errlen, "could not remove \"%s\": %m", de->d_name);
				goto out;
			}
		} else if (unlinkat(fd, de->d_name, 0) < 0) {
			seterr(err, errlen, "could not remove \"%s\": %m", de->d_name);
			goto out;
		}
	}
	if (errno) {
		seterr(err, errlen, "could not read directory: %m");
		goto out;
	}
	rc = 0;
out:
	closedir(d);
	return rc;
}

int checkpoint_empty_dir(const char *dir, char *err, size_t errlen)
{
	int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	int rc;

	if (fd < 0)
		return seterr(err, errlen, "could not open directory \"%s\": %m", dir), -1;
	rc = empty_fd(fd, 0, err, errlen);
	close(fd);
	if (rc < 0)
		preerr(err, errlen, "could not empty \"%s\"", dir);
	return rc;
}

/* ---- a small ordered job pool: chunks are processed by threads and
 * collected in submission order ---- */

struct chunk {
	uint8_t *raw;		/* record stream */
	size_t rawlen, rawcap;
	uint8_t *out;		/* capture: prefix + LZ4 frame */
	size_t outlen, outcap;
	const uint8_t *src;	/* restore: the LZ4 frame, borrowed */
	size_t srclen;
	uint8_t (*hashes)[CHECKPOINT_HASH_LEN];	/* restore: block hashes */
	LZ4F_dctx *dctx;
	size_t nhashes, hcap;
	int accel;
	bool verify;		/* restore: hash the blocks */
	/* delta capture: hash blocks [first, first + count) of entry */
	struct checkpoint_entry *entry;
	uint32_t first, count;
	size_t index;		/* of entry in the manifest */
	int rootfd;
	int rc;
	char err[200];
	bool done;
};

struct pool {
	pthread_mutex_t mu;
	pthread_cond_t work, done;
	pthread_t th[16];
	int nth;
	struct chunk **ring;
	size_t cap;
	uint64_t head, tail, next;	/* collect, submit, start */
	bool stop;
	void (*fn)(struct chunk *);
};

static void *pool_main(void *arg)
{
	struct pool *p = arg;

	pthread_mutex_lock(&p->mu);
	for (;;) {
		while (!p->stop && p->next == p->tail)
			pthread_cond_wait(&p->work, &p->mu);
		if (p->next == p->tail && p->stop)
			break;
		struct chunk *c = p->ring[p->next++ % p->cap];
		pthread_mutex_unlock(&p->mu);
		p->fn(c);
		pthread_mutex_lock(&p->mu);
		c->done = true;
		pthread_cond_broadcast(&p->done);
	}
	pthread_mutex_unlock(&p->mu);
	return NULL;
}

/* nth threads (0: run jobs inline at submit); at most cap jobs in flight. */
static void pool_init(struct pool *p, int nth, size_t cap, void (*fn)(struct chunk *))
{
	memset(p, 0, sizeof(*p));
	pthread_mutex_init(&p->mu, NULL);
	pthread_cond_init(&p->work, NULL);
	pthread_cond_init(&p->done, NULL);
	p->fn = fn;
	p->cap = cap;
	p->ring = xcalloc(cap, sizeof(*p->ring));
	for (int i = 0; i < nth && i < 16; i++) {
		if (pthread_create(&p->th[i], NULL, pool_main, p))
			break;
		p->nth++;
	}
}

static size_t pool_inflight(struct pool *p)
{
	return p->tail - p->head;
}

static void pool_submit(struct pool *p, struct chunk *c)
{
	c->done = false;
	if (!p->nth) {
		p->ring[p->tail++ % p->cap] = c;
		p->next++;
		p->fn(c);
		c->done = true;
		return;
	}
	pthread_mutex_lock(&p->mu);
	p->ring[p->tail++ % p->cap] = c;
	pthread_cond_signal(&p->work);
	pthread_mutex_unlock(&p->mu);
}

/* Waits for and returns the oldest job, or NULL when none is in flight. */
static struct chunk *pool_collect(struct pool *p)
{
	struct chunk *c;

	if (p->head == p->tail)
		return NULL;
	c = p->ring[p->head % p->cap];
	if (p->nth) {
		pthread_mutex_lock(&p->mu);
		while (!c->done)
			pthread_cond_wait(&p->done, &p->mu);
		pthread_mutex_unlock(&p->mu);
	}
	p->head++;
	return c;
}

static void pool_release(struct pool *p)
{
	pthread_mutex_lock(&p->mu);
	p->stop = true;
	pthread_cond_broadcast(&p->work);
	pthread_mutex_unlock(&p->mu);
	for (int i = 0; i < p->nth; i++)
		pthread_join(p->th[i], NULL);
	pthread_mutex_destroy(&p->mu);
	pthread_cond_destroy(&p->work);
	pthread_cond_destroy(&p->done);
	free(p->ring);
}

static void chunk_free(struct chunk *c)
{
	if (!c)
		return;
	free(c->raw);
	free(c->out);
	free(c->hashes);
	if (c->dctx)
		LZ4F_freeDecompressionContext(c->dctx);
	free(c);
}

/* ---- capture ---- */

static void compress_job(struct chunk *c)
{
	LZ4F_preferences_t prefs;
	size_t bound, r;

	memset(&prefs, 0, sizeof(prefs));
	prefs.frameInfo.blockSizeID = LZ4F_max4MB;
	prefs.frameInfo.blockMode = LZ4F_blockIndependent;
	prefs.frameInfo.contentChecksumFlag = LZ4F_contentChecksumEnabled;
	prefs.frameInfo.blockChecksumFlag = LZ4F_blockChecksumEnabled;
	prefs.frameInfo.contentSize = c->rawlen;
	prefs.compressionLevel = c->accel > 1 ? -c->accel : 0;
	bound = LZ4F_compressFrameBound(c->rawlen, &prefs) + FRAME_PREFIX;
	if (c->outcap < bound) {
		free(c->out);
		c->out = xmalloc(bound);
		c->outcap = bound;
	}
	r = LZ4F_compressFrame(c->out + FRAME_PREFIX, c->outcap - FRAME_PREFIX, c->raw, c->rawlen, &prefs);
	if (LZ4F_isError(r)) {
		c->rc = -1;
		snprintf(c->err, sizeof(c->err), "lz4 compression failed: %s", LZ4F_getErrorName(r));
		return;
	}
	put32(c->out, r);
	put32(c->out + 4, c->rawlen);
	c->outlen = r + FRAME_PREFIX;
	c->rc = 0;
}

struct capture {
	struct checkpoint_options opt;
	int rootfd;
	struct dircache dc;
	const struct checkpoint_manifest *base;
	struct checkpoint_manifest *m;
	struct checkpoint_result *res;
	struct pool pool;
	bool pool_live;
	struct chunk *cur;	/* being filled */
	struct chunk **spare;
	size_t nspare;
	struct buf blob;
	uint32_t nframes;
	uint64_t raw_size;
	int64_t stamp;
	char *err;
	size_t errlen;
};

/* Appends a compressed chunk to the blob, within max_blob_size. */
static int cap_take_output(struct capture *cp, struct chunk *c)
{
	cp->spare[cp->nspare++] = c;
	if (cp->blob.len + c->outlen > cp->opt.max_blob_size) {
		seterr(cp->err, cp->errlen, "the checkpoint would be larger than %llu bytes",
		       (unsigned long long)cp->opt.max_blob_size);
		return -1;
	}
	buf_add(&cp->blob, c->out, c->outlen);
	cp->raw_size += c->rawlen;
	cp->nframes++;
	return 0;
}

/* Hands the filled chunk to the compressors; collects finished ones. */
static int cap_flush(struct capture *cp)
{
	struct chunk *c = cp->cur;

	if (!c || !c->rawlen)
		return 0;
	cp->cur = NULL;
	c->accel = cp->opt.acceleration;
	pool_submit(&cp->pool, c);
	while (pool_inflight(&cp->pool) >= cp->pool.cap - 1 || (!cp->pool.nth && pool_inflight(&cp->pool))) {
		struct chunk *d = pool_collect(&cp->pool);

		if (d->rc) {
			seterr(cp->err, cp->errlen, "%s", d->err);
			cp->spare[cp->nspare++] = d;
			return -1;
		}
		if (cap_take_output(cp, d) < 0)
			return -1;
	}
	return 0;
}

/* Collects every chunk still being compressed, in order. */
static int cap_drain(struct capture *cp)
{
	struct chunk *d;
	int rc = 0;

	while ((d = pool_collect(&cp->pool))) {
		if (d->rc && !rc) {
			seterr(cp->err, cp->errlen, "%s", d->err);
			rc = -1;
		}
		if (d->rc || rc)
			cp->spare[cp->nspare++] = d;
		else if (cap_take_output(cp, d) < 0)
			rc = -1;
	}
	return rc;
}

/* Returns room for need bytes in the current chunk (flushing it first if
 * it is too full), or NULL on error. */
static uint8_t *cap_room(struct capture *cp, size_t need)
{
	if (cp->cur && cp->cur->rawcap - cp->cur->rawlen < need && cap_flush(cp) < 0)
		return NULL;
	if (!cp->cur) {
		struct chunk *c = cp->nspare ? cp->spare[--cp->nspare] : xcalloc(1, sizeof(*c));

		if (!c->raw) {
			c->raw = xmalloc(CHUNK_CAP);
			c->rawcap = CHUNK_CAP;
		}
		c->rawlen = 0;
		c->rc = 0;
		cp->cur = c;
	}
	return cp->cur->raw + cp->cur->rawlen;
}

static size_t put_entry(uint8_t *p, const struct checkpoint_entry *e, uint8_t flags)
{
	size_t plen = strlen(e->path), tlen = e->target ? strlen(e->target) : 0;

	p[0] = REC_ENTRY;
	p[1] = e->type;
	p[2] = flags;
	p[3] = 0;
	put32(p + 4, e->mode);
	put64(p + 8, e->size);
	put32(p + 16, plen);
	put32(p + 20, tlen);
	memcpy(p + ENTRY_HDR, e->path, plen);
	if (tlen)
		memcpy(p + ENTRY_HDR + plen, e->target, tlen);
	return ENTRY_HDR + plen + tlen;
}

static size_t entry_len(const struct checkpoint_entry *e)
{
	return ENTRY_HDR + strlen(e->path) + (e->target ? strlen(e->target) : 0);
}

static void note_path(json_t *list, const char *path)
{
	if (json_array_size(list) < LIST_CAP)
		json_array_append_new(list, json_string(path));
}

static int cap_emit_entry(struct capture *cp, const struct checkpoint_entry *e, uint8_t flags)
{
	uint8_t *p = cap_room(cp, entry_len(e));

	if (!p)
		return -1;
	cp->cur->rawlen += put_entry(p, e, flags);
	cp->res->changed++;
	note_path(cp->res->changed_paths, e->path);
	return 0;
}

static int cap_emit_file_end(struct capture *cp, const uint8_t *hash)
{
	uint8_t *p = cap_room(cp, FILE_END_LEN);

	if (!p)
		return -1;
	memset(p, 0, FILE_END_LEN);
	p[0] = REC_FILE_END;
	memcpy(p + 4, hash, CHECKPOINT_HASH_LEN);
	cp->cur->rawlen += FILE_END_LEN;
	return 0;
}

static int cap_emit_delete(struct capture *cp, const struct checkpoint_entry *e)
{
	size_t plen = strlen(e->path);
	uint8_t *p = cap_room(cp, DELETE_HDR + plen);

	if (!p)
		return -1;
	memset(p, 0, DELETE_HDR);
	p[0] = REC_DELETE;
	put32(p + 4, plen);
	memcpy(p + DELETE_HDR, e->path, plen);
	cp->cur->rawlen += DELETE_HDR + plen;
	cp->res->deleted++;
	note_path(cp->res->deleted_paths, e->path);
	return 0;
}

static int read_full(int fd, uint8_t *p, size_t len)
{
	while (len) {
		ssize_t r = read(fd, p, len);

		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0)
			return -1;
		if (r == 0) {
			errno = ENODATA;
			return -1;
		}
		p += r;
		len -= r;
	}
	return 0;
}

/* Whether b's stat hint says e's content is unchanged since b was read. */
static bool hint_unchanged(const struct capture *cp, const struct checkpoint_entry *e, const struct checkpoint_entry *b)
{
	return !cp->opt.rehash && b->has_stat && e->has_stat && b->blocks &&
	       b->dev == e->dev && b->ino == e->ino && b->size == e->size &&
	       b->mtime_ns == e->mtime_ns && b->ctime_ns == e->ctime_ns &&
	       b->ctime_ns < cp->base->stamp_ns && b->mtime_ns < cp->base->stamp_ns;
}

/* Reads a file, hashes its blocks and emits the ones that differ from b
 * (all of them when b is NULL or has no block hashes). The entry record
 * goes out just before the first block sent, or at the end when only the
 * size or mode changed. */
static int cap_file(struct capture *cp, struct checkpoint_entry *e, const struct checkpoint_entry *b)
{
	const char *leaf;
	struct stat st;
	int pfd, fd = -1, rc = -1;
	bool emitted = false, cmp = b && b->blocks;
	uint8_t flags = b ? ENTRY_PATCH : 0;

	if (b && hint_unchanged(cp, e, b)) {
		memcpy(e->hash, b->hash, CHECKPOINT_HASH_LEN);
		e->nblocks = b->nblocks;
		e->blocks = xmalloc((size_t)b->nblocks * CHECKPOINT_HASH_LEN + 1);
		memcpy(e->blocks, b->blocks, (size_t)b->nblocks * CHECKPOINT_HASH_LEN);
		if (e->mode != b->mode) {
			if (cap_emit_entry(cp, e, flags) < 0 || cap_emit_file_end(cp, e->hash) < 0)
				return -1;
		}
		return 0;
	}
	pfd = dircache_parent(&cp->dc, e->path, &leaf);
	if (pfd < 0 || (fd = openat(pfd, leaf, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC)) < 0) {
		seterr(cp->err, cp->errlen, "could not open \"%s\": %m", e->path);
		goto out;
	}
	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
		seterr(cp->err, cp->errlen, "\"%s\" changed while being checkpointed", e->path);
		goto out;
	}
	e->size = st.st_size;
	e->mode = st.st_mode & 0777;
	entry_set_stat(e, &st);
	if (e->size > cp->opt.max_total_size) {
		seterr(cp->err, cp->errlen, "\"%s\" is larger than the size limit", e->path);
		goto out;
	}
	e->nblocks = (e->size + CHECKPOINT_BLOCK_SIZE - 1) / CHECKPOINT_BLOCK_SIZE;
	e->blocks = xmalloc((size_t)e->nblocks * CHECKPOINT_HASH_LEN + 1);
	if (b && !b->blocks) {
		/* a base without block hashes: compare whole contents first */
		uint8_t *tmp = xmalloc(CHECKPOINT_BLOCK_SIZE);

		for (uint32_t i = 0; i < e->nblocks; i++) {
			size_t len = i + 1 < e->nblocks ? CHECKPOINT_BLOCK_SIZE : e->size - (uint64_t)i * CHECKPOINT_BLOCK_SIZE;

			if (read_full(fd, tmp, len) < 0) {
				seterr(cp->err, cp->errlen, "could not read \"%s\": %m", e->path);
				free(tmp);
				goto out;
			}
			sha256(tmp, len, e->blocks[i]);
		}
		free(tmp);
		cp->res->hashed_bytes += e->size;
		file_hash(e->size, (const uint8_t (*)[CHECKPOINT_HASH_LEN])e->blocks, e->nblocks, e->hash);
		if (!memcmp(e->hash, b->hash, CHECKPOINT_HASH_LEN) && e->size == b->size) {
			if (e->mode != b->mode &&
			    (cap_emit_entry(cp, e, ENTRY_PATCH) < 0 || cap_emit_file_end(cp, e->hash) < 0))
				goto out;
			rc = 0;
			goto out;
		}
		if (lseek(fd, 0, SEEK_SET) < 0) {
			seterr(cp->err, cp->errlen, "could not rewind \"%s\": %m", e->path);
			goto out;
		}
		flags = 0;	/* rewrite it whole */
	}
	for (uint32_t i = 0; i < e->nblocks; i++) {
		size_t len = i + 1 < e->nblocks ? CHECKPOINT_BLOCK_SIZE : e->size - (uint64_t)i * CHECKPOINT_BLOCK_SIZE;
		size_t elen = emitted ? 0 : entry_len(e);
		uint8_t *p = cap_room(cp, elen + BLOCK_HDR + len), *q;

		if (!p)
			goto out;
		q = p;
		if (!emitted)
			q += put_entry(q, e, flags);
		q[0] = REC_BLOCK;
		q[1] = q[2] = q[3] = 0;
		put32(q + 4, i);
		put32(q + 8, len);
		if (read_full(fd, q + BLOCK_HDR, len) < 0) {
			if (errno == ENODATA)
				seterr(cp->err, cp->errlen, "\"%s\" shrank while being checkpointed", e->path);
			else
				seterr(cp->err, cp->errlen, "could not read \"%s\": %m", e->path);
			goto out;
		}
		sha256(q + BLOCK_HDR, len, e->blocks[i]);
		memcpy(q + 12, e->blocks[i], CHECKPOINT_HASH_LEN);
		cp->res->hashed_bytes += len;
		if (!cmp || i >= b->nblocks || memcmp(b->blocks[i], e->blocks[i], CHECKPOINT_HASH_LEN)) {
			if (!emitted) {
				cp->res->changed++;
				note_path(cp->res->changed_paths, e->path);
			}
			emitted = true;
			cp->cur->rawlen += (q - p) + BLOCK_HDR + len;
			cp->res->data_bytes += len;
		}
	}
	file_hash(e->size, (const uint8_t (*)[CHECKPOINT_HASH_LEN])e->blocks, e->nblocks, e->hash);
	if (!emitted && (!b || b->size != e->size || b->mode != e->mode ||
			 memcmp(b->hash, e->hash, CHECKPOINT_HASH_LEN))) {
		if (cap_emit_entry(cp, e, flags) < 0)
			goto out;
		emitted = true;
	}
	if (emitted && cap_emit_file_end(cp, e->hash) < 0)
		goto out;
	rc = 0;
out:
	if (fd >= 0)
		close(fd);
	return rc;
}

static bool same_stat(const struct checkpoint_entry *e, const struct stat *st)
{
	return e->has_stat && e->dev == (uint64_t)st->st_dev && e->ino == (uint64_t)st->st_ino &&
	       e->size == (uint64_t)st->st_size &&
	       e->mtime_ns == (int64_t)st->st_mtim.tv_sec * 1000000000 + st->st_mtim.tv_nsec &&
	       e->ctime_ns == (int64_t)st->st_ctim.tv_sec * 1000000000 + st->st_ctim.tv_nsec;
}

/* Hashes a range of blocks of a file, on a pool thread. */
static void hash_job(struct chunk *c)
{
	struct checkpoint_entry *e = c->entry;
	struct stat st;
	int fd = open_beneath(c->rootfd, e->path, O_RDONLY | O_NONBLOCK);

	c->rc = -1;
	if (fd < 0 || fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) || !same_stat(e, &st))
		goto out;
	if (c->rawcap < CHECKPOINT_BLOCK_SIZE) {
		free(c->raw);
		c->raw = xmalloc(CHECKPOINT_BLOCK_SIZE);
		c->rawcap = CHECKPOINT_BLOCK_SIZE;
	}
	for (uint32_t i = c->first; i < c->first + c->count; i++) {
		size_t len = old_block_len(e->size, i), got = 0;

		while (got < len) {
			ssize_t r = pread(fd, c->raw + got, len - got, (off_t)i * CHECKPOINT_BLOCK_SIZE + got);

			if (r < 0 && errno == EINTR)
				continue;
			if (r <= 0)
				goto out;
			got += r;
		}
		sha256(c->raw, len, e->blocks[i]);
	}
	c->rc = 0;
out:
	if (fd >= 0)
		close(fd);
}

/* For a delta: hashes, on the pool threads, every file whose stat hint
 * does not vouch for it. Sets e->blocks and e->hash and marks the entry
 * prehashed (has_stat stays from the walk); a file that changed since the
 * walk is left for cap_file to read on its own. */
static void cap_prehash(struct capture *cp, uint8_t *prehashed)
{
	struct pool pool;
	int nth = cp->opt.threads > 1 ? cp->opt.threads : 0;
	size_t cap = nth ? 2 * (size_t)nth + 1 : 1, nch = cap, bi = 0, k = 0;
	struct chunk **ch = xcalloc(nch, sizeof(*ch));
	struct { size_t entry; uint32_t first, count; } *jobs = NULL;
	size_t njobs = 0, jcap = 0, next = 0;
	uint8_t *failed = xcalloc(cp->m->n + 1, 1);

	for (size_t j = 0; j < cp->m->n; j++) {
		struct checkpoint_entry *e = &cp->m->e[j];
		const struct checkpoint_entry *b;

		if (e->type != CHECKPOINT_FILE)
			continue;
		while (bi < cp->base->n && strcmp(cp->base->e[bi].path, e->path) < 0)
			bi++;
		if (bi >= cp->base->n || strcmp(cp->base->e[bi].path, e->path))
			continue;
		b = &cp->base->e[bi];
		if (b->type != CHECKPOINT_FILE || !b->blocks || hint_unchanged(cp, e, b) || e->size > cp->opt.max_total_size)
			continue;
		e->nblocks = (e->size + CHECKPOINT_BLOCK_SIZE - 1) / CHECKPOINT_BLOCK_SIZE;
		e->blocks = xmalloc((size_t)e->nblocks * CHECKPOINT_HASH_LEN + 1);
		prehashed[j] = 1;
		for (uint32_t f = 0; f < e->nblocks; f += 64) {
			if (njobs == jcap) {
				jcap = jcap ? 2 * jcap : 64;
				jobs = xrealloc(jobs, jcap * sizeof(*jobs));
			}
			jobs[njobs].entry = j;
			jobs[njobs].first = f;
			jobs[njobs].count = e->nblocks - f < 64 ? e->nblocks - f : 64;
			njobs++;
		}
	}
	pool_init(&pool, nth, cap + 1, hash_job);
	for (size_t i = 0; i < nch; i++)
		ch[i] = xcalloc(1, sizeof(struct chunk));
	for (k = 0; k < njobs; k++) {
		struct chunk *c;

		while (next < njobs && pool_inflight(&pool) < nch) {
			c = ch[next % nch];
			c->entry = &cp->m->e[jobs[next].entry];
			c->first = jobs[next].first;
			c->count = jobs[next].count;
			c->rootfd = cp->rootfd;
			c->index = jobs[next].entry;
			pool_submit(&pool, c);
			next++;
		}
		c = pool_collect(&pool);
		if (c->rc)
			failed[c->index] = 1;
		else
			cp->res->hashed_bytes += (uint64_t)c->count * CHECKPOINT_BLOCK_SIZE;
	}
	pool_release(&pool);
	for (size_t j = 0; j < cp->m->n; j++) {
		struct checkpoint_entry *e = &cp->m->e[j];

		if (!prehashed[j])
			continue;
		if (failed[j]) {
			prehashed[j] = 0;
			free(e->blocks);
			e->blocks = NULL;
			continue;
		}
		file_hash(e->size, (const uint8_t (*)[CHECKPOINT_HASH_LEN])e->blocks, e->nblocks, e->hash);
	}
	for (size_t i = 0; i < nch; i++)
		chunk_free(ch[i]);
	free(ch);
	free(jobs);
	free(failed);
}

/* Emits the blocks of a prehashed file that differ from b, reading only
 * those; each block read is hashed again, so what is sent is exact. */
static int cap_file_prehashed(struct capture *cp, struct checkpoint_entry *e, const struct checkpoint_entry *b)
{
	const char *leaf;
	struct stat st;
	int pfd, fd = -1, rc = -1;
	bool emitted = false;

	pfd = dircache_parent(&cp->dc, e->path, &leaf);
	if (pfd < 0 || (fd = openat(pfd, leaf, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC)) < 0) {
		seterr(cp->err, cp->errlen, "could not open \"%s\": %m", e->path);
		goto out;
	}
	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) || !same_stat(e, &st)) {
		seterr(cp->err, cp->errlen, "\"%s\" changed while being checkpointed", e->path);
		goto out;
	}
	e->mode = st.st_mode & 0777;
	for (uint32_t i = 0; i < e->nblocks; i++) {
		size_t len = old_block_len(e->size, i), elen, got = 0;
		uint8_t *p, *q, h[CHECKPOINT_HASH_LEN];

		if (i < b->nblocks && !memcmp(b->blocks[i], e->blocks[i], CHECKPOINT_HASH_LEN))
			continue;
		elen = emitted ? 0 : entry_len(e);
		if (!(p = cap_room(cp, elen + BLOCK_HDR + len)))
			goto out;
		q = p;
		if (!emitted)
			q += put_entry(q, e, ENTRY_PATCH);
		q[0] = REC_BLOCK;
		q[1] = q[2] = q[3] = 0;
		put32(q + 4, i);
		put32(q + 8, len);
		memcpy(q + 12, e->blocks[i], CHECKPOINT_HASH_LEN);
		while (got < len) {
			ssize_t r = pread(fd, q + BLOCK_HDR + got, len - got, (off_t)i * CHECKPOINT_BLOCK_SIZE + got);

			if (r < 0 && errno == EINTR)
				continue;
			if (r <= 0) {
				seterr(cp->err, cp->errlen, "could not read \"%s\": %s", e->path,
				       r < 0 ? strerror(errno) : "file shrank");
				goto out;
			}
			got += r;
		}
		sha256(q + BLOCK_HDR, len, h);
		if (memcmp(h, e->blocks[i], CHECKPOINT_HASH_LEN)) {
			seterr(cp->err, cp->errlen, "\"%s\" changed while being checkpointed", e->path);
			goto out;
		}
		if (!emitted) {
			cp->res->changed++;
			note_path(cp->res->changed_paths, e->path);
		}
		emitted = true;
		cp->cur->rawlen += (q - p) + BLOCK_HDR + len;
		cp->res->data_bytes += len;
	}
	if (!emitted && (b->size != e->size || b->mode != e->mode || memcmp(b->hash, e->hash, CHECKPOINT_HASH_LEN))) {
		if (cap_emit_entry(cp, e, ENTRY_PATCH) < 0)
			goto out;
		emitted = true;
	}
	if (emitted && cap_emit_file_end(cp, e->hash) < 0)
		goto out;
	rc = 0;
out:
	if (fd >= 0)
		close(fd);
	return rc;
}

/* Collects the entries under dirfd into cp->m, unsorted. */
static int cap_walk(struct capture *cp, int dirfd, const char *prefix, int depth)
{
	DIR *d = NULL;
	struct dirent *de;
	int dfd = -1, rc = -1;
	char *path = NULL;

	if (depth > MAX_DEPTH) {
		seterr(cp->err, cp->errlen, "\"%s\" is nested deeper than %d levels", prefix, MAX_DEPTH);
		return -1;
	}
	if ((dfd = dup(dirfd)) < 0 || !(d = fdopendir(dfd))) {
		seterr(cp->err, cp->errlen, "could not read directory \"%s\": %m", *prefix ? prefix : ".");
		if (dfd >= 0)
			close(dfd);
		return -1;
	}
	while ((errno = 0, de = readdir(d))) {
		struct stat st;
		struct checkpoint_entry *e;
		size_t plen;

		if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
			continue;
		free(path);
		path = *prefix ? xmalloc(strlen(prefix) + strlen(de->d_name) + 2) : xstrdup(de->d_name);
		if (*prefix)
			sprintf(path, "%s/%s", prefix, de->d_name);
		plen = strlen(path);
		if (fstatat(dirfd, de->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0) {
			seterr(cp->err, cp->errlen, "could not stat \"%s\": %m", path);
			goto out;
		}
		if (!S_ISREG(st.st_mode) && !S_ISDIR(st.st_mode) && !S_ISLNK(st.st_mode)) {
			cp->res->skipped++;
			continue;
		}
		if (plen > cp->opt.max_path) {
			seterr(cp->err, cp->errlen, "path \"%.64s...\" is longer than %u bytes", path, cp->opt.max_path);
			goto out;
		}
		if (cp->m->n >= cp->opt.max_entries) {
			seterr(cp->err, cp->errlen, "the tree has more than %llu entries",
			       (unsigned long long)cp->opt.max_entries);
			goto out;
		}
		e = manifest_push(cp->m);
		e->path = path;
		path = NULL;
		e->mode = st.st_mode & 0777;
		entry_set_stat(e, &st);
		if (S_ISREG(st.st_mode)) {
			e->type = CHECKPOINT_FILE;
			e->size = st.st_size;
		} else if (S_ISLNK(st.st_mode)) {
			char *t = xmalloc(cp->opt.max_path + 2);
			ssize_t n = readlinkat(dirfd, de->d_name, t, cp->opt.max_path + 1);

			e->type = CHECKPOINT_SYMLINK;
			e->mode = 0777;
			if (n < 0 || n > cp->opt.max_path || n == 0) {
				if (n < 0)
					seterr(cp->err, cp->errlen, "could not read link \"%s\": %m", e->path);
				else
					seterr(cp->err, cp->errlen, "link \"%s\" has a target longer than %u bytes",
					       e->path, cp->opt.max_path);
				free(t);
				goto out;
			}
			t[n] = '\0';
			e->target = t;
			e->size = n;
			sha256(t, n, e->hash);
		} else {
			int sub;

			e->type = CHECKPOINT_DIR;
			sub = openat(dirfd, de->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
			if (sub < 0) {
				seterr(cp->err, cp->errlen, "could not open directory \"%s\": %m", e->path);
				goto out;
			}
			char *sp = xstrdup(e->path);	/* e may move as the manifest grows */
			int r = cap_walk(cp, sub, sp, depth + 1);
			free(sp);
			close(sub);
			if (r < 0)
				goto out;
		}
	}
	if (errno) {
		seterr(cp->err, cp->errlen, "could not read directory \"%s\": %m", *prefix ? prefix : ".");
		goto out;
	}
	rc = 0;
out:
	free(path);
	closedir(d);
	return rc;
}

void checkpoint_result_release(struct checkpoint_result *r)
{
	if (!r)
		return;
	free(r->blob);
	checkpoint_manifest_free(r->manifest);
	json_decref(r->changed_paths);
	json_decref(r->deleted_paths);
	memset(r, 0, sizeof(*r));
}

/* Fills the blob header, check included. */
static void put_header(uint8_t *h, bool delta, uint64_t raw, uint32_t nframes, uint32_t entries,
		       const uint8_t *tree, const uint8_t *base)
{
	uint8_t check[CHECKPOINT_HASH_LEN];

	memset(h, 0, HDR_LEN);
	memcpy(h, HDR_MAGIC, 8);
	put16(h + 8, HDR_VERSION);
	put16(h + 10, delta ? HDR_DELTA : 0);
	put32(h + 12, CHECKPOINT_BLOCK_SIZE);
	put64(h + 16, raw);
	put32(h + 24, nframes);
	put32(h + 28, entries);
	memcpy(h + 32, tree, CHECKPOINT_HASH_LEN);
	memcpy(h + 64, base, CHECKPOINT_HASH_LEN);
	sha256(h, 96, check);
	memcpy(h + 96, check, 4);
}

/* Walks the tree, sorts it, then emits deletions (deepest first) and the
 * new or changed entries in path order into compressed chunks. */
int checkpoint_capture(const char *dir, const struct checkpoint_manifest *base,
		       const struct checkpoint_options *opt, struct checkpoint_result *out,
		       char *err, size_t errlen)
{
	struct capture cp;
	struct checkpoint_result *res = out;
	uint8_t *prehashed = NULL;
	size_t bi = 0;
	int rc = -1;

	memset(&cp, 0, sizeof(cp));
	memset(out, 0, sizeof(*out));
	options_resolve(opt, &cp.opt);
	cp.err = err;
	cp.errlen = errlen;
	cp.base = base;
	cp.res = res;
	cp.rootfd = -1;
	buf_init(&cp.blob);
	res->changed_paths = json_array();
	res->deleted_paths = json_array();
	cp.m = manifest_new();
	cp.stamp = coarse_now_ns();
	cp.m->stamp_ns = cp.stamp;
	dircache_init(&cp.dc, -1);

	cp.rootfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (cp.rootfd < 0) {
		seterr(err, errlen, "could not open workspace \"%s\": %m", dir);
		goto out;
	}
	dircache_init(&cp.dc, cp.rootfd);
	if (cap_walk(&cp, cp.rootfd, "", 0) < 0)
		goto out;
	if (cp.m->n)
		qsort(cp.m->e, cp.m->n, sizeof(*cp.m->e), cmp_entry);

	/* room for the header, filled in at the end */
	{
		uint8_t hdr[HDR_LEN] = { 0 };

		buf_add(&cp.blob, hdr, HDR_LEN);
	}
	{
		int nth = cp.opt.threads > 1 ? cp.opt.threads : 0;
		size_t cap = nth ? 2 * (size_t)nth + 1 : 2;

		pool_init(&cp.pool, nth, cap, compress_job);
		cp.pool_live = true;
		cp.spare = xcalloc(cap + 1, sizeof(*cp.spare));
	}

	if (base) {
		/* deletions (and type changes), deepest first */
		size_t ndel = 0, *del = xmalloc((base->n + 1) * sizeof(*del));
		size_t i = 0, j = 0;

		while (i < base->n) {
			int c = j < cp.m->n ? strcmp(base->e[i].path, cp.m->e[j].path) : -1;

			if (c < 0 || (c == 0 && base->e[i].type != cp.m->e[j].type))
				del[ndel++] = i;
			if (c <= 0)
				i++;
			if (c >= 0)
				j++;
		}
		while (ndel--) {
			if (cap_emit_delete(&cp, &base->e[del[ndel]]) < 0) {
				free(del);
				goto out;
			}
		}
		free(del);
	}
	prehashed = xcalloc(cp.m->n + 1, 1);
	if (base)
		cap_prehash(&cp, prehashed);
	for (size_t j = 0; j < cp.m->n; j++) {
		struct checkpoint_entry *e = &cp.m->e[j];
		const struct checkpoint_entry *b = NULL;

		if (base) {
			while (bi < base->n && strcmp(base->e[bi].path, e->path) < 0)
				bi++;
			if (bi < base->n && !strcmp(base->e[bi].path, e->path) && base->e[bi].type == e->type)
				b = &base->e[bi];
		}
		switch (e->type) {
		case CHECKPOINT_DIR:
			if ((!b || b->mode != e->mode) && cap_emit_entry(&cp, e, 0) < 0)
				goto out;
			break;
		case CHECKPOINT_SYMLINK:
			if ((!b || strcmp(b->target ? b->target : "", e->target)) && cap_emit_entry(&cp, e, 0) < 0)
				goto out;
			break;
		case CHECKPOINT_FILE:
			if (prehashed[j] ? cap_file_prehashed(&cp, e, b) < 0 : cap_file(&cp, e, b) < 0)
				goto out;
			res->tree_bytes += e->size;
			if (res->tree_bytes > cp.opt.max_total_size) {
				seterr(err, errlen, "the tree is larger than %llu bytes",
				       (unsigned long long)cp.opt.max_total_size);
				goto out;
			}
			break;
		}
	}
	tree_hash(cp.m->e, cp.m->n, cp.m->tree_hash);
	{
		uint8_t *p = cap_room(&cp, END_LEN);

		if (!p)
			goto out;
		memset(p, 0, END_LEN);
		p[0] = REC_END;
		put32(p + 4, cp.m->n);
		memcpy(p + 8, cp.m->tree_hash, CHECKPOINT_HASH_LEN);
		cp.cur->rawlen += END_LEN;
	}
	if (cap_flush(&cp) < 0 || cap_drain(&cp) < 0)
		goto out;
	put_header((uint8_t *)cp.blob.data, base != NULL, cp.raw_size, cp.nframes, cp.m->n,
		   cp.m->tree_hash, base ? base->tree_hash : zero_hash);

	res->full = !base;
	res->raw_size = cp.raw_size;
	res->stored_size = cp.blob.len;
	res->blob = (uint8_t *)buf_detach(&cp.blob);
	memcpy(res->tree_hash, cp.m->tree_hash, CHECKPOINT_HASH_LEN);
	memcpy(res->base_hash, base ? base->tree_hash : zero_hash, CHECKPOINT_HASH_LEN);
	res->entries = cp.m->n;
	res->manifest = cp.m;
	cp.m = NULL;
	rc = 0;
out:
	if (cp.pool_live) {
		if (rc < 0)
			(void)cap_drain(&cp);
		pool_release(&cp.pool);
	}
	if (cp.cur)
		chunk_free(cp.cur);
	for (size_t i = 0; i < cp.nspare; i++)
		chunk_free(cp.spare[i]);
	free(cp.spare);
	dircache_drop(&cp.dc);
	if (cp.rootfd >= 0)
		close(cp.rootfd);
	checkpoint_manifest_free(cp.m);
	buf_release(&cp.blob);
	free(prehashed);
	if (rc < 0)
		checkpoint_result_release(res);
	return rc;
}

/* ---- blob parsing ---- */

int checkpoint_blob_info(const uint8_t *data, size_t len, struct checkpoint_info *info,
			 char *err, size_t errlen)
{
	uint8_t check[CHECKPOINT_HASH_LEN];
	uint16_t flags;

	memset(info, 0, sizeof(*info));
	if (!data || len < HDR_LEN)
		return seterr(err, errlen, "truncated: %zu bytes is shorter than the header", len), -1;
	if (memcmp(data, HDR_MAGIC, 8))
		return seterr(err, errlen, "not a checkpoint blob (bad magic)"), -1;
	sha256(data, 96, check);
	if (memcmp(check, data + 96, 4) || get32(data + 100))
		return seterr(err, errlen, "header checksum mismatch"), -1;
	if (get16(data + 8) != HDR_VERSION)
		return seterr(err, errlen, "unsupported version %u", get16(data + 8)), -1;
	flags = get16(data + 10);
	if (flags & ~HDR_DELTA)
		return seterr(err, errlen, "unknown flags 0x%x", flags), -1;
	if (get32(data + 12) != CHECKPOINT_BLOCK_SIZE)
		return seterr(err, errlen, "unsupported block size %u", get32(data + 12)), -1;
	info->full = !(flags & HDR_DELTA);
	info->raw_size = get64(data + 16);
	info->nframes = get32(data + 24);
	info->entries = get32(data + 28);
	memcpy(info->tree_hash, data + 32, CHECKPOINT_HASH_LEN);
	memcpy(info->base_hash, data + 64, CHECKPOINT_HASH_LEN);
	if (info->full && memcmp(info->base_hash, zero_hash, CHECKPOINT_HASH_LEN))
		return seterr(err, errlen, "a full checkpoint with a base hash"), -1;
	if (!info->nframes)
		return seterr(err, errlen, "no frames"), -1;
	return 0;
}

/* Splits a blob into frames after checking the header and lengths. */
static int blob_frames(const uint8_t *data, size_t len, struct checkpoint_info *info,
		       const uint8_t ***frames, char *err, size_t errlen)
{
	size_t off = HDR_LEN;
	uint64_t raw = 0;
	const uint8_t **f = NULL;

	if (checkpoint_blob_info(data, len, info, err, errlen) < 0)
		return -1;
	if (info->nframes > (len - HDR_LEN) / (FRAME_PREFIX + 7))
		return seterr(err, errlen, "truncated: %u frames cannot fit in %zu bytes", info->nframes, len), -1;
	f = xmalloc(info->nframes * sizeof(*f));
	for (uint32_t i = 0; i < info->nframes; i++) {
		uint32_t stored, rawlen;

		if (len - off < FRAME_PREFIX) {
			seterr(err, errlen, "truncated: frame %u of %u is missing", i + 1, info->nframes);
			goto fail;
		}
		stored = get32(data + off);
		rawlen = get32(data + off + 4);
		if (rawlen == 0 || rawlen > CHUNK_CAP) {
			seterr(err, errlen, "frame %u: bad raw length %u", i + 1, rawlen);
			goto fail;
		}
		if (stored > len - off - FRAME_PREFIX) {
			seterr(err, errlen, "truncated: frame %u of %u extends past the end of the blob", i + 1, info->nframes);
			goto fail;
		}
		f[i] = data + off;
		off += FRAME_PREFIX + (size_t)stored;
		raw += rawlen;
	}
	if (off != len) {
		seterr(err, errlen, "%zu unexpected bytes after the last frame", len - off);
		goto fail;
	}
	if (raw != info->raw_size) {
		seterr(err, errlen, "frames hold %llu bytes, the header says %llu",
		       (unsigned long long)raw, (unsigned long long)info->raw_size);
		goto fail;
	}
	*frames = f;
	return 0;
fail:
	free(f);
	return -1;
}

/* Length of the record at p (at most len bytes), 0 if it is malformed
 * or incomplete. Does not judge the contents. */
static size_t rec_len(const uint8_t *p, size_t len)
{
	uint64_t n;

	switch (len ? p[0] : 0) {
	case REC_ENTRY:
		if (len < ENTRY_HDR)
			return 0;
		n = (uint64_t)ENTRY_HDR + get32(p + 16) + get32(p + 20);
		break;
	case REC_BLOCK:
		if (len < BLOCK_HDR)
			return 0;
		n = (uint64_t)BLOCK_HDR + get32(p + 8);
		break;
	case REC_FILE_END:
		n = FILE_END_LEN;
		break;
	case REC_DELETE:
		if (len < DELETE_HDR)
			return 0;
		n = (uint64_t)DELETE_HDR + get32(p + 4);
		break;
	case REC_END:
		n = END_LEN;
		break;
	default:
		return 0;
	}
	return n <= len ? n : 0;
}

/* Decompresses one frame and hashes the blocks in it. */
static void decompress_job(struct chunk *c)
{
	LZ4F_decompressOptions_t o = { .stableDst = 1 };
	uint32_t stored = get32(c->src), want = get32(c->src + 4);
	const uint8_t *src = c->src + FRAME_PREFIX;
	size_t done = 0, used = 0, r = 1;

	c->rc = -1;
	c->nhashes = 0;
	c->rawlen = 0;
	/* room for a whole 4 MiB block, so that LZ4F decodes in place */
	if (c->rawcap < CHUNK_CAP) {
		free(c->raw);
		c->raw = xmalloc(CHUNK_CAP);
		c->rawcap = CHUNK_CAP;
	}
	if (c->dctx) {
		LZ4F_resetDecompressionContext(c->dctx);
	} else if (LZ4F_isError(LZ4F_createDecompressionContext(&c->dctx, LZ4F_VERSION))) {
		c->dctx = NULL;
		snprintf(c->err, sizeof(c->err), "lz4: out of memory");
		return;
	}
	while (used < stored) {
		size_t dl = c->rawcap - done, sl = stored - used;

		r = LZ4F_decompress(c->dctx, c->raw + done, &dl, src + used, &sl, &o);
		if (LZ4F_isError(r)) {
			snprintf(c->err, sizeof(c->err), "corrupt frame (lz4: %s)", LZ4F_getErrorName(r));
			return;
		}
		done += dl;
		used += sl;
		if (r == 0 || (!dl && !sl))
			break;
	}
	if (r != 0) {
		snprintf(c->err, sizeof(c->err), "truncated frame (%zu of %u bytes decoded)", done, want);
		return;
	}
	if (used != stored || done != want) {
		snprintf(c->err, sizeof(c->err), "frame length mismatch (%zu of %u stored bytes, %zu of %u raw bytes)",
			 used, stored, done, want);
		return;
	}
	c->rawlen = done;
	c->rc = 0;
	/* hash the blocks now, on this thread; the reader checks the rest */
	for (size_t off = 0, n; c->verify && off < c->rawlen; off += n) {
		n = rec_len(c->raw + off, c->rawlen - off);
		if (!n)
			break;
		if (c->raw[off] != REC_BLOCK)
			continue;
		if (c->nhashes == c->hcap) {
			c->hcap = c->hcap ? 2 * c->hcap : 64;
			c->hashes = xrealloc(c->hashes, c->hcap * CHECKPOINT_HASH_LEN);
		}
		sha256(c->raw + off + BLOCK_HDR, n - BLOCK_HDR, c->hashes[c->nhashes++]);
	}
}

/* ---- restore ---- */

struct restore {
	struct checkpoint_options opt;
	int rootfd;
	struct dircache dc;
	struct checkpoint_manifest *m;	/* the tree so far, sorted */
	uint8_t *dead;			/* per m entry: deleted by this link */
	struct checkpoint_manifest *added;	/* new entries of this link, sorted */
	uint64_t total, live;
	/* the link being applied */
	uint64_t rec;			/* entry/delete record number */
	bool full, upserting, ended;
	char *last;			/* last path seen, for order */
	/* the file being written */
	struct checkpoint_entry *cur;
	int fd;
	bool patch;
	uint32_t old_nblocks, sent_new;
	uint64_t old_size;
	int64_t next_index;
	bool sent_old_last, sent_new_last;
	/* blocks queued for one pwritev, pointing into the current frame */
#define RS_IOV 64
	struct iovec iov[RS_IOV];
	int niov;
	off_t iov_off;
	size_t iov_len;
	char *err;
	size_t errlen;
};

static int rerr(struct restore *rs, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int rerr(struct restore *rs, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(rs->err, rs->errlen, fmt, ap);
	va_end(ap);
	return -1;
}

/* Looks path up among the live entries of the tree. */
static ssize_t rs_find(struct restore *rs, const char *path)
{
	ssize_t i = manifest_search(rs->m, path);

	return i >= 0 && !rs->dead[i] ? i : -1;
}

static int rs_parent(struct restore *rs, const char *path, const char **leaf)
{
	int fd = dircache_parent(&rs->dc, path, leaf);

	if (fd < 0) {
		char q[160];

		if (errno == ELOOP || errno == ENOTDIR)
			return rerr(rs, "entry %llu \"%s\": parent is not a directory (symlink in path?)",
				    (unsigned long long)rs->rec, qpath(path, strlen(path), q, sizeof(q)));
		return rerr(rs, "entry %llu \"%s\": could not open parent directory: %m",
			    (unsigned long long)rs->rec, qpath(path, strlen(path), q, sizeof(q)));
	}
	return fd;
}

/* Deletions come first, in strictly decreasing path order, then additions
 * and changes in strictly increasing order: no duplicates, parents first. */
static int rs_order(struct restore *rs, const char *path, bool upsert)
{
	char q[160];

	if (upsert && !rs->upserting) {
		rs->upserting = true;
	} else if (!upsert && rs->upserting) {
		return rerr(rs, "entry %llu \"%s\": deletion after additions",
			    (unsigned long long)rs->rec, qpath(path, strlen(path), q, sizeof(q)));
	} else if (rs->last) {
		int c = strcmp(path, rs->last);

		if ((upsert && c <= 0) || (!upsert && c >= 0))
			return rerr(rs, "entry %llu \"%s\": out of order or duplicate",
				    (unsigned long long)rs->rec, qpath(path, strlen(path), q, sizeof(q)));
	}
	free(rs->last);
	rs->last = xstrdup(path);
	return 0;
}

/* DELETE: removes an entry of the tree (a directory must be empty by now). */
static int rs_delete(struct restore *rs, const uint8_t *p, size_t n)
{
	uint32_t plen = get32(p + 4);
	const char *raw = (const char *)p + DELETE_HDR, *leaf;
	char q[160], *path = NULL;
	ssize_t i;
	int pfd, rc = -1;

	rs->rec++;
	if (rs->full)
		return rerr(rs, "entry %llu: deletion in a full checkpoint", (unsigned long long)rs->rec);
	if (path_check(raw, plen, rs->opt.max_path, rs->err, rs->errlen) < 0) {
		preerr(rs->err, rs->errlen, "entry %llu \"%s\"", (unsigned long long)rs->rec, qpath(raw, plen, q, sizeof(q)));
		return -1;
	}
	path = xmalloc(plen + 1);
	memcpy(path, raw, plen);
	path[plen] = '\0';
	if (rs_order(rs, path, false) < 0)
		goto out;
	i = rs_find(rs, path);
	if (i < 0) {
		rerr(rs, "entry %llu \"%s\": deletion of a path that is not in the tree",
		     (unsigned long long)rs->rec, qpath(path, plen, q, sizeof(q)));
		goto out;
	}
	if ((pfd = rs_parent(rs, path, &leaf)) < 0)
		goto out;
	if (unlinkat(pfd, leaf, rs->m->e[i].type == CHECKPOINT_DIR ? AT_REMOVEDIR : 0) < 0) {
		rerr(rs, "entry %llu \"%s\": could not remove: %m", (unsigned long long)rs->rec, qpath(path, plen, q, sizeof(q)));
		goto out;
	}
	if (rs->m->e[i].type == CHECKPOINT_DIR)
		dircache_drop(&rs->dc);	/* it may have been the cached parent */
	rs->dead[i] = 1;
	rs->live--;
	if (rs->m->e[i].type == CHECKPOINT_FILE)
		rs->total -= rs->m->e[i].size;
	rc = 0;
out:
	free(path);
	return rc;
}

/* ENTRY: checks everything it says, then creates or updates the entry; a
 * file stays open for its blocks until its FILE_END. */
static int rs_entry(struct restore *rs, const uint8_t *p, size_t n)
{
	uint8_t type = p[1], flags = p[2];
	uint32_t mode = get32(p + 4), plen = get32(p + 16), tlen = get32(p + 20);
	uint64_t size = get64(p + 8);
	const char *raw = (const char *)p + ENTRY_HDR, *leaf;
	char q[160], *path = NULL, *target = NULL;
	struct checkpoint_entry *e;
	ssize_t i;
	int pfd, rc = -1;
	unsigned long long rec = ++rs->rec;

	if (rs->cur)
		return rerr(rs, "entry %llu: file \"%s\" has no end record", rec, rs->cur->path);
	if (path_check(raw, plen, rs->opt.max_path, rs->err, rs->errlen) < 0) {
		preerr(rs->err, rs->errlen, "entry %llu \"%s\"", rec, qpath(raw, plen, q, sizeof(q)));
		return -1;
	}
	qpath(raw, plen, q, sizeof(q));
	if (type != CHECKPOINT_FILE && type != CHECKPOINT_DIR && type != CHECKPOINT_SYMLINK)
		return rerr(rs, "entry %llu \"%s\": unknown type %u", rec, q, type);
	if (mode & ~0777u || flags & ~ENTRY_PATCH || p[3] ||
	    (type == CHECKPOINT_SYMLINK && mode != 0777))
		return rerr(rs, "entry %llu \"%s\": bad mode or flags", rec, q);
	if ((flags & ENTRY_PATCH) && type != CHECKPOINT_FILE)
		return rerr(rs, "entry %llu \"%s\": patch of a %s", rec, q, type_name(type));
	if (type == CHECKPOINT_SYMLINK) {
		if (!tlen || tlen != size || tlen > rs->opt.max_path || memchr(raw + plen, '\0', tlen))
			return rerr(rs, "entry %llu \"%s\": bad symlink target", rec, q);
	} else if (tlen) {
		return rerr(rs, "entry %llu \"%s\": a %s with a target", rec, q, type_name(type));
	}
	if (type == CHECKPOINT_DIR && size)
		return rerr(rs, "entry %llu \"%s\": a directory with a size", rec, q);
	path = xmalloc(plen + 1);
	memcpy(path, raw, plen);
	path[plen] = '\0';
	if (rs_order(rs, path, true) < 0)
		goto out;
	i = rs_find(rs, path);
	if (i >= 0 && rs->m->e[i].type != type) {
		rerr(rs, "entry %llu \"%s\": %s replaced by a %s without a deletion", rec, q,
		     type_name(rs->m->e[i].type), type_name(type));
		goto out;
	}
	if (i < 0 && (flags & ENTRY_PATCH)) {
		rerr(rs, "entry %llu \"%s\": patch of a file that is not in the tree", rec, q);
		goto out;
	}
	if (i < 0 && rs->live >= rs->opt.max_entries) {
		rerr(rs, "entry %llu \"%s\": more than %llu entries", rec, q, (unsigned long long)rs->opt.max_entries);
		goto out;
	}
	if (type == CHECKPOINT_FILE) {
		uint64_t old = i >= 0 ? rs->m->e[i].size : 0;

		if (size > rs->opt.max_total_size || rs->total - old + size > rs->opt.max_total_size) {
			rerr(rs, "entry %llu \"%s\": the tree would exceed the size limit (%llu bytes)", rec, q,
			     (unsigned long long)rs->opt.max_total_size);
			goto out;
		}
		if (size / CHECKPOINT_BLOCK_SIZE >= UINT32_MAX) {
			rerr(rs, "entry %llu \"%s\": file too large", rec, q);
			goto out;
		}
	}
	if ((pfd = rs_parent(rs, path, &leaf)) < 0)
		goto out;
	if (i >= 0) {
		e = &rs->m->e[i];
	} else {
		e = manifest_push(rs->added);
		e->path = path;
		path = NULL;
		e->type = type;
		rs->live++;
	}
	e->mode = mode;
	switch (type) {
	case CHECKPOINT_DIR:
		if (i < 0 && mkdirat(pfd, leaf, 0700) < 0) {
			rerr(rs, "entry %llu \"%s\": could not create directory: %m", rec, q);
			goto out;
		}
		break;
	case CHECKPOINT_SYMLINK:
		target = xmalloc(tlen + 1);
		memcpy(target, raw + plen, tlen);
		target[tlen] = '\0';
		if (i >= 0 && unlinkat(pfd, leaf, 0) < 0) {
			rerr(rs, "entry %llu \"%s\": could not replace symlink: %m", rec, q);
			goto out;
		}
		if (symlinkat(target, pfd, leaf) < 0) {
			rerr(rs, "entry %llu \"%s\": could not create symlink: %m", rec, q);
			goto out;
		}
		free(e->target);
		e->target = target;
		target = NULL;
		e->size = tlen;
		sha256(e->target, tlen, e->hash);
		break;
	case CHECKPOINT_FILE: {
		struct stat st;
		uint32_t nb = (size + CHECKPOINT_BLOCK_SIZE - 1) / CHECKPOINT_BLOCK_SIZE;
		uint8_t (*blocks)[CHECKPOINT_HASH_LEN];

		if (i >= 0)
			rs->fd = openat(pfd, leaf, O_WRONLY | O_NOFOLLOW | O_CLOEXEC | ((flags & ENTRY_PATCH) ? 0 : O_TRUNC));
		else
			rs->fd = openat(pfd, leaf, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
		if (rs->fd < 0) {
			rerr(rs, "entry %llu \"%s\": could not open: %m", rec, q);
			goto out;
		}
		if (fstat(rs->fd, &st) < 0 || !S_ISREG(st.st_mode)) {
			rerr(rs, "entry %llu \"%s\": not a regular file", rec, q);
			goto out;
		}
		if (ftruncate(rs->fd, size) < 0) {
			rerr(rs, "entry %llu \"%s\": could not set size: %m", rec, q);
			goto out;
		}
		blocks = xcalloc((size_t)nb + 1, CHECKPOINT_HASH_LEN);
		rs->patch = flags & ENTRY_PATCH;
		rs->old_nblocks = rs->patch ? e->nblocks : 0;
		rs->old_size = rs->patch ? e->size : 0;
		if (rs->patch && e->blocks)
			memcpy(blocks, e->blocks, (size_t)(nb < e->nblocks ? nb : e->nblocks) * CHECKPOINT_HASH_LEN);
		free(e->blocks);
		e->blocks = blocks;
		e->nblocks = nb;
		rs->total = rs->total - (i >= 0 ? e->size : 0) + size;
		e->size = size;
		rs->cur = e;
		rs->next_index = 0;
		rs->sent_new = 0;
		rs->sent_old_last = rs->sent_new_last = false;
		break;
	}
	}
	rc = 0;
out:
	free(path);
	free(target);
	return rc;
}

/* BLOCK: writes one block of the open file at its offset. */
/* Writes the queued blocks of the open file (contiguous, one pwritev). */
static int rs_flush(struct restore *rs)
{
	struct iovec *iov = rs->iov;
	int n = rs->niov;
	off_t off = rs->iov_off;

	while (n > 0) {
		ssize_t w = pwritev(rs->fd, iov, n, off);

		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0) {
			char q[160];

			return rerr(rs, "entry %llu \"%s\": could not write: %s", (unsigned long long)rs->rec,
				    qpath(rs->cur->path, strlen(rs->cur->path), q, sizeof(q)),
				    w < 0 ? strerror(errno) : "no progress");
		}
		off += w;
		while (n > 0 && (size_t)w >= iov->iov_len) {
			w -= iov->iov_len;
			iov++;
			n--;
		}
		if (n > 0) {
			iov->iov_base = (uint8_t *)iov->iov_base + w;
			iov->iov_len -= w;
		}
	}
	rs->niov = 0;
	return 0;
}

static int rs_blkerr(struct restore *rs, const char *what, uint64_t v)
{
	char q[160];

	return rerr(rs, "entry %llu \"%s\": %s %llu", (unsigned long long)rs->rec,
		    qpath(rs->cur->path, strlen(rs->cur->path), q, sizeof(q)), what, (unsigned long long)v);
}

/* BLOCK: queues one block of the open file for writing at its offset. */
static int rs_block(struct restore *rs, const uint8_t *p, size_t n, const uint8_t *hash)
{
	struct checkpoint_entry *e = rs->cur;
	uint32_t idx = get32(p + 4), len = get32(p + 8);
	const uint8_t *data = p + BLOCK_HDR;
	off_t off = (off_t)idx * CHECKPOINT_BLOCK_SIZE;

	if (!e)
		return rerr(rs, "entry %llu: data block outside a file", (unsigned long long)rs->rec);
	if (idx >= e->nblocks || idx < rs->next_index || p[1] || p[2] || p[3])
		return rs_blkerr(rs, "bad block index", idx);
	if (!rs->patch && idx != rs->next_index)
		return rs_blkerr(rs, "missing block", rs->next_index);
	if (len != old_block_len(e->size, idx))
		return rs_blkerr(rs, "bad length for block", idx);
	if (rs->opt.verify_data) {
		uint8_t h[CHECKPOINT_HASH_LEN];

		if (!hash) {
			sha256(data, len, h);
			hash = h;
		}
		if (memcmp(hash, p + 12, CHECKPOINT_HASH_LEN))
			return rs_blkerr(rs, "data does not match the hash of block", idx);
	}
	if (rs->niov && (rs->niov == RS_IOV || rs->iov_off + (off_t)rs->iov_len != off) && rs_flush(rs) < 0)
		return -1;
	if (!rs->niov) {
		rs->iov_off = off;
		rs->iov_len = 0;
	}
	rs->iov[rs->niov].iov_base = (void *)data;
	rs->iov[rs->niov].iov_len = len;
	rs->niov++;
	rs->iov_len += len;
	memcpy(e->blocks[idx], p + 12, CHECKPOINT_HASH_LEN);
	rs->next_index = (int64_t)idx + 1;
	if (idx >= rs->old_nblocks)
		rs->sent_new++;
	if (rs->old_nblocks && idx == rs->old_nblocks - 1)
		rs->sent_old_last = true;
	if (idx == e->nblocks - 1)
		rs->sent_new_last = true;
	return 0;
}

/* FILE_END: checks that the blocks that had to come came, and that the
 * file's content hash matches the one recorded. */
static int rs_file_end(struct restore *rs, const uint8_t *p)
{
	struct checkpoint_entry *e = rs->cur;
	char q[160];
	uint8_t h[CHECKPOINT_HASH_LEN];

	if (!e)
		return rerr(rs, "entry %llu: file end outside a file", (unsigned long long)rs->rec);
	if (rs_flush(rs) < 0)
		return -1;
	qpath(e->path, strlen(e->path), q, sizeof(q));
	if (!rs->patch && rs->next_index != e->nblocks)
		return rerr(rs, "entry %llu \"%s\": block %llu is missing", (unsigned long long)rs->rec, q,
			    (unsigned long long)rs->next_index);
	if (rs->patch) {
		uint32_t on = rs->old_nblocks, nn = e->nblocks;

		/* every block whose length changed must have been sent */
		if (nn > on && rs->sent_new != nn - on)
			return rerr(rs, "entry %llu \"%s\": new blocks are missing", (unsigned long long)rs->rec, q);
		if (on && on - 1 < nn && old_block_len(rs->old_size, on - 1) != old_block_len(e->size, on - 1) &&
		    !rs->sent_old_last)
			return rerr(rs, "entry %llu \"%s\": block %u is missing", (unsigned long long)rs->rec, q, on - 1);
		if (nn && nn - 1 < on && old_block_len(rs->old_size, nn - 1) != old_block_len(e->size, nn - 1) &&
		    !rs->sent_new_last)
			return rerr(rs, "entry %llu \"%s\": block %u is missing", (unsigned long long)rs->rec, q, nn - 1);
	}
	file_hash(e->size, (const uint8_t (*)[CHECKPOINT_HASH_LEN])e->blocks, e->nblocks, h);
	if (memcmp(h, p + 4, CHECKPOINT_HASH_LEN))
		return rerr(rs, "entry %llu \"%s\": content does not match its hash", (unsigned long long)rs->rec, q);
	memcpy(e->hash, h, CHECKPOINT_HASH_LEN);
	e->has_stat = false;
	if (fchmod(rs->fd, e->mode | 0600) < 0)
		return rerr(rs, "entry %llu \"%s\": could not set its mode: %m", (unsigned long long)rs->rec, q);
	close(rs->fd);
	rs->fd = -1;
	rs->cur = NULL;
	return 0;
}

/* Applies the records of one decompressed frame. */
static int rs_frame(struct restore *rs, struct chunk *c, bool last)
{
	size_t h = 0;

	for (size_t off = 0, n; off < c->rawlen; off += n) {
		const uint8_t *p = c->raw + off;
		int r = 0;

		n = rec_len(p, c->rawlen - off);
		if (!n)
			return rerr(rs, "malformed record at byte %zu of the frame (after entry %llu)", off,
				    (unsigned long long)rs->rec);
		if (rs->ended)
			return rerr(rs, "records after the end record");
		switch (p[0]) {
		case REC_ENTRY:
			r = rs_entry(rs, p, n);
			break;
		case REC_BLOCK:
			r = rs_block(rs, p, n, h < c->nhashes ? c->hashes[h] : NULL);
			h++;
			break;
		case REC_FILE_END:
			r = rs_file_end(rs, p);
			break;
		case REC_DELETE:
			r = rs_delete(rs, p, n);
			break;
		case REC_END:
			if (rs->cur)
				return rerr(rs, "file \"%s\" has no end record", rs->cur->path);
			if (!last || off + n != c->rawlen)
				return rerr(rs, "end record before the last frame");
			if (get32(p + 4) != rs->live)
				return rerr(rs, "the tree has %llu entries, the end record says %u",
					    (unsigned long long)rs->live, get32(p + 4));
			rs->ended = true;
			break;
		}
		if (r < 0)
			return -1;
	}
	/* the queued blocks point into this frame, about to be reused */
	return rs->cur ? rs_flush(rs) : 0;
}

/* Folds this link's deletions and additions into the tree. */
static void rs_merge(struct restore *rs)
{
	struct checkpoint_manifest *m = rs->m, *a = rs->added;
	struct checkpoint_entry *out = xmalloc((m->n + a->n + 1) * sizeof(*out));
	size_t i = 0, j = 0, k = 0;

	while (i < m->n || j < a->n) {
		if (i < m->n && rs->dead[i]) {
			entry_release(&m->e[i++]);
			continue;
		}
		if (j >= a->n || (i < m->n && strcmp(m->e[i].path, a->e[j].path) < 0))
			out[k++] = m->e[i++];
		else
			out[k++] = a->e[j++];
	}
	free(m->e);
	m->e = out;
	m->n = k;
	m->cap = m->n + a->n + 1;
	a->n = 0;
	free(rs->dead);
	rs->dead = xcalloc(m->n + 1, 1);
}

/* Applies one blob of the chain: frames are decompressed on the pool
 * threads, records applied here in order; then the tree hash is checked. */
static int rs_link(struct restore *rs, const struct checkpoint_blob *b, size_t link, const uint8_t *prev)
{
	struct checkpoint_info info;
	const uint8_t **frames = NULL;
	struct pool pool;
	struct chunk **chunks = NULL;
	size_t nch = 0, next = 0;
	bool pool_live = false;
	int rc = -1;

	if (blob_frames(b->data, b->len, &info, &frames, rs->err, rs->errlen) < 0)
		return -1;
	if (link == 0 && !info.full) {
		rerr(rs, "the first checkpoint of a chain is a delta");
		goto out;
	}
	if (link > 0 && info.full) {
		rerr(rs, "a full checkpoint inside a chain");
		goto out;
	}
	if (link > 0 && memcmp(info.base_hash, prev, CHECKPOINT_HASH_LEN)) {
		rerr(rs, "its base is not the checkpoint before it");
		goto out;
	}
	if (b->tree_hash && memcmp(info.tree_hash, b->tree_hash, CHECKPOINT_HASH_LEN)) {
		rerr(rs, "its header tree hash differs from the stored one");
		goto out;
	}
	rs->rec = 0;
	rs->full = info.full;
	rs->upserting = rs->ended = false;
	free(rs->last);
	rs->last = NULL;
	{
		int nth = rs->opt.threads > 1 ? rs->opt.threads : 0;
		size_t cap = nth ? 2 * (size_t)nth + 1 : 1;

		pool_init(&pool, nth, cap + 1, decompress_job);
		pool_live = true;
		nch = cap;
		chunks = xcalloc(nch, sizeof(*chunks));
		for (size_t i = 0; i < nch; i++)
			chunks[i] = xcalloc(1, sizeof(struct chunk));
	}
	for (uint32_t f = 0; f < info.nframes; f++) {
		struct chunk *c;

		while (next < info.nframes && pool_inflight(&pool) < nch) {
			c = chunks[next % nch];
			c->src = frames[next];
			c->verify = rs->opt.verify_data;
			pool_submit(&pool, c);
			next++;
		}
		c = pool_collect(&pool);
		if (c->rc) {
			rerr(rs, "frame %u of %u: %s", f + 1, info.nframes, c->err);
			goto out;
		}
		if (rs_frame(rs, c, f + 1 == info.nframes) < 0) {
			preerr(rs->err, rs->errlen, "frame %u", f + 1);
			goto out;
		}
	}
	if (!rs->ended) {
		rerr(rs, "truncated: no end record");
		goto out;
	}
	if (info.entries != rs->live) {
		rerr(rs, "the tree has %llu entries, the header says %u", (unsigned long long)rs->live, info.entries);
		goto out;
	}
	rs_merge(rs);
	tree_hash(rs->m->e, rs->m->n, rs->m->tree_hash);
	if (memcmp(rs->m->tree_hash, info.tree_hash, CHECKPOINT_HASH_LEN)) {
		char got[65], want[65];

		checkpoint_hash_hex(rs->m->tree_hash, got);
		checkpoint_hash_hex(info.tree_hash, want);
		rerr(rs, "tree hash mismatch: restored %.16s…, expected %.16s…", got, want);
		goto out;
	}
	rc = 0;
out:
	if (pool_live) {
		while (pool_collect(&pool))
			;
		pool_release(&pool);
	}
	for (size_t i = 0; i < nch; i++)
		chunk_free(chunks[i]);
	free(chunks);
	free(frames);
	return rc;
}

/* Sets the final modes (directories stay writable, files owner-writable
 * while a chain is applied) and records stat hints for the next capture:
 * entries chmod'ed here get a ctime after the stamp, so they are hashed
 * again next time, which is only right. */
static int rs_finish(struct restore *rs)
{
	struct checkpoint_manifest *m = rs->m;

	m->stamp_ns = coarse_now_ns();
	for (size_t k = m->n; k-- > 0;) {
		struct checkpoint_entry *e = &m->e[k];
		struct stat st;
		const char *leaf;
		int pfd;

		if ((pfd = rs_parent(rs, e->path, &leaf)) < 0)
			return -1;
		if (fstatat(pfd, leaf, &st, AT_SYMLINK_NOFOLLOW) < 0)
			return rerr(rs, "could not stat \"%s\": %m", e->path);
		if (S_ISLNK(st.st_mode) != (e->type == CHECKPOINT_SYMLINK))
			return rerr(rs, "\"%s\" changed during the restore", e->path);
		if (e->type != CHECKPOINT_SYMLINK && (st.st_mode & 0777) != e->mode) {
			if (fchmodat(pfd, leaf, e->mode, 0) < 0 || fstatat(pfd, leaf, &st, AT_SYMLINK_NOFOLLOW) < 0)
				return rerr(rs, "could not set the mode of \"%s\": %m", e->path);
		}
		if (rs->opt.restat)
			entry_set_stat(e, &st);
	}
	return 0;
}

/* Opens dir into *fdout if it has no entries. */
static int dir_is_empty(const char *dir, int *fdout, char *err, size_t errlen)
{
	int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC), dfd;
	DIR *d;
	struct dirent *de;
	bool empty = true;

	if (fd < 0)
		return seterr(err, errlen, "could not open restore directory \"%s\": %m", dir), -1;
	if ((dfd = dup(fd)) < 0 || !(d = fdopendir(dfd))) {
		seterr(err, errlen, "could not read restore directory \"%s\": %m", dir);
		if (dfd >= 0)
			close(dfd);
		close(fd);
		return -1;
	}
	while ((de = readdir(d)))
		if (strcmp(de->d_name, ".") && strcmp(de->d_name, ".."))
			empty = false;
	closedir(d);
	if (!empty) {
		close(fd);
		return seterr(err, errlen, "restore directory \"%s\" is not empty", dir), -1;
	}
	*fdout = fd;
	return 0;
}

/* Applies chain[0..n); *applied counts the links that verified. */
static int restore_chain(const char *dir, const struct checkpoint_blob *chain, size_t n,
			 const uint8_t *expected, const struct checkpoint_options *opt,
			 struct checkpoint_manifest **manifest, size_t *applied,
			 char *err, size_t errlen)
{
	struct restore rs;
	int rc = -1;

	memset(&rs, 0, sizeof(rs));
	options_resolve(opt, &rs.opt);
	rs.err = err;
	rs.errlen = errlen;
	rs.fd = -1;
	rs.rootfd = -1;
	*applied = 0;
	if (manifest)
		*manifest = NULL;
	dircache_init(&rs.dc, -1);
	if (!n) {
		seterr(err, errlen, "empty checkpoint chain");
		return -1;
	}
	if (dir_is_empty(dir, &rs.rootfd, err, errlen) < 0)
		return -1;
	dircache_init(&rs.dc, rs.rootfd);
	rs.m = manifest_new();
	rs.added = manifest_new();
	rs.dead = xcalloc(1, 1);
	for (size_t k = 0; k < n; k++) {
		if (rs_link(&rs, &chain[k], k, rs.m->tree_hash) < 0) {
			if (rs.fd >= 0)
				close(rs.fd);
			rs.fd = -1;
			rs.cur = NULL;
			rs.niov = 0;
			preerr(err, errlen, "checkpoint %zu of %zu", k + 1, n);
			goto out;
		}
		(*applied)++;
	}
	if (expected && memcmp(expected, rs.m->tree_hash, CHECKPOINT_HASH_LEN)) {
		seterr(err, errlen, "restored tree does not have the expected hash");
		goto out;
	}
	if (rs_finish(&rs) < 0)
		goto out;
	if (manifest) {
		*manifest = rs.m;
		rs.m = NULL;
	}
	rc = 0;
out:
	if (rs.fd >= 0)
		close(rs.fd);
	/* entries added by a failed link are not in rs.m yet */
	for (size_t i = 0; i < rs.added->n; i++)
		entry_release(&rs.added->e[i]);
	rs.added->n = 0;
	checkpoint_manifest_free(rs.added);
	checkpoint_manifest_free(rs.m);
	free(rs.dead);
	free(rs.last);
	dircache_drop(&rs.dc);
	if (rs.rootfd >= 0)
		close(rs.rootfd);
	return rc;
}

int checkpoint_restore(const char *dir, const struct checkpoint_blob *chain, size_t n,
		       const uint8_t *expected, const struct checkpoint_options *opt,
		       struct checkpoint_manifest **manifest, char *err, size_t errlen)
{
	size_t applied;

	return restore_chain(dir, chain, n, expected, opt, manifest, &applied, err, errlen);
}

/* Tries the whole chain; when link k fails, starts again with links before k. */
int checkpoint_restore_newest(const char *dir, const struct checkpoint_blob *chain, size_t n,
			      const struct checkpoint_options *opt, size_t *used,
			      struct checkpoint_manifest **manifest, char *err, size_t errlen)
{
	size_t applied = 0;
	char why[512] = "";
	char e2[512];

	*used = 0;
	if (!restore_chain(dir, chain, n, NULL, opt, manifest, &applied, why, sizeof(why))) {
		seterr(err, errlen, "%s", "");
		*used = n;
		return 0;
	}
	if (!applied) {
		seterr(err, errlen, "%s", why);
		return -1;
	}
	/* links [0, applied) verified: start again without the bad one */
	if (checkpoint_empty_dir(dir, e2, sizeof(e2)) < 0) {
		seterr(err, errlen, "%s; %s", why, e2);
		return -1;
	}
	if (restore_chain(dir, chain, applied, NULL, opt, manifest, &applied, e2, sizeof(e2)) < 0) {
		seterr(err, errlen, "%s; then: %s", why, e2);
		return -1;
	}
	*used = applied;
	seterr(err, errlen, "%s", why);
	return 0;
}

/* Restore into a temporary directory, then a full capture of it. */
int checkpoint_compact(const struct checkpoint_blob *chain, size_t n, const char *tmpdir,
		       const struct checkpoint_options *opt, struct checkpoint_result *out,
		       char *err, size_t errlen)
{
	char *dir = xmalloc(strlen(tmpdir) + 32);
	char e2[256];
	int rc = -1;

	memset(out, 0, sizeof(*out));
	sprintf(dir, "%s/cairn-compact.XXXXXX", tmpdir);
	if (!mkdtemp(dir)) {
		seterr(err, errlen, "could not create a directory in \"%s\": %m", tmpdir);
		free(dir);
		return -1;
	}
	if (checkpoint_restore(dir, chain, n, NULL, opt, NULL, err, errlen) < 0)
		goto out;
	if (checkpoint_capture(dir, NULL, opt, out, err, errlen) < 0)
		goto out;
	rc = 0;
out:
	if (checkpoint_empty_dir(dir, e2, sizeof(e2)) < 0 || rmdir(dir) < 0) {
		if (rc == 0) {
			seterr(err, errlen, "could not remove \"%s\": %s", dir, e2);
			checkpoint_result_release(out);
			rc = -1;
		}
	}
	free(dir);
	return rc;
}

/* ---- JSON ---- */

json_t *checkpoint_manifest_to_json(const struct checkpoint_manifest *m)
{
	json_t *entries = json_array();
	char hex[65];

	for (size_t i = 0; i < m->n; i++) {
		const struct checkpoint_entry *e = &m->e[i];
		json_t *o = json_pack("{s:s, s:s, s:i, s:I}", "path", e->path, "type", type_name(e->type),
				      "mode", (int)e->mode, "size", (json_int_t)e->size);

		if (e->type == CHECKPOINT_SYMLINK) {
			json_object_set_new(o, "target", json_string(e->target));
		} else if (e->type == CHECKPOINT_FILE) {
			checkpoint_hash_hex(e->hash, hex);
			json_object_set_new(o, "hash", json_string(hex));
		}
		json_array_append_new(entries, o);
	}
	checkpoint_hash_hex(m->tree_hash, hex);
	return json_pack("{s:i, s:i, s:s, s:o}", "version", 1, "block_size", CHECKPOINT_BLOCK_SIZE,
			 "tree_hash", hex, "entries", entries);
}

/* Rebuilds a manifest from its JSON form; nothing in it is trusted. */
int checkpoint_manifest_from_json(const json_t *j, const struct checkpoint_options *opt,
				  struct checkpoint_manifest **out, char *err, size_t errlen)
{
	struct checkpoint_options o;
	struct checkpoint_manifest *m = NULL;
	const json_t *entries, *v;
	const char *th;
	uint8_t want[CHECKPOINT_HASH_LEN];
	size_t i;
	uint64_t total = 0;

	*out = NULL;
	options_resolve(opt, &o);
	if (!json_is_object(j) || json_integer_value(json_object_get(j, "version")) != 1 ||
	    json_integer_value(json_object_get(j, "block_size")) != CHECKPOINT_BLOCK_SIZE)
		return seterr(err, errlen, "manifest: not a version 1 manifest"), -1;
	th = json_string_value(json_object_get(j, "tree_hash"));
	if (!th || checkpoint_hash_parse(th, want) < 0)
		return seterr(err, errlen, "manifest: bad tree_hash"), -1;
	entries = json_object_get(j, "entries");
	if (!json_is_array(entries) || json_array_size(entries) > o.max_entries)
		return seterr(err, errlen, "manifest: entries must be an array of at most %llu",
			      (unsigned long long)o.max_entries), -1;
	m = manifest_new();
	json_array_foreach(entries, i, v) {
		const char *path = json_string_value(json_object_get(v, "path"));
		const char *type = json_string_value(json_object_get(v, "type"));
		const json_t *mode = json_object_get(v, "mode"), *size = json_object_get(v, "size");
		struct checkpoint_entry *e;

		if (!path || !type || !json_is_integer(mode) || !json_is_integer(size) ||
		    json_integer_value(mode) < 0 || json_integer_value(mode) > 0777 || json_integer_value(size) < 0) {
			seterr(err, errlen, "manifest: $.entries[%zu]: bad entry", i);
			goto fail;
		}
		if (path_check(path, strlen(path), o.max_path, err, errlen) < 0) {
			preerr(err, errlen, "manifest: $.entries[%zu].path", i);
			goto fail;
		}
		if (m->n && strcmp(m->e[m->n - 1].path, path) >= 0) {
			seterr(err, errlen, "manifest: $.entries[%zu]: out of order or duplicate", i);
			goto fail;
		}
		e = manifest_push(m);
		e->path = xstrdup(path);
		e->mode = json_integer_value(mode);
		e->size = json_integer_value(size);
		if (!strcmp(type, "dir") && !e->size) {
			e->type = CHECKPOINT_DIR;
		} else if (!strcmp(type, "symlink")) {
			const char *t = json_string_value(json_object_get(v, "target"));

			e->type = CHECKPOINT_SYMLINK;
			if (!t || !*t || strlen(t) > o.max_path || strlen(t) != e->size || e->mode != 0777) {
				seterr(err, errlen, "manifest: $.entries[%zu]: bad symlink", i);
				goto fail;
			}
			e->target = xstrdup(t);
			sha256(t, strlen(t), e->hash);
		} else if (!strcmp(type, "file")) {
			const char *h = json_string_value(json_object_get(v, "hash"));

			e->type = CHECKPOINT_FILE;
			total += e->size;
			if (!h || checkpoint_hash_parse(h, e->hash) < 0 || total > o.max_total_size) {
				seterr(err, errlen, "manifest: $.entries[%zu]: bad file", i);
				goto fail;
			}
			e->nblocks = (e->size + CHECKPOINT_BLOCK_SIZE - 1) / CHECKPOINT_BLOCK_SIZE;
		} else {
			seterr(err, errlen, "manifest: $.entries[%zu]: bad type", i);
			goto fail;
		}
	}
	tree_hash(m->e, m->n, m->tree_hash);
	if (memcmp(m->tree_hash, want, CHECKPOINT_HASH_LEN)) {
		seterr(err, errlen, "manifest: entries do not match tree_hash");
		goto fail;
	}
	*out = m;
	return 0;
fail:
	checkpoint_manifest_free(m);
	return -1;
}

json_t *checkpoint_summary_json(const struct checkpoint_result *r)
{
	char tree[65], base[65];
	size_t files = 0, dirs = 0, links = 0;
	json_t *changed, *deleted;

	for (size_t i = 0; r->manifest && i < r->manifest->n; i++) {
		int t = r->manifest->e[i].type;

		files += t == CHECKPOINT_FILE;
		dirs += t == CHECKPOINT_DIR;
		links += t == CHECKPOINT_SYMLINK;
	}
	checkpoint_hash_hex(r->tree_hash, tree);
	checkpoint_hash_hex(r->base_hash, base);
	changed = r->changed_paths ? json_incref(r->changed_paths) : json_array();
	deleted = r->deleted_paths ? json_incref(r->deleted_paths) : json_array();
	return json_pack("{s:i, s:s, s:s, s:s*, s:i, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I,"
			 " s:I, s:I, s:I, s:o, s:b, s:o, s:b}",
			 "version", 1, "kind", r->full ? "full" : "delta",
			 "tree_hash", tree, "base_hash", r->full ? NULL : base,
			 "block_size", CHECKPOINT_BLOCK_SIZE,
			 "entries", (json_int_t)r->entries, "files", (json_int_t)files,
			 "dirs", (json_int_t)dirs, "symlinks", (json_int_t)links,
			 "tree_bytes", (json_int_t)r->tree_bytes, "raw_size", (json_int_t)r->raw_size,
			 "stored_size", (json_int_t)r->stored_size, "data_bytes", (json_int_t)r->data_bytes,
			 "changed", (json_int_t)r->changed, "deleted", (json_int_t)r->deleted,
			 "skipped", (json_int_t)r->skipped,
			 "changed_paths", changed, "changed_truncated", r->changed > json_array_size(changed),
			 "deleted_paths", deleted, "deleted_truncated", r->deleted > json_array_size(deleted));
}
