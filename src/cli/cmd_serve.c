/* dsflash serve: flags (SERVING.md §12), start-up self-checks (§13), the READY line, and the
 * engine + HTTP server until SIGINT/SIGTERM.
 *
 * Why it is built this way: every flag is a row of one table (base/flags.h: exact long names,
 * typed and range-checked values, refusal of what this build cannot do), so unknown, abbreviated
 * or malformed options fail with status 2 and every effective value — given or defaulted — is
 * echoed, written to serve_config.json and served at /server_info (PITFALLS A2).  Policy — the KV
 * memory budget and the sampler mask — is the engine's (engine/engine_setup.h); this file parses,
 * wires the parts together and echoes what they decided.  The HTTP listener starts first, so
 * /health answers 503 with the current phase while the checks run, and a taken port fails before
 * any expensive work.  With no model directory the server generates the tiny test checkpoint once
 * (through `dsflash mkmodel`, cached under $XDG_CACHE_HOME/dsflash or ~/.cache/dsflash, or
 * --model-cache) so the README's first command works on a fresh machine. */
#define _GNU_SOURCE
#include "cli/dist_cli.h"
#include "cli/load_flags.h"
#include "dist/dist.h"
#include "engine/backend_dist.h"
#include "cli/commands.h"
#include "dsflash.h"
#include "base/flags.h"
#include "base/fsutil.h"
#include "base/threadpool.h"
#include "engine/backend_model.h"
#include "engine/engine.h"
#include "engine/engine_setup.h"
#include "kernels/kernels.h"
#include "model/model.h"
#include "cli/serve_spec.h"
#include "tools/mkmodel.h"
#include "server/api.h"
#include "server/server.h"
#include "tokenizer/tokenizer.h"
#include <cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>


/* One row per flag.  A new flag is a new row here, then read by name below. */
static ds_flag k_flags[] = {
    {.name = "--model", .type = DS_FLAG_STRING, .help = "checkpoint directory (or MODEL_DIR)"},
    {.name = "--model-cache", .type = DS_FLAG_STRING, .help = "where the tiny checkpoint is generated without --model"},
    {.name = "--served-model-name", .type = DS_FLAG_STRING, .def = "deepseek-v41", .help = "NAME[,ALIAS...]"},
    {.name = "--host", .type = DS_FLAG_STRING, .def = "127.0.0.1"},
    {.name = "--port", .type = DS_FLAG_INT, .def = "8000", .lo = 0, .hi = 65535},
    {.name = "--api-key", .type = DS_FLAG_STRING, .help = "also read from DSFLASH_API_KEY"},
    {.name = "--max-model-len", .type = DS_FLAG_INT, .lo = 2, .hi = 1 << 30, .help = "default: the config's"},
    {.name = "--max-num-seqs", .type = DS_FLAG_INT, .def = "32", .lo = 1, .hi = 4096},
    {.name = "--max-num-batched-tokens", .type = DS_FLAG_INT, .def = "8192", .lo = 1, .hi = 1 << 22},
    {.name = "--block-size", .type = DS_FLAG_INT, .def = "128", .lo = 16, .hi = 256, .help = "a power of two"},
    {.name = "--memory-utilization", .type = DS_FLAG_DOUBLE, .def = "0.90", .dlo = 0, .dhi = 1, .lo_open = true,
     .help = "share of MemTotal planned for (the budget never exceeds MemAvailable)"},
    {.name = "--gpu-memory-utilization", .type = DS_FLAG_DOUBLE, .alias_of = "--memory-utilization"},
    {.name = "--kv-cache-memory", .type = DS_FLAG_SIZE, .help = "explicit KV budget"},
    {.name = "--kv-cache-memory-bytes", .type = DS_FLAG_SIZE, .alias_of = "--kv-cache-memory"},
    {.name = "--enable-prefix-caching", .type = DS_FLAG_SWITCH, .help = "on by default"},
    {.name = "--no-enable-prefix-caching", .type = DS_FLAG_SWITCH},
    {.name = "--num-speculative-tokens", .type = DS_FLAG_INT, .def = "5", .lo = 0, .hi = 5, .help = "drafts per verify step (0 = off)"},
    {.name = "--spec-tokens-per-batch-size", .type = DS_FLAG_STRING, .help = "schedule lo-hi:K,... over decoding requests"},
    {.name = "--spec-guard", .type = DS_FLAG_ENUM, .def = "on", .choices = "on|warn|off", .help = "acceptance-collapse guard"},
    {.name = "--spec-policy", .type = DS_FLAG_ENUM, .def = "measured", .choices = "measured|fixed",
     .help = "measured: time decode and speculative steps at start-up; drafting pauses for requests whose acceptance is "
             "below the break-even, and stays off where no acceptance can pay; fixed: the guard's 1.5 only"},
    {.name = "--admission-gate", .type = DS_FLAG_SWITCH, .help = "on by default"},
    {.name = "--no-admission-gate", .type = DS_FLAG_SWITCH},
    {.name = "--max-prefill-seqs", .type = DS_FLAG_INT, .def = "1", .lo = 1, .hi = 4096},
    {.name = "--gate-decode-steps-per-chunk", .type = DS_FLAG_INT, .def = "1", .lo = 1, .hi = 1024},
    {.name = "--threads", .type = DS_FLAG_INT, .def = "0", .lo = 0, .hi = 4096, .help = DS_THREADS_HELP},
    DS_NUMA_NODES_FLAG_ROW,
    {.name = "--http-threads", .type = DS_FLAG_INT, .def = "1088", .lo = 1, .hi = 65536,
     .help = "most simultaneous connections (one thread each)"},
    {.name = "--allowed-origins", .type = DS_FLAG_STRING, .def = "*",
     .help = "browser origins the answers admit (CORS): * (any, as vLLM), none, or a comma list such as "
             "https://chat.example,http://localhost:3000"},
    {.name = "--http-timeout", .type = DS_FLAG_INT, .def = "30", .lo = 1, .hi = 3600,
     .help = "seconds for a request's headers and body to arrive"},
    {.name = "--shutdown-timeout", .type = DS_FLAG_INT, .def = "30", .lo = 0, .hi = 3600,
     .help = "seconds running requests may finish after SIGTERM"},
    {.name = "--kernels", .type = DS_FLAG_ENUM, .def = "auto", .choices = "auto|avx512-vnni|avx2|reference"},
    {.name = "--numerics", .type = DS_FLAG_ENUM, .def = "fast", .choices = "exact|fast",
     .help = "exact: bit-identical to the reference; fast: fp32 blocked reductions"},
    {.name = "--activations", .type = DS_FLAG_ENUM, .def = "int8", .choices = "int8|e4m3",
     .help = "official FP8/MXFP4 layout: e4m3 = the official runtime's E4M3-per-32 activations"},
    DS_ENGRAM_RESIDENCY_FLAG_ROW,
    {.name = "--limit-mm-per-prompt", .type = DS_FLAG_STRING, .def = "image=0", .refuse = "this build has no vision tower"},
    {.name = "--default-chat-template-kwargs", .type = DS_FLAG_STRING, .def = "{\"enable_thinking\":false}",
     .help = "JSON object"},
    {.name = "--tokenizer-mode", .type = DS_FLAG_STRING, .def = "deepseek_v41", .refuse = "deepseek_v4 mishandled tools"},
    {.name = "--reasoning-parser", .type = DS_FLAG_STRING, .def = "deepseek_v41", .refuse = "deepseek_v4 mishandled tools"},
    {.name = "--tool-call-parser", .type = DS_FLAG_STRING, .def = "deepseek_v41", .refuse = "deepseek_v4 mishandled tools"},
    {.name = "--sampler-mask-ids", .type = DS_FLAG_STRING, .def = DS_DEFAULT_SENTINEL_IDS,
     .help = "multimodal sentinel ids never sampled: ranges a-b or ids, comma-separated, or none (chat-control tokens stay spared)"},
    {.name = "--max-pending-requests", .type = DS_FLAG_INT, .def = "1024", .lo = 1, .hi = 1 << 20},
    {.name = "--max-request-body", .type = DS_FLAG_SIZE, .def = "128MiB"},
    DS_DIST_FLAG_ROWS,
    {.name = "--enable-dev-endpoints", .type = DS_FLAG_SWITCH, .help = "POST /reset_prefix_cache"},
    {.name = "--log-requests", .type = DS_FLAG_SWITCH},
    {.name = "--max-log-len", .type = DS_FLAG_INT, .def = "256", .lo = 0, .hi = 1 << 20},
    {.name = "--log-file", .type = DS_FLAG_STRING, .help = "default: stderr"},
    {.name = "--debug-kv-alloc-order", .type = DS_FLAG_ENUM, .def = "low-first", .choices = "low-first|high-first",
     .help = "debug only: high-first hands out KV pages from the top of the pool (64-bit offset tests)"},
    {.name = "--debug-kv-fault-page", .type = DS_FLAG_INT, .def = "-1", .lo = -1, .hi = INT32_MAX - 1,
     .help = "debug only: corrupt CKV page N after every step (proves kv-walk detects KV faults); -1 off"},
    {.name = "--self-check", .type = DS_FLAG_ENUM, .def = "full", .choices = "full|quick",
     .help = "quick skips the prefill probe; self-checks cannot be turned off"},
};

