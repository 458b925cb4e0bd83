/* checkpoint: workspace trees as LZ4-compressed full and delta blobs.
 *
 * A capture walks a directory (symlinks recorded, never followed) into a
 * manifest (path, type, mode, size, content hash, per-block hashes) and a
 * blob; a restore applies a chain [full, delta, delta...] to an empty
 * directory and verifies the tree hash after every link. Blobs are
 * untrusted input. The blob format is described in docs/checkpoints.md.
 * No database code here: the caller stores and fetches the blobs. */
#ifndef CAIRN_CHECKPOINT_H
#define CAIRN_CHECKPOINT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#define CHECKPOINT_HASH_LEN 32
#define CHECKPOINT_BLOCK_SIZE 65536
/* The codec name to store beside a blob ("codec" column). */
#define CHECKPOINT_CODEC "cairn-ckpt-v1+lz4f"

#ifndef WARN_UNUSED
#define WARN_UNUSED __attribute__((warn_unused_result))
#endif

enum checkpoint_type {
	CHECKPOINT_FILE = 1,
	CHECKPOINT_DIR = 2,
	CHECKPOINT_SYMLINK = 3,
};

/* One entry of a manifest; borrowed from the manifest that holds it. */
struct checkpoint_entry {
	char *path;		/* relative, '/'-separated, no "." or ".." */
	char *target;		/* symlink target, else NULL */
	enum checkpoint_type type;
	uint32_t mode;		/* permission bits only (0777) */
	uint64_t size;		/* file size, or symlink target length */
	/* file: SHA-256 of (size, block hashes); symlink: SHA-256 of the
	 * target; directory: zeros */
	uint8_t hash[CHECKPOINT_HASH_LEN];
	uint8_t (*blocks)[CHECKPOINT_HASH_LEN];	/* NULL when unknown */
	uint32_t nblocks;
	/* change hints from stat(2), valid when has_stat */
	bool has_stat;
	uint64_t dev, ino;
	int64_t mtime_ns, ctime_ns;
};

/* Opaque: a sorted list of entries and the hash of the tree. */
struct checkpoint_manifest;

struct checkpoint_options {
	int threads;		/* 0: as many as online CPUs, at most 4; 1: none */
	int acceleration;	/* LZ4 acceleration (1 = default, higher = faster) */
	bool rehash;		/* capture: ignore stat hints, hash every file */
	bool restat;		/* restore: stat the result so the next capture
				 * can use change hints (default true) */
	bool verify_data;	/* restore: hash every block written and compare
				 * it with the hash recorded at capture (default
				 * false: the frame checksums cover the data) */
	uint64_t max_total_size;	/* sum of file sizes (default 16 GiB) */
	uint64_t max_entries;		/* default 1,000,000 */
	uint32_t max_path;		/* bytes, default 4095 */
	uint64_t max_blob_size;		/* capture: stored bytes, default 1000 MiB
					 * (a bytea value holds at most 1 GiB) */
};

/* Fills in the defaults; a zero cap also means its default. */
void checkpoint_options_init(struct checkpoint_options *o);

/* What a capture produced. Release with checkpoint_result_release. */
struct checkpoint_result {
	uint8_t *blob;		/* owned */
	size_t stored_size;	/* blob length */
	uint64_t raw_size;	/* uncompressed record stream length */
	bool full;
	uint8_t tree_hash[CHECKPOINT_HASH_LEN];
	uint8_t base_hash[CHECKPOINT_HASH_LEN];	/* zeros for a full one */
	struct checkpoint_manifest *manifest;	/* owned: the captured tree */
	/* counts, for the summary and for benchmarks */
	uint64_t entries, changed, deleted;
	uint64_t tree_bytes;	/* sum of file sizes in the tree */
	uint64_t data_bytes;	/* file content carried in the blob */
	uint64_t hashed_bytes;	/* file content read and hashed */
	uint64_t skipped;	/* sockets, fifos, devices: not recorded */
	json_t *changed_paths, *deleted_paths;	/* owned, capped lists */
};

void checkpoint_result_release(struct checkpoint_result *r);

/* Captures the tree under dir. base NULL: a full checkpoint; else a delta
 * against base (the manifest of the previous checkpoint: from an earlier
 * capture or restore). opt may be NULL. On success fills *out (caller
 * releases) and returns 0; on failure returns -1 with a message in err. */
int checkpoint_capture(const char *dir, const struct checkpoint_manifest *base,
		       const struct checkpoint_options *opt, struct checkpoint_result *out,
		       char *err, size_t errlen) WARN_UNUSED;

