/* fuzz-workflow: libFuzzer harness for the workflow model. Parses the
 * bytes as JSON, normalizes them, and on success normalizes once more as a
 * run's added steps. Not part of the default build:
 *
 *   clang -g -O1 -fsanitize=fuzzer,address,undefined -Iengine \
 *     tests/fuzz/fuzz-workflow.c engine/workflow.c engine/util.c \
 *     -ljansson -lm -o fuzz-workflow
 *   ./fuzz-workflow -max_total_time=60 -max_len=8192 examples/
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "workflow.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	json_t *def = NULL, *out = NULL, *errors = NULL, *added = NULL;
	char err[256];

	if (workflow_load_buffer((const char *)data, size, "fuzz", &def, err, sizeof(err)) < 0)
		return 0;
	if (workflow_normalize(def, &out, &errors) == 0) {
		if (errors)
			abort();
		/* The definition's own steps, added again, must clash by id. */
		if (workflow_normalize_steps(out, json_object_get(def, "steps"), &added, &errors) == 0)
			abort();
		json_decref(added);
	} else {
		char *s;

		if (out || !json_array_size(errors))
			abort();
		s = workflow_errors_string(errors);
		free(s);
	}
	json_decref(errors);
	json_decref(out);
	json_decref(def);
	return 0;
}