static ds_flagset g_fs = {.cmd = "dsflash serve",
                          .usage = "usage: dsflash serve [MODEL_DIR] [--model DIR] [--port N] [--host ADDR] [--api-key KEY] ...",
                          .flags = k_flags, .n = DS_ARRAY_LEN(k_flags), .max_positional = 1,
                          .positional_name = "MODEL_DIR"};

static const char *fv(const char *name) { return ds_flag_str(&g_fs, name); }
static int64_t fi(const char *name) { return ds_flag_int(&g_fs, name); }
static bool on(const char *name) { return ds_flag_on(&g_fs, name); }

/* --log-file: stderr goes through a pipe to a thread that writes every line to the file and,
 * until READY, also to the original stderr (so no start-up line is lost, PITFALLS 49). */
static int g_log_fd = -1, g_orig_stderr = -1;
static atomic_bool g_after_ready;
static void *tee_main(void *arg) {
    int rfd = (int)(intptr_t)arg;
    char buf[4096];
    ssize_t n;
    while ((n = read(rfd, buf, sizeof buf)) > 0) {
        if (write(g_log_fd, buf, (size_t)n) < 0) { /* the log file is best effort once open */ }
        if (!atomic_load(&g_after_ready) && write(g_orig_stderr, buf, (size_t)n) < 0) { }
    }
    return NULL;
}
static int start_log_tee(const char *path) {
    g_log_fd = open(path, O_WRONLY | O_CREAT | O_APPEND, 0644);
    int p[2];
    if (g_log_fd < 0 || pipe(p)) return -1;
    g_orig_stderr = dup(2);
    dup2(p[1], 2);
    close(p[1]);
    setvbuf(stderr, NULL, _IOLBF, 0);
    pthread_t th;
    if (pthread_create(&th, NULL, tee_main, (void *)(intptr_t)p[0])) return -1;
    pthread_detach(th);
    return 0;
}

