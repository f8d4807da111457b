/* Stop strings over streamed text (SERVING.md §2 rule 2, §9 "Detokenization").
 *
 * Why it is built this way: a stop string can straddle token boundaries, and text that may turn
 * out to be the start of a stop string must not reach the client before we know.  So the
 * matcher keeps a pending buffer: each push appends the newly decoded text, reports the first
 * complete match (the text before it is released, the match itself never is), and otherwise
 * releases everything except the longest pending suffix that is a proper prefix of some stop
 * string.  Held-back text always starts at the first byte of a stop string, so released text
 * never ends inside a UTF-8 character that a stop string begins with. */
#ifndef DS_ENGINE_STOP_MATCH_H
#define DS_ENGINE_STOP_MATCH_H
#include "base/common.h"
#include "engine/textbuf.h"

typedef struct ds_stop_matcher {
    int n;
    const char *const *stops;   /* borrowed; must outlive the matcher */
    size_t *lens;
    ds_tbuf pending;
    bool stopped;
    bool keep_match;            /* include_stop_str_in_output: the matched stop string is released too */
} ds_stop_matcher;

void ds_stop_init(ds_stop_matcher *m, const char *const *stops, int n);
void ds_stop_free(ds_stop_matcher *m);
/* Append text; releasable text is appended to `out`.  Returns 1 when a stop string completed
 * (later pushes are ignored), else 0. */
int ds_stop_push(ds_stop_matcher *m, const char *text, size_t len, ds_tbuf *out);
/* End of generation without a match: release what was held back. */
void ds_stop_flush(ds_stop_matcher *m, ds_tbuf *out);

#endif
