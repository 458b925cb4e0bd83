/* checkpoint-store: checkpoints through the real store. Run by
 * tests/integration/checkpoint-store.test with a leased step:
 *   checkpoint-store RUN STEP EPOCH DIR
 * Stores a full and a delta checkpoint with cairn.checkpoint, reads the
 * chain back with cairn.checkpoint_chain and restores it; checks fencing,
 * base checks, fallback past a corrupt blob, and a compacted chain. */
#define _GNU_SOURCE
#include "../tap.h"
#include "checkpoint.h"

#include <fcntl.h>
#include <libpq-fe.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static PGconn *conn;
static const char *run, *step, *epoch;
static char err[1024];

/* Stores r as a checkpoint; returns its seq, or -1 with the SQLSTATE in
 * state. base_seq 0 = a full checkpoint. */
static long long store(const struct checkpoint_result *r, long long base_seq, const char *ep,
		       const char *base_hex, char *state)
{
	char bs[32], raw[32], stored[32], tree[65];
	json_t *summary = checkpoint_summary_json(r);
	char *manifest = json_dumps(summary, JSON_COMPACT);
	const char *v[11] = { run, step, ep, base_seq ? bs : NULL, CHECKPOINT_CODEC, raw, stored, tree,
			      base_seq ? base_hex : NULL, manifest, (const char *)r->blob };
	int len[11] = { 0 }, fmt[11] = { 0 };
	PGresult *res;
	long long seq = -1;

	snprintf(bs, sizeof(bs), "%lld", base_seq);
	snprintf(raw, sizeof(raw), "%llu", (unsigned long long)r->raw_size);
	snprintf(stored, sizeof(stored), "%zu", r->stored_size);
	checkpoint_hash_hex(r->tree_hash, tree);
	len[10] = r->stored_size;
	fmt[10] = 1;
	res = PQexecParams(conn, "SELECT cairn.checkpoint($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)",
			   11, NULL, v, len, fmt, 0);
	*state = '\0';
	if (PQresultStatus(res) == PGRES_TUPLES_OK)
		seq = atoll(PQgetvalue(res, 0, 0));
	else
		snprintf(state, 6, "%s", PQresultErrorField(res, PG_DIAG_SQLSTATE) ?: "?????");
	PQclear(res);
	free(manifest);
	json_decref(summary);
	return seq;
}

/* Fetches the chain to restore: owned copies in blobs/hashes. */
static int fetch(struct checkpoint_blob *chain, uint8_t (*hashes)[CHECKPOINT_HASH_LEN], int max)
{
	const char *v[3] = { run, step, epoch };
	PGresult *res = PQexecParams(conn, "SELECT tree_hash, data FROM cairn.checkpoint_chain($1, $2, $3)",
				     3, NULL, v, NULL, NULL, 1);
	int n = -1;

	if (PQresultStatus(res) != PGRES_TUPLES_OK) {
		diag("checkpoint_chain: %s", PQerrorMessage(conn));
		goto out;
	}
	n = PQntuples(res) < max ? PQntuples(res) : max;
	for (int i = 0; i < n; i++) {
		char hex[65] = "";
		uint8_t *d = malloc(PQgetlength(res, i, 1) + 1);

		memcpy(hex, PQgetvalue(res, i, 0), PQgetlength(res, i, 0) < 64 ? PQgetlength(res, i, 0) : 64);
		if (checkpoint_hash_parse(hex, hashes[i]) < 0)
			diag("bad tree_hash \"%s\"", hex);
		memcpy(d, PQgetvalue(res, i, 1), PQgetlength(res, i, 1));
		chain[i] = (struct checkpoint_blob){ d, PQgetlength(res, i, 1), hashes[i] };
	}
out:
	PQclear(res);
	return n;
}

static void drop(struct checkpoint_blob *chain, int n)
{
	for (int i = 0; i < n; i++)
		free((void *)chain[i].data);
}

static void put(const char *dir, const char *name, size_t len, char c)
{
	char path[1024];
	char *b = malloc(len + 1);
	int fd;

	memset(b, c, len);
	for (size_t i = 0; i < len; i += 97)
		b[i] = 'a' + i % 26;
	snprintf(path, sizeof(path), "%s/%s", dir, name);
	fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
	if (fd < 0 || write(fd, b, len) != (ssize_t)len)
		bail("write \"%s\"", path);
	close(fd);
	free(b);
}

static char *fresh(const char *dir, const char *name)
{
	char *p = malloc(strlen(dir) + strlen(name) + 2);

	sprintf(p, "%s/%s", dir, name);
	if (mkdir(p, 0700) < 0)
		bail("mkdir \"%s\"", p);
	return p;
}