/* SIGINT/SIGTERM: a signal sent to the process runs its handler on any thread that does not block
 * it (HTTP, engine, pool, log tee), so the handler also writes a byte to a pipe that the main thread
 * waits on: a flag alone left the main thread in pause() whenever another thread took the signal,
 * and the server never drained. */
static volatile sig_atomic_t g_stop;
static int g_stop_pipe[2] = {-1, -1};
static void on_signal(int sig) {
    g_stop = 1;
    const char byte = 1;
    ssize_t w = write(g_stop_pipe[1], &byte, 1);   /* async-signal-safe; a full pipe already wakes */
    (void)w;
}

static int install_stop_signals(void) {
    if (pipe(g_stop_pipe) != 0) return -1;
    for (int i = 0; i < 2; i++) fcntl(g_stop_pipe[i], F_SETFD, FD_CLOEXEC);
    fcntl(g_stop_pipe[1], F_SETFL, O_NONBLOCK);
    struct sigaction sa = {.sa_handler = on_signal};
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;
    return sigaction(SIGINT, &sa, NULL) || sigaction(SIGTERM, &sa, NULL) ? -1 : 0;
}

static void wait_for_stop(void) {
    char byte;
    while (!g_stop)
        if (read(g_stop_pipe[0], &byte, 1) < 0 && errno != EINTR) break;
}

/* The tiny checkpoint, generated once through `dsflash mkmodel` into a cache directory. */
static int ensure_default_model(const char *model_cache, char *out, size_t outlen) {
    char base[PATH_MAX];
    const char *mc = model_cache, *xdg = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
    if (mc) snprintf(base, sizeof base, "%s", mc);
    else if (xdg && xdg[0]) snprintf(base, sizeof base, "%s/dsflash", xdg);
    else snprintf(base, sizeof base, "%s/.cache/dsflash", home ? home : ".");
    snprintf(out, outlen, "%s/tiny-r%d", base, DS_MKMODEL_REVISION); /* a stale generation is never reused */
    char cfg[PATH_MAX + 16];
    snprintf(cfg, sizeof cfg, "%s/config.json", out);
    if (ds_file_exists(cfg)) {
        fprintf(stderr, "[serve] no --model given: serving the cached tiny checkpoint %s\n", out);
        return 0;
    }
    ds_error err;
    if (ds_mkdir_p(base, &err)) {
        fprintf(stderr, "dsflash serve: %s\n", err.msg);
        return 3;
    }
    char tmp[PATH_MAX + 32];
    snprintf(tmp, sizeof tmp, "%s.tmp.%d", out, (int)getpid());
    fprintf(stderr, "[serve] no --model given: generating the tiny checkpoint into %s (once)\n", out);
    pid_t pid = fork();
    if (pid == 0) {
        char self[PATH_MAX];
        ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
        if (n <= 0) _exit(127);
        self[n] = 0;
        execl(self, self, "mkmodel", "--config", "tiny", "--out", tmp, (char *)NULL);
        _exit(127);
    }
    int st = 0;
    if (pid < 0 || waitpid(pid, &st, 0) < 0 || !WIFEXITED(st) || WEXITSTATUS(st) != 0) {
        fprintf(stderr, "dsflash serve: generating the tiny checkpoint failed (dsflash mkmodel --config tiny --out %s "
                        "exited %d); pass --model DIR\n", tmp, WIFEXITED(st) ? WEXITSTATUS(st) : -1);
        return 5;
    }
    if (rename(tmp, out) && !ds_file_exists(cfg)) {
        fprintf(stderr, "dsflash serve: cannot rename %s to %s: %s\n", tmp, out, strerror(errno));
        return 3;
    }
    return 0;
}

static int selfcheck_tokenizer(const ds_tokenizer *tok, const ds_token_mask *mask, int vocab) {
    for (int i = 0; i < ds_n_control_tokens; i++) {
        int32_t id = ds_tokenizer_token_id(tok, ds_control_tokens[i]);
        if (id < 0 || id >= vocab) {
            fprintf(stderr, "[selfcheck] tokenizer: FAIL control token %s does not resolve to an id < %d\n", ds_control_tokens[i], vocab);
            return -1;
        }
        /* BOS is encoded, never generated: it must be masked; every other control token must not */
        const bool bos = i == DS_CONTROL_BOS;
        if (mask->masked[id] != bos) {
            fprintf(stderr, "[selfcheck] tokenizer: FAIL control token %s (id %d) is %s the sampler mask\n", ds_control_tokens[i], id,
                    bos ? "not in" : "in");
            return -1;
        }
    }
    const char *torture = "héllo wörld ✓ 𝔘𝔫𝔦𝔠𝔬𝔡𝔢 日本語 \t\n <｜User｜> end";
    ds_tokens t = {0};
    ds_error e;
    if (ds_tokenizer_encode(tok, torture, strlen(torture), true, &t, &e)) {
        fprintf(stderr, "[selfcheck] tokenizer: FAIL encode: %s\n", e.msg);
        return -1;
    }
    char *back = ds_tokenizer_decode(tok, t.ids, t.n, false, NULL, &e);
    int ok = back && !strcmp(back, torture);
    fprintf(stderr, "[selfcheck] tokenizer: %s (control tokens resolve and are spared by the mask, BOS masked; UTF-8 round trip of %zu tokens)\n",
            ok ? "OK" : "FAIL", t.n);
    free(back);
    ds_tokens_free(&t);
    return ok ? 0 : -1;
}