/* One stored checkpoint of a chain; all borrowed. */
struct checkpoint_blob {
	const uint8_t *data;
	size_t len;
	/* the tree hash stored beside the blob (the "tree_hash" column), or
	 * NULL: when set, the blob must yield exactly this tree */
	const uint8_t *tree_hash;
};

/* Restores chain[0..n) (a full checkpoint followed by deltas, each based
 * on the one before) into dir, which must exist and be empty. Verifies the
 * tree hash after every link, and at the end against expected (may be
 * NULL). On success returns 0 and, if manifest is not NULL, sets it to the
 * restored tree's manifest (caller frees with checkpoint_manifest_free). On
 * failure returns -1, says what and where in err, and dir holds a partial
 * tree; nothing is ever written outside dir. */
int checkpoint_restore(const char *dir, const struct checkpoint_blob *chain, size_t n,
		       const uint8_t *expected, const struct checkpoint_options *opt,
		       struct checkpoint_manifest **manifest,
		       char *err, size_t errlen) WARN_UNUSED;

/* Restores the longest prefix of chain that verifies: on success *used is
 * the number of links applied (n when the whole chain verified) and err
 * holds why the next link was refused when *used < n. Returns -1 when not
 * even chain[0] verifies. dir is emptied before a retry. */
int checkpoint_restore_newest(const char *dir, const struct checkpoint_blob *chain, size_t n,
			      const struct checkpoint_options *opt, size_t *used,
			      struct checkpoint_manifest **manifest,
			      char *err, size_t errlen) WARN_UNUSED;

/* Rewrites a chain as one full checkpoint of the same tree: restores it in
 * a fresh directory under tmpdir, captures that, and removes it. */
int checkpoint_compact(const struct checkpoint_blob *chain, size_t n, const char *tmpdir,
		       const struct checkpoint_options *opt, struct checkpoint_result *out,
		       char *err, size_t errlen) WARN_UNUSED;

/* Reads a blob's header without decompressing it. */
struct checkpoint_info {
	bool full;
	uint32_t nframes, entries;
	uint64_t raw_size;
	uint8_t tree_hash[CHECKPOINT_HASH_LEN], base_hash[CHECKPOINT_HASH_LEN];
};
int checkpoint_blob_info(const uint8_t *data, size_t len, struct checkpoint_info *info,
			 char *err, size_t errlen) WARN_UNUSED;

/* Manifests. */
void checkpoint_manifest_free(struct checkpoint_manifest *m);
size_t checkpoint_manifest_count(const struct checkpoint_manifest *m);
/* Borrowed, valid while m lives; i < count. */
const struct checkpoint_entry *checkpoint_manifest_entry(const struct checkpoint_manifest *m, size_t i);
/* Borrowed, NULL when path is not in m. */
const struct checkpoint_entry *checkpoint_manifest_find(const struct checkpoint_manifest *m, const char *path);
const uint8_t *checkpoint_manifest_tree_hash(const struct checkpoint_manifest *m);

/* The manifest as JSON: {"version":1, "block_size", "tree_hash",
 * "entries":[{"path","type","mode","size","hash"|"target"}]} (no block
 * hashes, no stat hints). Returns a new reference. */
json_t *checkpoint_manifest_to_json(const struct checkpoint_manifest *m);
/* Parses and validates (paths, caps, order, tree hash) the form above. A
 * manifest read back this way can be a capture base: its files are then
 * compared by content hash and resent whole when they differ. */
int checkpoint_manifest_from_json(const json_t *j, const struct checkpoint_options *opt,
				  struct checkpoint_manifest **out,
				  char *err, size_t errlen) WARN_UNUSED;

/* The small JSON kept beside a blob (the "manifest" column): kind, counts,
 * sizes, hashes, and capped lists of changed and deleted paths. The full
 * manifest lives inside the blob. Returns a new reference. */
json_t *checkpoint_summary_json(const struct checkpoint_result *r);

/* Lowercase hex of a hash into out (at least 65 bytes). */
void checkpoint_hash_hex(const uint8_t *hash, char *out);
/* Parses 64 hex digits; returns 0 or -1. */
int checkpoint_hash_parse(const char *hex, uint8_t *hash) WARN_UNUSED;

/* Removes everything under dir (never following symlinks), keeping dir. */
int checkpoint_empty_dir(const char *dir, char *err, size_t errlen) WARN_UNUSED;

#endif
