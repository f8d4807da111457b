/* The session every probe and gate opens against a server (TOOLS.md §0): port hygiene (health,
 * model list, instance id recorded at the start and re-checked at the end), JSON requests with
 * parsed answers, background streaming requests that can be cancelled (kv-walk's occupier,
 * determinism's background traffic), a bounded parallel loop, and the result envelope written
 * atomically.
 *
 * Why one session type: needle, kv-walk and the five gates must all apply the same §0 rules, and a
 * run whose server restarted in the middle must be invalid in every one of them.  The HTTP layer
 * itself is tools/http_client.h; this file adds only what the probes share on top of it. */
#ifndef DS_TOOLS_PROBE_CLIENT_H
#define DS_TOOLS_PROBE_CLIENT_H
#include "base/common.h"
#include "tools/http_client.h"
#include <cjson/cJSON.h>
#include <pthread.h>

typedef struct ds_probe {
    ds_http_client http;
    int cancel;
    const char *tool;          /* "needle" */
    char model[256];           /* the served id used in requests */
    double timeout_s;          /* per request */
    cJSON *server_info;        /* /server_info snapshot (owned) */
    char instance_id[128];
    char started_utc[32];
    char *command;             /* the command line, space-joined */
    int64_t max_model_len;     /* from /tokenize, 0 until known */
} ds_probe;

/* Connect and check port hygiene.  Returns 0, or the exit status with a message on stderr:
 * 2 bad URL, 3 the server cannot be reached or /health is not ok, 1 `model` is not listed. */
int ds_probe_open(ds_probe *p, const char *tool, const char *base_url, const char *api_key, const char *model,
                  double timeout_s, int argc, char **argv);
/* End-of-run check: 0, or 1 when the instance id changed or the server is gone (message printed). */
int ds_probe_recheck(ds_probe *p);
void ds_probe_close(ds_probe *p);

/* POST `body` to `path`; returns the parsed answer of a 200, else NULL with `err` (HTTP status and
 * the server's error message, or the transport failure). */
cJSON *ds_probe_post(ds_probe *p, const char *path, const cJSON *body, char *err, size_t err_len);

/* /tokenize of a prompt (text) or of chat messages (+ tools, reasoning_effort; NULL = absent).
 * Returns the count (ids/text copied out when asked; caller frees), or -1 with err. */
int64_t ds_probe_tokenize_prompt(ds_probe *p, const char *prompt, int32_t **ids, char *err, size_t err_len);
int64_t ds_probe_tokenize_chat(ds_probe *p, const cJSON *messages, const cJSON *tools, const char *effort,
                               char **text, char *err, size_t err_len);

/* /tokenize with a caller-built body (taken over and freed). */
int64_t ds_probe_tokenize_raw(ds_probe *p, cJSON *body, int32_t **ids, char **text, char *err, size_t err_len);

/* A streaming request in its own thread: started by ds_probe_stream_start, `first` set when its
 * first event arrived, stopped (cancelled and joined) by ds_probe_stream_stop. */
typedef struct ds_probe_stream {
    ds_probe *p;
    ds_http_client http;       /* a copy of the session's client with its own cancel flag */
    int cancel;
    char *path, *body;
    pthread_t th;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool first, done, failed;
    long status;
    char error[320];
    int64_t events;
} ds_probe_stream;
int ds_probe_stream_start(ds_probe_stream *s, ds_probe *p, const char *path, const cJSON *body);
/* Wait until the first event (0), the stream ended (-1) or timeout_s passed (-1). */
int ds_probe_stream_wait_first(ds_probe_stream *s, double timeout_s);
void ds_probe_stream_stop(ds_probe_stream *s);

/* Run fn(ctx, i) for i in [0, n) on `conc` threads, items taken in order. */
void ds_probe_parallel(int64_t n, int conc, void (*fn)(void *ctx, int64_t i), void *ctx);

/* {schema, tool_version, started_utc, command, base_url, model, server}; caller adds the rest. */
cJSON *ds_probe_envelope(const ds_probe *p, const char *schema);
/* Write j to path through a temporary name.  0, or 3 with a message. */
int ds_probe_write_json(const char *path, const cJSON *j);
int ds_probe_write_text(const char *path, const char *text);

/* Chat answer fields (pointers into the cJSON answer, NULL when absent). */
typedef struct ds_chat_answer {
    const char *content, *reasoning, *finish_reason;
    const cJSON *tool_calls;   /* the message's array, or NULL */
    int64_t completion_tokens;
} ds_chat_answer;
void ds_probe_chat_answer(const cJSON *resp, ds_chat_answer *a);
/* Chat transcript pieces the long-context probes share: one {role, content} message, and the
 * assistant turn that calls read("README.md") followed by the tool result `doc`. */
void ds_probe_add_message(cJSON *messages, const char *role, const char *content);
void ds_probe_add_readme_read(cJSON *messages, const char *doc);

/* "2026-12-01T21:00:00Z" for now */
void ds_probe_utc(char *buf, size_t n);

#endif