/* Warm-up probe through the engine: a greedy generation (and a timed prefill). */
static int selfcheck_probe(ds_engine *e, int64_t prompt_len, int vocab, const char *what, const char *model_dir) {
    int32_t *p = ds_xmalloc(sizeof(int32_t) * (size_t)prompt_len);
    for (int64_t i = 0; i < prompt_len; i++) p[i] = (int32_t)(3 + (i * 7919) % (vocab > 300 ? 250 : vocab - 4));
    ds_sampling_params sp;
    ds_sampling_defaults(&sp);
    sp.temperature = 0;
    sp.max_tokens = 8;
    sp.ignore_eos = true;
    ds_req *r = ds_req_new("selfcheck", p, prompt_len, &sp);
    r->want_text = false;
    r->exclude_metrics = true;
    ds_sampling_free(&sp);
    free(p);
    double t0 = ds_now();
    int rc = ds_engine_submit(e, r);
    if (!rc) {
        pthread_mutex_lock(&r->mu);
        while (!r->finished) ds_req_wait_locked(r, r->version, 0.5);
        pthread_mutex_unlock(&r->mu);
    }
    double ttft = r->t_first_token > 0 ? r->t_first_token - r->t_arrival : 0;
    bool ok = !rc && r->end == DS_END_LENGTH && r->n_out == 8;
    fprintf(stderr, "[selfcheck] %s: %s (prompt %lld tokens, TTFT %.3f s, prefill %.0f tok/s, 8 greedy tokens in %.3f s)\n",
            what, ok ? "OK" : "FAIL", (long long)prompt_len, ttft, ttft > 0 ? (double)prompt_len / ttft : 0.0, ds_now() - t0);
    if (!ok && r->end == DS_END_ERROR)
        fprintf(stderr, "[selfcheck] %s: the request failed: %s; non-finite values in the weights are the usual cause: "
                        "`dsflash verify %s --deep` names the file, tensor and element\n", what, r->err_msg, model_dir);
    ds_req_unref(r);
    return ok ? 0 : -1;
}

/* Everything one serve run holds, so the phases below stay short functions. */
typedef struct serve_run {
    const char *api_key;
    bool prefix, gate, default_thinking;
    char log_dir[PATH_MAX];
    char model_dir[PATH_MAX];
    char *names_buf;
    const char *names[16];
    int n_names;
    ds_tokenizer *tok;
    ds_metrics metrics;
    ds_server *srv;
    ds_model *model;
    ds_backend *be;
    ds_token_mask mask;
    ds_int_range sentinels[64];   /* --sampler-mask-ids */
    int n_sentinels;
    ds_engine *eng;
    ds_mem_plan mem;
    serve_spec spec;           /* speculative decoding decisions (serve_spec.c) */
    cJSON *echo;
    char *echo_s;
} serve_run;

/* Rules that involve more than one flag, or a value's content beyond its type. */
static int check_rules(serve_run *s) {
    int64_t bs = fi("--block-size");
    if (bs & (bs - 1)) return ds_flags_fail(&g_fs, "--block-size", "expected a power of two in [16, 256], got '%s'", fv("--block-size"));
    if (on("--enable-prefix-caching") && on("--no-enable-prefix-caching"))
        return ds_flags_fail(&g_fs, "--no-enable-prefix-caching", "conflicts with --enable-prefix-caching");
    if (on("--admission-gate") && on("--no-admission-gate"))
        return ds_flags_fail(&g_fs, "--no-admission-gate", "conflicts with --admission-gate");
    if (fi("--max-num-batched-tokens") < bs)
        return ds_flags_fail(&g_fs, "--max-num-batched-tokens", "expected at least --block-size %lld, got '%s'", (long long)bs,
                             fv("--max-num-batched-tokens"));
    char why[256];
    s->n_sentinels = ds_parse_int_ranges(fv("--sampler-mask-ids"), 0, INT32_MAX, s->sentinels,
                                         (int)DS_ARRAY_LEN(s->sentinels), why, sizeof why);
    if (s->n_sentinels < 0) return ds_flags_fail(&g_fs, "--sampler-mask-ids", "%s", why);
    s->prefix = !on("--no-enable-prefix-caching");
    s->gate = !on("--no-admission-gate");
    cJSON *kwargs = cJSON_Parse(fv("--default-chat-template-kwargs"));
    if (!kwargs || !cJSON_IsObject(kwargs)) {
        cJSON_Delete(kwargs);
        return ds_flags_fail(&g_fs, "--default-chat-template-kwargs", "expected a JSON object, got '%s'",
                             fv("--default-chat-template-kwargs"));
    }
    const cJSON *et = cJSON_GetObjectItemCaseSensitive(kwargs, "enable_thinking");
    if (!et) et = cJSON_GetObjectItemCaseSensitive(kwargs, "thinking");
    s->default_thinking = et && cJSON_IsTrue(et);
    cJSON_Delete(kwargs);
    s->api_key = fv("--api-key") ? fv("--api-key") : getenv("DSFLASH_API_KEY");
    if (ds_cors_check_origins(fv("--allowed-origins"), why, sizeof why)) return ds_flags_fail(&g_fs, "--allowed-origins", "%s", why);
    s->names_buf = ds_xstrdup(fv("--served-model-name"));
    for (char *sv, *t = strtok_r(s->names_buf, ",", &sv); t && s->n_names < 16; t = strtok_r(NULL, ",", &sv))
        s->names[s->n_names++] = t;
    if (!s->n_names) return ds_flags_fail(&g_fs, "--served-model-name", "expected at least one name, got '%s'", fv("--served-model-name"));
    ds_error se = {0};
    if (serve_spec_parse(&s->spec, fv("--num-speculative-tokens"), ds_flag_given(&g_fs, "--num-speculative-tokens"),
                         fv("--spec-tokens-per-batch-size"), fv("--spec-guard"), fv("--spec-policy"), &se))
        return ds_flags_fail(&g_fs, "--num-speculative-tokens", "%s", se.msg);
    if (fv("--spec-tokens-per-batch-size")) {
        /* the schedule's syntax and coverage are checked now, before any work (the engine parses it again) */
        ds_engine_config probe = {.spec_tokens = (int)fi("--num-speculative-tokens"), .max_num_seqs = (int)fi("--max-num-seqs")};
        if (ds_spec_schedule_parse(&probe, fv("--spec-tokens-per-batch-size"), &se) < 0) {
            fprintf(stderr, "dsflash serve: %s\n", se.msg);
            return 2;
        }
    }
    return 0;
}

