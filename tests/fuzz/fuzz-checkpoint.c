/* fuzz-checkpoint: libFuzzer harness for the checkpoint blob reader.
 *
 * Not built by default. From the top of the source tree:
 *   clang -g -O1 -fsanitize=fuzzer,address,undefined \
 *     -Iengine -Iworker tests/fuzz/fuzz-checkpoint.c worker/checkpoint.c \
 *     engine/util.c engine/log.c -llz4 -lcrypto -ljansson -lpthread \
 *     -o fuzz-checkpoint
 *   mkdir -p /tmp/ckfuzz && ./fuzz-checkpoint -max_total_time=60 /tmp/ckfuzz
 *
 * An input whose first byte is odd is taken as a record stream and wrapped
 * in a valid header and LZ4 frame (so the fuzzer reaches the record parser
 * past the checksums); otherwise it is restored as a whole blob. Either
 * way it is restored into a private directory with small caps, which is
 * then emptied; anything written outside it would be a bug. */
#include "checkpoint.h"

#include <lz4frame.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char dir[64];

static unsigned char *wrap(const uint8_t *rec, size_t n, size_t *len)
{
	LZ4F_preferences_t prefs;
	size_t cap;
	unsigned char *b, check[32];
	unsigned int l;

	memset(&prefs, 0, sizeof(prefs));
	prefs.frameInfo.contentChecksumFlag = LZ4F_contentChecksumEnabled;
	prefs.frameInfo.blockChecksumFlag = LZ4F_blockChecksumEnabled;
	cap = LZ4F_compressFrameBound(n, &prefs) + 112;
	b = calloc(1, cap);
	memcpy(b, "CAIRNCKP", 8);
	b[8] = 1;
	b[13] = 1;		/* block size 65536 */
	for (int i = 0; i < 4; i++) {
		b[16 + i] = n >> (8 * i);
		b[108 + i] = n >> (8 * i);
	}
	b[24] = 1;		/* one frame */
	if (n >= 40 && rec[n - 40] == 5) {
		/* take entries and tree hash from the end record */
		memcpy(b + 28, rec + n - 36, 4);
		memcpy(b + 32, rec + n - 32, 32);
	}
	size_t z = LZ4F_compressFrame(b + 112, cap - 112, rec, n, &prefs);
	for (int i = 0; i < 4; i++)
		b[104 + i] = z >> (8 * i);
	EVP_Digest(b, 96, check, &l, EVP_sha256(), NULL);
	memcpy(b + 96, check, 4);
	*len = 112 + z;
	return b;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct checkpoint_options o;
	struct checkpoint_manifest *m = NULL;
	struct checkpoint_info info;
	struct checkpoint_blob b;
	unsigned char *owned = NULL;
	char err[512];

	if (!*dir) {
		snprintf(dir, sizeof(dir), "/tmp/cn-fuzz-ckpt.%d", (int)getpid());
		if (mkdir(dir, 0700) < 0)
			abort();
	}
	if (!size || size > (1 << 20))
		return 0;
	checkpoint_options_init(&o);
	o.threads = 1;
	o.restat = false;
	o.max_total_size = 1 << 20;
	o.max_entries = 256;
	o.max_path = 255;
	o.verify_data = data[0] & 2;
	if (data[0] & 1) {
		size_t len;

		owned = wrap(data + 1, size - 1, &len);
		b = (struct checkpoint_blob){ owned, len, NULL };
	} else {
		b = (struct checkpoint_blob){ data + 1, size - 1, NULL };
	}
	(void)checkpoint_blob_info(b.data, b.len, &info, err, sizeof(err));
	if (checkpoint_restore(dir, &b, 1, NULL, &o, &m, err, sizeof(err)) == 0) {
		json_t *j = checkpoint_manifest_to_json(m);
		struct checkpoint_manifest *back = NULL;

		if (checkpoint_manifest_from_json(j, &o, &back, err, sizeof(err)) < 0)
			abort();	/* what restore accepted must round-trip */
		checkpoint_manifest_free(back);
		json_decref(j);
	}
	checkpoint_manifest_free(m);
	if (checkpoint_empty_dir(dir, err, sizeof(err)) < 0)
		abort();
	free(owned);
	return 0;
}