int main(int argc, char **argv)
{
	struct checkpoint_result full, delta, compact;
	struct checkpoint_blob chain[8];
	uint8_t hashes[8][CHECKPOINT_HASH_LEN];
	struct checkpoint_manifest *m = NULL;
	char state[8], base_hex[65], bad_epoch[32], *ws, *r1, *r2, *r3;
	long long s1, s2, s3;
	size_t used = 0;
	int n;

	if (argc != 5)
		bail("usage: checkpoint-store RUN STEP EPOCH DIR");
	run = argv[1];
	step = argv[2];
	epoch = argv[3];
	snprintf(bad_epoch, sizeof(bad_epoch), "%lld", atoll(epoch) + 1);
	conn = PQconnectdb(getenv("CAIRN_DATABASE_URL") ?: "");
	if (PQstatus(conn) != CONNECTION_OK)
		bail("could not connect: %s", PQerrorMessage(conn));
	plan(14);

	ws = fresh(argv[4], "ws");
	put(ws, "notes.md", 1000, 'n');
	put(ws, "big.bin", 300000, 'b');
	if (checkpoint_capture(ws, NULL, NULL, &full, err, sizeof(err)) < 0)
		bail("capture: %s", err);
	s1 = store(&full, 0, epoch, NULL, state);
	ok(s1 > 0, "full checkpoint stored (seq %lld)", s1);

	put(ws, "notes.md", 1200, 'N');
	put(ws, "new.txt", 10, 'x');
	if (checkpoint_capture(ws, full.manifest, NULL, &delta, err, sizeof(err)) < 0)
		bail("capture: %s", err);
	checkpoint_hash_hex(full.tree_hash, base_hex);
	is_int(store(&delta, s1, bad_epoch, base_hex, state), -1, "a stale epoch cannot add a checkpoint");
	is_str(state, "CN001", "it is fenced");
	is_int(store(&delta, s1, epoch, "00", state), -1, "a delta on an unknown base hash is refused");
	is_str(state, "CN004", "as invalid");
	s2 = store(&delta, s1, epoch, base_hex, state);
	ok(s2 > s1, "delta stored (seq %lld)", s2);

	n = fetch(chain, hashes, 8);
	is_int(n, 2, "the chain has the full checkpoint and the delta");
	r1 = fresh(argv[4], "r1");
	ok(n == 2 && checkpoint_restore(r1, chain, n, delta.tree_hash, NULL, &m, err, sizeof(err)) == 0,
	   "the chain from the store restores to the captured tree");
	if (*err)
		diag("%s", err);
	ok(m && !memcmp(checkpoint_manifest_tree_hash(m), delta.tree_hash, CHECKPOINT_HASH_LEN),
	   "restored manifest has the delta's tree hash");
	checkpoint_manifest_free(m);
	m = NULL;

	/* a corrupt newest blob: fall back to the full one */
	((uint8_t *)chain[1].data)[chain[1].len - 5] ^= 0x20;
	r2 = fresh(argv[4], "r2");
	ok(checkpoint_restore_newest(r2, chain, n, NULL, &used, &m, err, sizeof(err)) == 0 && used == 1,
	   "a corrupt delta falls back to the checkpoint before it");
	ok(m && !memcmp(checkpoint_manifest_tree_hash(m), full.tree_hash, CHECKPOINT_HASH_LEN),
	   "and yields the full checkpoint's tree");
	checkpoint_manifest_free(m);
	m = NULL;
	((uint8_t *)chain[1].data)[chain[1].len - 5] ^= 0x20;

	/* compaction: a new full checkpoint starts the chain */
	ok(checkpoint_compact(chain, n, argv[4], NULL, &compact, err, sizeof(err)) == 0 &&
	   (s3 = store(&compact, 0, epoch, NULL, state)) > s2, "compacted chain stored as a full checkpoint");
	drop(chain, n);
	n = fetch(chain, hashes, 8);
	is_int(n, 1, "the chain now starts at the compacted checkpoint");
	r3 = fresh(argv[4], "r3");
	ok(n == 1 && checkpoint_restore(r3, chain, n, delta.tree_hash, NULL, NULL, err, sizeof(err)) == 0,
	   "and restores the same tree");
	drop(chain, n);

	checkpoint_result_release(&full);
	checkpoint_result_release(&delta);
	checkpoint_result_release(&compact);
	free(ws);
	free(r1);
	free(r2);
	free(r3);
	PQfinish(conn);
	return exit_status();
}