/* The log directory exists before the first line (PITFALLS 49). */
static int open_log(serve_run *s) {
    const char *log_file = fv("--log-file");
    snprintf(s->log_dir, sizeof s->log_dir, ".");
    if (!log_file) return 0;
    snprintf(s->log_dir, sizeof s->log_dir, "%s", log_file);
    char *slash = strrchr(s->log_dir, '/');
    if (slash) *slash = 0;
    else snprintf(s->log_dir, sizeof s->log_dir, ".");
    ds_error e;
    if (ds_mkdir_p(s->log_dir, &e)) {
        fprintf(stderr, "dsflash serve: --log-file %s: %s\n", log_file, e.msg);
        return 3;
    }
    if (start_log_tee(log_file)) {
        fprintf(stderr, "dsflash serve: --log-file %s: cannot open: %s\n", log_file, strerror(errno));
        return 3;
    }
    return 0;
}

/* Tokenizer, then the listener, so /health reports the phase while the model loads. */
static int start_listener(serve_run *s) {
    const char *md = fv("--model") ? fv("--model") : g_fs.n_positional ? g_fs.positional[0] : NULL;
    if (md) snprintf(s->model_dir, sizeof s->model_dir, "%s", md);
    else {
        int rc = ensure_default_model(fv("--model-cache"), s->model_dir, sizeof s->model_dir);
        if (rc) return rc;
    }
    char *tok_path = ds_path_join(s->model_dir, "tokenizer.json");
    ds_error e = {0};
    int rc = 0;
    if (!ds_file_exists(tok_path)) {
        fprintf(stderr, "dsflash serve: %s: missing (the model directory needs its tokenizer)\n", tok_path);
        rc = 5;
    } else if (ds_tokenizer_load(tok_path, &s->tok, &e)) {
        fprintf(stderr, "[selfcheck] tokenizer: FAIL %s\n", e.msg);
        rc = 1;
    }
    free(tok_path);
    if (rc) return rc;
    ds_server_config sc = {.host = fv("--host"), .port = (int)fi("--port"), .api_key = s->api_key, .names = s->names,
                           .n_names = s->n_names, .root = s->model_dir, .max_model_len = 0,
                           .max_body = (uint64_t)fi("--max-request-body"), .http_threads = (int)fi("--http-threads"),
                           .max_connections = (int)fi("--max-pending-requests") + 64,
                           .http_timeout_s = (double)fi("--http-timeout"), .dev_endpoints = on("--enable-dev-endpoints"),
                           .default_thinking = s->default_thinking, .limit_images = 0, .server_info_json = "{}",
                           .log_requests = on("--log-requests"), .max_log_len = (int)fi("--max-log-len"),
                           .allowed_origins = fv("--allowed-origins")};
    s->srv = ds_server_start(&sc, NULL, s->tok, &s->metrics, &e);
    if (!s->srv) {
        fprintf(stderr, "dsflash serve: %s\n", e.msg);
        return 3;
    }
    ds_server_set_phase(s->srv, "loading");
    return 0;
}

/* §13 steps 2-3: the checkpoint, then every kernel family against the scalar reference. */
static int load_model(serve_run *s) {
    ds_load_options lo = {.kernels = fv("--kernels"), .threads = (int)fi("--threads"), .full_validation = 0,
                          .max_model_len = fv("--max-model-len") ? fi("--max-model-len") : 0, .numerics = fv("--numerics"),
                          .activations = fv("--activations"), .draft = serve_spec_draft_option(&s->spec),
                          .engram_residency = fv("--engram-residency"), .numa_nodes = fv("--numa-nodes")};
    char eb[1024] = "";
    double t0 = ds_now();
    s->model = ds_model_load(s->model_dir, &lo, eb, sizeof eb);
    if (!s->model) {
        fprintf(stderr, "[selfcheck] checkpoint: FAIL %s\n", eb);
        return 1;
    }
    ds_server_set_phase(s->srv, "kv-setup");
    fprintf(stderr, "[selfcheck] checkpoint: OK %s (config validated, tensors bound, Engram constants checked; numerics %s, "
                    "activations %s) in %.2f s\n", s->model_dir, ds_model_numerics(s->model), ds_model_activations(s->model),
            ds_now() - t0);
    ds_kernel_check kc[8];
    int nk = 0;
    ds_error kerr;
    ds_error_clear(&kerr);
    int krc = ds_kernels_selfcheck(kc, &nk, &kerr);
    ds_kernel_check oc[3];   /* the official FP8/MXFP4 families */
    int no = 0;
    if (krc == 0) krc = ds_official_selfcheck(oc, &no, &kerr);
    fprintf(stderr, "[selfcheck] kernels: %s %s (requested %s; %s)\n", krc == 0 ? "OK" : "FAIL", ds_kernels_active(),
            fv("--kernels"), ds_kernels_reason());
    for (int i = 0; i < nk; i++) fprintf(stderr, "[selfcheck] %s\n", kc[i].line);
    for (int i = 0; i < no; i++) fprintf(stderr, "[selfcheck] %s\n", oc[i].line);
    if (krc != 0) {
        fprintf(stderr, "[selfcheck] kernels: FAIL %s\n", kerr.msg);
        return 1;
    }
    return 0;
}

