/* Fuzz target: PARTS.sha256, the manifest `reassemble` trusts for part names and hashes.  An
 * accepted manifest must survive a round trip: its canonical text parses again to the same text. */
#include "fuzz.h"
#include "tools/parts_manifest.h"
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char *text = fuzz_cstr(data, size);
    ds_parts_manifest m = {0};
    ds_error err = {0};
    if (ds_parts_parse(text, "PARTS.sha256", &m, &err) == 0) {
        char *canon = ds_parts_format(&m);
        ds_parts_manifest m2 = {0};
        if (ds_parts_parse(canon, "PARTS.sha256", &m2, &err) != 0) abort();
        char *canon2 = ds_parts_format(&m2);
        if (strcmp(canon, canon2)) abort();
        free(canon2);
        free(canon);
        ds_parts_free(&m2);
    } else if (!err.msg[0]) {
        abort();
    }
    ds_parts_free(&m);
    free(text);
    return 0;
}
