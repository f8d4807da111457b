/* Fuzz target: config.json (either spelling: HF nested text_config or the flat inference file),
 * parsed and then validated exactly as the loader does.  A refusal must carry a message. */
#include "fuzz.h"
#include "io/config.h"
#include <stdlib.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char *text = fuzz_cstr(data, size);
    static ds_config cfg;   /* large: not on the stack */
    ds_error err = {0};
    int rc = ds_config_parse(text, "config.json", &cfg, &err);
    if (rc == 0) rc = ds_config_validate(&cfg, "config.json", &err);
    if (rc != 0 && !err.msg[0]) abort();
    if (rc == 0) free(ds_config_to_json(&cfg));   /* an accepted config must serialize */
    free(text);
    return 0;
}