static int32_t tokenizer_lookup(const void *tok, const char *literal) { return ds_tokenizer_token_id(tok, literal); }

/* §13 step 4: the tables' resident share.  Below 90% a lookup may wait for the disk (PITFALLS 14),
 * which is a warning, not a failure: the page cache fills as requests run. */
static void report_engram_residency(const ds_model *m) {
    enum { SAMPLES = 4096 };
    double share[DS_MAX_LIST];
    const int n = ds_engram_resident_share(m, SAMPLES, share);
    if (n < 0) {
        fprintf(stderr, "[selfcheck] engram residency: WARN mincore failed (%s); the resident share is unknown\n", strerror(errno));
        return;
    }
    char list[256] = "";
    double low = 1.0;
    for (int e = 0, k = 0; e < n; e++) {
        k += snprintf(list + k, sizeof list - (size_t)k, "%s%.1f%%", e ? ", " : "", 100.0 * share[e]);
        if (k >= (int)sizeof list) k = (int)sizeof list - 1;
        low = share[e] < low ? share[e] : low;
    }
    fprintf(stderr, "[selfcheck] engram residency: %s %s, resident share %s of %d random pages per table (mincore)%s\n",
            low < 0.9 ? "WARN" : "OK", fv("--engram-residency"), n ? list : "(no tables)", SAMPLES,
            low < 0.9 ? "; below 90%, lookups will wait for the disk until the page cache holds the tables (read the "
                        "table files once, or use --engram-residency huge-pages)" : "");
}

/* §4.4 budget and §9 mask (decided by the engine), then the engine and its KV self-test. */
static int build_engine(serve_run *s) {
    s->be = ds_backend_model_new(s->model);
    if (ds_dist_active()) s->be = ds_backend_dist_wrap(s->be);  /* the other ranks replay its calls */
    ds_mem_inputs mi = {.kv_explicit = fv("--kv-cache-memory") ? (uint64_t)fi("--kv-cache-memory") : 0,
                        .utilization = ds_flag_double(&g_fs, "--memory-utilization"),
                        .weights_mapped = ds_model_weights_mapped(s->model), .weights_packed = ds_model_weights_packed(s->model),
                        .max_num_batched_tokens = fi("--max-num-batched-tokens"), .max_num_seqs = fi("--max-num-seqs"),
                        .vocab = s->be->vocab, .dim = s->model->cfg.dim,
                        .nodes = s->model->numa.all ? NULL : s->model->numa.text,
                        .node_mem_total = s->model->numa.mem_total, .node_mem_free = s->model->numa.mem_free};
    ds_error e = {0};
    char line[1024];
    if (ds_mem_plan_compute(&mi, &s->mem, &e)) {
        fprintf(stderr, "[selfcheck] memory: FAIL %s\n", e.msg);
        return 1;
    }
    ds_mem_plan_line(&s->mem, fv("--engram-residency"), line, sizeof line);
    fprintf(stderr, "[selfcheck] memory: OK %s\n", line);
    report_engram_residency(s->model);
    ds_engine_sampler_mask(s->be, s->sentinels, s->n_sentinels, tokenizer_lookup, s->tok, &s->mask, line, sizeof line);
    fprintf(stderr, "[serve] %s\n", line);
    ds_engine_config ec;
    ds_engine_config_defaults(&ec);
    ec.max_num_seqs = (int)fi("--max-num-seqs");
    ec.max_num_batched_tokens = (int)fi("--max-num-batched-tokens");
    ec.block_size = (int)fi("--block-size");
    ec.prefix_caching = s->prefix;
    ec.admission_gate = s->gate;
    ec.max_prefill_seqs = (int)fi("--max-prefill-seqs");
    ec.gate_decode_steps_per_chunk = (int)fi("--gate-decode-steps-per-chunk");
    ec.max_model_len = s->model->max_len;
    ec.max_pending = (int)fi("--max-pending-requests");
    ec.kv_budget_bytes = s->mem.kv_bytes;
    ec.kv_high_first = !strcmp(fv("--debug-kv-alloc-order"), "high-first");
    ec.kv_fault = fi("--debug-kv-fault-page") >= 0;
    ec.kv_fault_page = ec.kv_fault ? (uint32_t)fi("--debug-kv-fault-page") : 0;
    char fingerprint[PATH_MAX + 64];
    snprintf(fingerprint, sizeof fingerprint, "%s|bs=%d|kv=bf16|numerics=%s|act=%s", s->model_dir, ec.block_size,
             ds_model_numerics(s->model), ds_model_activations(s->model));
    ec.fingerprint = fingerprint;
    if (serve_spec_configure(&s->spec, s->model, &ec, &e)) {
        fprintf(stderr, "[selfcheck] configuration: FAIL %s\n", e.msg);
        return 2;
    }
    ds_detok_ops dops = ds_server_detok_ops(s->tok);
    s->eng = ds_engine_create(&ec, s->be, &s->mask, &s->metrics, &dops, &e);
    if (!s->eng) {
        fprintf(stderr, "[selfcheck] kv: FAIL %s\n", e.msg);
        return 1;
    }
    char l1[256], l2[768], rep[512];
    ds_kv_budget_lines(ds_engine_kv_plan(s->eng), l1, sizeof l1, l2, sizeof l2);
    fprintf(stderr, "%s\n%s\n", l1, l2);
    int rc = ds_engine_kv_selftest(s->eng, rep, sizeof rep);
    fprintf(stderr, "%s\n", rep);
    return rc ? 1 : 0;
}

/* §13.1: every effective value, given or defaulted, and what the engine decided. */
static int echo_config(serve_run *s) {
    cJSON *echo = s->echo = cJSON_CreateObject();
    cJSON *fl = cJSON_AddObjectToObject(echo, "flags");
    for (size_t i = 0; i < g_fs.n; i++) {
        const char *v = k_flags[i].text;
        if (!strcmp(k_flags[i].name, "--api-key") && v) v = "(set)";
        if (v) cJSON_AddStringToObject(fl, k_flags[i].name + 2, v);
        else cJSON_AddNullToObject(fl, k_flags[i].name + 2);
    }
    int64_t max_seqs = fi("--max-num-seqs");
    cJSON_AddStringToObject(echo, "model_dir", s->model_dir);
    cJSON_AddNumberToObject(echo, "block_size", (double)fi("--block-size"));
    cJSON_AddNumberToObject(echo, "num_speculative_tokens", s->model->draft ? s->spec.S : 0);
    cJSON_AddStringToObject(echo, "speculation", s->spec.echo);
    cJSON_AddBoolToObject(echo, "admission_gate", s->gate);
    cJSON_AddBoolToObject(echo, "prefix_caching", s->prefix);
    cJSON_AddNumberToObject(echo, "max_num_seqs", (double)max_seqs);
    cJSON_AddNumberToObject(echo, "max_model_len", (double)s->model->max_len);
    cJSON_AddStringToObject(echo, "setting", (max_seqs <= 4 && !s->prefix) ? "performance" : "production");
    cJSON_AddStringToObject(echo, "kernels", ds_kernels_active());
    cJSON_AddStringToObject(echo, "numerics", ds_model_numerics(s->model));
    cJSON_AddStringToObject(echo, "activations", ds_model_activations(s->model));
    cJSON_AddStringToObject(echo, "engram_residency", fv("--engram-residency"));
    cJSON_AddNumberToObject(echo, "threads", (double)ds_pool_threads());   /* --threads 0 resolved */
    cJSON_AddStringToObject(echo, "numa_nodes", s->model->numa.text);
    cJSON_AddBoolToObject(echo, "threads_pinned", !s->model->numa.all);
    cJSON_AddStringToObject(echo, "reduce_mode", fv("--reduce-mode"));
    cJSON_AddNumberToObject(echo, "kv_budget_bytes", (double)s->mem.kv_bytes);
    cJSON_AddStringToObject(echo, "kv_budget_source", s->mem.kv_explicit ? "--kv-cache-memory" : "min(share of MemTotal, MemAvailable)");
    cJSON_AddNumberToObject(echo, "mem_total_bytes", (double)s->mem.mem_total);
    cJSON_AddNumberToObject(echo, "mem_available_bytes", (double)s->mem.mem_available);
    cJSON_AddNumberToObject(echo, "kv_capacity_tokens", (double)ds_engine_kv_plan(s->eng)->capacity_tokens);
    cJSON_AddNumberToObject(echo, "weights_bytes", (double)(s->mem.weights_mapped + s->mem.weights_packed));
    cJSON_AddNumberToObject(echo, "weights_mapped_bytes", (double)s->mem.weights_mapped);
    cJSON_AddNumberToObject(echo, "activation_reservation_bytes", (double)s->mem.activations);
    cJSON_AddNumberToObject(echo, "pid", (double)getpid());
    cJSON_AddNumberToObject(echo, "start_time", (double)time(NULL));
    cJSON_AddStringToObject(echo, "version", "dsflash " DSFLASH_VERSION);
    s->echo_s = cJSON_PrintUnformatted(echo);
    fprintf(stderr, "[selfcheck] configuration: OK %s\n", s->echo_s);
    char *cfg_path = ds_path_join(s->log_dir, "serve_config.json");
    ds_error e;
    if (fv("--log-file") && ds_write_file_atomic(cfg_path, s->echo_s, strlen(s->echo_s), &e))
        fprintf(stderr, "[serve] WARN cannot write %s: %s\n", cfg_path, e.msg);
    free(cfg_path);
    ds_server_set_info(s->srv, s->echo_s);
    ds_server_set_engine(s->srv, s->eng, s->model->max_len);
    return 0;
}

/* §13 steps 5-9: tokenizer, probes, scheduler line, reset. */
static int run_selfchecks(serve_run *s) {
    ds_server_set_phase(s->srv, "selfcheck");
    if (selfcheck_tokenizer(s->tok, &s->mask, s->be->vocab)) return 1;
    ds_error pe = {0};
    if (serve_spec_probe(&s->spec, s->model, s->tok, &pe)) {
        fprintf(stderr, "[selfcheck] dspark: FAIL %s\n", pe.msg);
        return 1;
    }
    fprintf(stderr, "[selfcheck] vision: SKIP no vision tower (image inputs are rejected)\n");
    if (selfcheck_probe(s->eng, 16, s->be->vocab, "warm-up", s->model_dir)) return 1;
    if (!strcmp(fv("--self-check"), "full")) {
        int64_t probe = DS_MIN((int64_t)8192, s->model->max_len / 2);
        if (selfcheck_probe(s->eng, probe, s->be->vocab, "prefill probe", s->model_dir)) return 1;
    } else {
        fprintf(stderr, "[selfcheck] prefill probe: SKIP (--self-check quick)\n");
    }
    fprintf(stderr, "[selfcheck] scheduler: OK admission gate: %s (max prefill seqs %lld, decode steps per chunk %lld); "
                    "prefix caching %s; max-num-seqs %lld; max-num-batched-tokens %lld\n",
            s->gate ? "ON" : "OFF", (long long)fi("--max-prefill-seqs"), (long long)fi("--gate-decode-steps-per-chunk"),
            s->prefix ? "ON" : "OFF", (long long)fi("--max-num-seqs"), (long long)fi("--max-num-batched-tokens"));
    ds_engine_reset_prefix_cache(s->eng);
    ds_metrics_reset(&s->metrics);
    fprintf(stderr, "[selfcheck] reset: OK prefix cache cleared, metrics reset\n");
    return 0;
}

static void announce_ready(serve_run *s) {
    char instance[64];
    ds_api_new_id("", instance, sizeof instance);
    /* uuid layout 8-4-4-4-12 from 32 hex digits */
    char uuid[40];
    snprintf(uuid, sizeof uuid, "%.8s-%.4s-%.4s-%.4s-%.12s", instance, instance + 8, instance + 12, instance + 16, instance + 20);
    ds_server_set_ready(s->srv, uuid);
    fprintf(stderr, "READY http://%s:%d model=%s instance=%s pid=%d\n", fv("--host"), ds_server_port(s->srv), s->names[0],
            uuid, (int)getpid());
    fflush(stderr);
    if (g_log_fd >= 0) {
        usleep(100000); /* let the tee thread copy READY to stderr too */
        atomic_store(&g_after_ready, true);
    }
}

static void teardown(serve_run *s) {
    if (s->srv) ds_server_stop(s->srv);
    if (s->eng) ds_engine_destroy(s->eng);
    if (s->be) ds_backend_free(s->be);
    if (s->mask.masked) ds_token_mask_free(&s->mask);
    if (s->tok) ds_tokenizer_free(s->tok);
    if (s->model) ds_model_free(s->model);
    ds_metrics_destroy(&s->metrics);
    cJSON_Delete(s->echo);
    free(s->echo_s);
    free(s->names_buf);
}

/* Ranks > 0 of `mpirun -np R dsflash serve`: load this rank's shard and replay rank 0's steps. */
static int serve_worker(const char *model_dir) {
    /* mpirun forwards SIGTERM/SIGINT to every rank; rank 0 drains and then tells the others to stop */
    signal(SIGTERM, SIG_IGN);
    signal(SIGINT, SIG_IGN);
    ds_load_options lo = {.kernels = fv("--kernels"), .threads = (int)fi("--threads"), .full_validation = 0,
                          .max_model_len = fv("--max-model-len") ? fi("--max-model-len") : 0, .numerics = fv("--numerics"),
                          .activations = fv("--activations"), .engram_residency = fv("--engram-residency"),
                          .numa_nodes = fv("--numa-nodes")};
    char eb[1024] = "";
    ds_model *m = ds_model_load(model_dir, &lo, eb, sizeof eb);
    if (!m) {
        fprintf(stderr, "dsflash serve: rank %d: [selfcheck] checkpoint: FAIL %s\n", ds_dist_rank(), eb);
        return ds_cli_dist_end(1);
    }
    ds_cli_dist_loaded();
    int rc = ds_backend_dist_worker(m);
    ds_model_free(m);
    return ds_cli_dist_end(rc);
}

int cmd_serve(int argc, char **argv) {
    int rc = ds_flags_parse(&g_fs, argc, argv, 1, stderr);
    if (rc) return rc == 1 ? 0 : 2;
    serve_run s;
    memset(&s, 0, sizeof s);
    if ((rc = check_rules(&s))) {
        free(s.names_buf);
        return rc;
    }
    if ((rc = open_log(&s))) {
        free(s.names_buf);
        return rc;
    }
    const char *md = fv("--model") ? fv("--model") : g_fs.n_positional ? g_fs.positional[0] : NULL;
    if ((rc = ds_cli_dist_begin(&g_fs, "dsflash serve", md ? md : "", argc, argv))) {
        free(s.names_buf);
        return rc;
    }
    if (ds_dist_size() > 1 && !md) {
        fprintf(stderr, "dsflash serve: --model: required with --tensor-parallel-size > 1 (every rank loads it)\n");
        free(s.names_buf);
        return ds_cli_dist_end(2);
    }
    if (ds_dist_rank() > 0) {
        int wrc = serve_worker(md);
        free(s.names_buf);
        return wrc;
    }
    signal(SIGPIPE, SIG_IGN);
    if (install_stop_signals()) {
        fprintf(stderr, "dsflash serve: cannot install the SIGINT/SIGTERM handlers: %s\n", strerror(errno));
        free(s.names_buf);
        return ds_cli_dist_end(1);
    }
    ds_metrics_init(&s.metrics);
    rc = start_listener(&s);
    if (!rc) rc = load_model(&s);
    if (!rc) ds_cli_dist_loaded();
    if (!rc) rc = build_engine(&s);
    if (!rc) rc = echo_config(&s);
    if (!rc) rc = run_selfchecks(&s);
    if (!rc) {
        announce_ready(&s);
        wait_for_stop();
        fprintf(stderr, "[serve] shutting down: draining for up to %llds\n", (long long)fi("--shutdown-timeout"));
        int left = ds_server_drain(s.srv, (double)fi("--shutdown-timeout"));
        fprintf(stderr, "[serve] drained (%d request(s) ended with finish_reason abort)\n", left);
    }
    teardown(&s);
    return ds_cli_dist_end(rc);
}
