/* dsflash serve: flags (SERVING.md §12), start-up self-checks (§13), the READY line, and the
 * engine + HTTP server until SIGINT/SIGTERM.
 *
 * Why it is built this way: every flag is a row of one table (exact long names, one value each),
 * so unknown or abbreviated options fail with status 2 and every effective value — given or
 * defaulted — is echoed, written to serve_config.json and served at /server_info (PITFALLS A2).
 * The HTTP listener starts first, so /health answers 503 with the current phase while the checks
 * run, and a taken port fails before any expensive work.  With no model directory the server
 * generates the tiny test checkpoint once (through `dsflash mkmodel`, cached under
 * $XDG_CACHE_HOME/dsflash or ~/.cache/dsflash, or --model-cache) so the README's first command
 * works on a fresh machine. */
#define _GNU_SOURCE
#include "cli/commands.h"
#include "dsflash.h"
#include "base/fsutil.h"
#include "engine/backend_model.h"
#include "engine/engine.h"
#include "kernels/kernels.h"
#include "model/model.h"
#include "server/api.h"
#include "server/server.h"
#include "tokenizer/tokenizer.h"
#include <cJSON.h>
#include <ctype.h>
#include <dirent.h>
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
#include <unistd.h>

typedef struct flag {
    const char *name;
    const char *def;   /* NULL = unset */
    bool is_switch;    /* no value; value becomes "on" */
    const char *val;
} flag;

static flag k_flags[] = {
    {"--model", NULL, false, NULL},
    {"--model-cache", NULL, false, NULL},
    {"--served-model-name", "deepseek-v41", false, NULL},
    {"--host", "127.0.0.1", false, NULL},
    {"--port", "8000", false, NULL},
    {"--api-key", NULL, false, NULL},
    {"--max-model-len", NULL, false, NULL},
    {"--max-num-seqs", "32", false, NULL},
    {"--max-num-batched-tokens", "8192", false, NULL},
    {"--block-size", "128", false, NULL},
    {"--memory-utilization", "0.90", false, NULL},
    {"--gpu-memory-utilization", NULL, false, NULL},
    {"--kv-cache-memory", NULL, false, NULL},
    {"--kv-cache-memory-bytes", NULL, false, NULL},
    {"--enable-prefix-caching", NULL, true, NULL},
    {"--no-enable-prefix-caching", NULL, true, NULL},
    {"--num-speculative-tokens", "0", false, NULL},
    {"--spec-tokens-per-batch-size", NULL, false, NULL},
    {"--spec-guard", "on", false, NULL},
    {"--admission-gate", NULL, true, NULL},
    {"--no-admission-gate", NULL, true, NULL},
    {"--max-prefill-seqs", "1", false, NULL},
    {"--gate-decode-steps-per-chunk", "1", false, NULL},
    {"--threads", "0", false, NULL},
    {"--numa-nodes", "all", false, NULL},
    {"--http-threads", "1088", false, NULL},
    {"--http-timeout", "30", false, NULL},
    {"--shutdown-timeout", "30", false, NULL},
    {"--kernels", "auto", false, NULL},
    {"--numerics", "fast", false, NULL},
    {"--engram-residency", "page-cache", false, NULL},
    {"--limit-mm-per-prompt", "image=0", false, NULL},
    {"--default-chat-template-kwargs", "{\"enable_thinking\":false}", false, NULL},
    {"--tokenizer-mode", "deepseek_v41", false, NULL},
    {"--reasoning-parser", "deepseek_v41", false, NULL},
    {"--tool-call-parser", "deepseek_v41", false, NULL},
    {"--max-pending-requests", "1024", false, NULL},
    {"--max-request-body", "128MiB", false, NULL},
    {"--tensor-parallel-size", "1", false, NULL},
    {"--expert-parallel", "off", false, NULL},
    {"--reduce-mode", "ordered", false, NULL},
    {"--enable-dev-endpoints", NULL, true, NULL},
    {"--log-requests", NULL, true, NULL},
    {"--max-log-len", "256", false, NULL},
    {"--log-file", NULL, false, NULL},
    {"--debug-kv-alloc-order", "low-first", false, NULL},
    {"--self-check", "full", false, NULL},
};

static flag *find_flag(const char *name) {
    for (size_t i = 0; i < DS_ARRAY_LEN(k_flags); i++)
        if (!strcmp(k_flags[i].name, name)) return &k_flags[i];
    return NULL;
}
static const char *fv(const char *name) {
    flag *f = find_flag(name);
    return f->val ? f->val : f->def;
}

static void usage(FILE *out) {
    fprintf(out, "usage: dsflash serve [MODEL_DIR] [--model DIR] [--port N] [--host ADDR] [--api-key KEY] ...\n"
                 "flags (long options only, exact names):\n");
    for (size_t i = 0; i < DS_ARRAY_LEN(k_flags); i++)
        fprintf(out, "  %s%s%s%s\n", k_flags[i].name, k_flags[i].is_switch ? "" : " VALUE",
                k_flags[i].def ? "   default " : "", k_flags[i].def ? k_flags[i].def : "");
}

static int bad(const char *flagname, const char *val, const char *why) {
    fprintf(stderr, "dsflash serve: %s %s: %s\n", flagname, val ? val : "", why);
    usage(stderr);
    return 2;
}

static int parse_i64(const char *name, int64_t lo, int64_t hi, int64_t *out) {
    const char *s = fv(name);
    char *end;
    errno = 0;
    long long x = strtoll(s, &end, 10);
    if (errno || *end || end == s || x < lo || x > hi) {
        char why[128];
        snprintf(why, sizeof why, "expected an integer in [%lld, %lld]", (long long)lo, (long long)hi);
        return bad(name, s, why);
    }
    *out = x;
    return 0;
}

/* Sizes: plain bytes or K/M/G/KiB/MiB/GiB suffixes (all powers of 1024). */
static int parse_size(const char *name, const char *s, uint64_t *out) {
    char *end;
    errno = 0;
    double x = strtod(s, &end);
    uint64_t mul = 1;
    if (!strcmp(end, "") ) mul = 1;
    else if (!strcmp(end, "K") || !strcmp(end, "KiB")) mul = 1ull << 10;
    else if (!strcmp(end, "M") || !strcmp(end, "MiB")) mul = 1ull << 20;
    else if (!strcmp(end, "G") || !strcmp(end, "GiB")) mul = 1ull << 30;
    else return bad(name, s, "expected bytes with an optional K, M, G, KiB, MiB or GiB suffix");
    if (errno || end == s || x <= 0) return bad(name, s, "expected a positive size");
    *out = (uint64_t)(x * (double)mul);
    return 0;
}

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

static volatile sig_atomic_t g_stop;
static void on_signal(int sig) { g_stop = 1; }

static uint64_t mem_total_bytes(void) {
    FILE *f = fopen("/proc/meminfo", "r");
    unsigned long long kb = 0;
    char line[256];
    while (f && fgets(line, sizeof line, f))
        if (sscanf(line, "MemTotal: %llu kB", &kb) == 1) break;
    if (f) fclose(f);
    return (uint64_t)kb * 1024ull;
}

static uint64_t dir_safetensors_bytes(const char *dir, int depth) {
    DIR *d = opendir(dir);
    if (!d) return 0;
    uint64_t sum = 0;
    struct dirent *de;
    while ((de = readdir(d))) {
        if (de->d_name[0] == '.') continue;
        char *p = ds_path_join(dir, de->d_name);
        struct stat st;
        if (!stat(p, &st)) {
            if (S_ISDIR(st.st_mode) && depth < 2) sum += dir_safetensors_bytes(p, depth + 1);
            else if (S_ISREG(st.st_mode) && strstr(de->d_name, ".safetensors")) sum += (uint64_t)st.st_size;
        }
        free(p);
    }
    closedir(d);
    return sum;
}

/* The tiny checkpoint, generated once through `dsflash mkmodel` into a cache directory. */
static int ensure_default_model(char *out, size_t outlen) {
    char base[PATH_MAX];
    const char *mc = fv("--model-cache"), *xdg = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
    if (mc) snprintf(base, sizeof base, "%s", mc);
    else if (xdg && xdg[0]) snprintf(base, sizeof base, "%s/dsflash", xdg);
    else snprintf(base, sizeof base, "%s/.cache/dsflash", home ? home : ".");
    snprintf(out, outlen, "%s/tiny", base);
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

/* Control tokens the encoder and parsers need: spared by the sampler mask, and must resolve. */
static const char *const k_control[] = {"<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>", "<｜User｜>", "<｜Assistant｜>",
                                        "<｜System｜>", "<think>", "</think>", "｜DSML｜", "<｜latest_reminder｜>"};

static int selfcheck_tokenizer(const ds_tokenizer *tok, const ds_token_mask *mask, int vocab) {
    for (size_t i = 0; i < DS_ARRAY_LEN(k_control); i++) {
        int32_t id = ds_tokenizer_token_id(tok, k_control[i]);
        if (id < 0 || id >= vocab) {
            fprintf(stderr, "[selfcheck] tokenizer: FAIL control token %s does not resolve to an id < %d\n", k_control[i], vocab);
            return -1;
        }
        if (mask->masked[id]) {
            fprintf(stderr, "[selfcheck] tokenizer: FAIL control token %s (id %d) is in the sampler mask\n", k_control[i], id);
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
    fprintf(stderr, "[selfcheck] tokenizer: %s (control tokens resolve and are spared by the mask; UTF-8 round trip of %zu tokens)\n",
            ok ? "OK" : "FAIL", t.n);
    free(back);
    ds_tokens_free(&t);
    return ok ? 0 : -1;
}

/* Warm-up probe through the engine: a greedy generation (and a timed prefill). */
static int selfcheck_probe(ds_engine *e, int64_t prompt_len, int vocab, const char *what) {
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
    ds_req_unref(r);
    return ok ? 0 : -1;
}

int cmd_serve(int argc, char **argv) {
    const char *positional = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--help")) {
            usage(stdout);
            return 0;
        }
        if (strncmp(argv[i], "--", 2)) {
            if (positional) return bad("MODEL_DIR", argv[i], "only one model directory may be given");
            positional = argv[i];
            continue;
        }
        flag *f = find_flag(argv[i]);
        if (!f) return bad(argv[i], NULL, "unknown option (long options must match exactly)");
        if (f->is_switch) {
            f->val = "on";
        } else {
            if (i + 1 >= argc) return bad(argv[i], NULL, "needs a value");
            f->val = argv[++i];
        }
    }
    /* ---- values and their rules ---- */
    int64_t port, max_seqs, budget, bs, spec, prefill_seqs, gate_steps, threads, http_threads, max_pending, max_log, tp;
    int64_t http_timeout, shutdown_timeout;
    if (parse_i64("--port", 0, 65535, &port) || parse_i64("--max-num-seqs", 1, 4096, &max_seqs) ||
        parse_i64("--max-num-batched-tokens", 1, 1 << 22, &budget) || parse_i64("--block-size", 16, 256, &bs) ||
        parse_i64("--num-speculative-tokens", 0, 5, &spec) || parse_i64("--max-prefill-seqs", 1, 4096, &prefill_seqs) ||
        parse_i64("--gate-decode-steps-per-chunk", 1, 1024, &gate_steps) || parse_i64("--threads", 0, 4096, &threads) ||
        parse_i64("--http-threads", 1, 65536, &http_threads) || parse_i64("--http-timeout", 1, 3600, &http_timeout) ||
        parse_i64("--shutdown-timeout", 0, 3600, &shutdown_timeout) || parse_i64("--max-pending-requests", 1, 1 << 20, &max_pending) ||
        parse_i64("--max-log-len", 0, 1 << 20, &max_log) || parse_i64("--tensor-parallel-size", 1, 8, &tp))
        return 2;
    if (bs & (bs - 1)) return bad("--block-size", fv("--block-size"), "must be a power of two between 16 and 256");
    if (spec != 0)
        return bad("--num-speculative-tokens", fv("--num-speculative-tokens"),
                   "speculative decoding is not available in this build; only 0 is accepted");
    if (tp != 1) return bad("--tensor-parallel-size", fv("--tensor-parallel-size"), "multi-process execution is not available in this build; only 1 is accepted");
    if (strcmp(fv("--reduce-mode"), "ordered") && strcmp(fv("--reduce-mode"), "fast"))
        return bad("--reduce-mode", fv("--reduce-mode"), "expected ordered or fast");
    if (strcmp(fv("--spec-guard"), "on") && strcmp(fv("--spec-guard"), "warn") && strcmp(fv("--spec-guard"), "off"))
        return bad("--spec-guard", fv("--spec-guard"), "expected on, warn or off");
    for (int k = 0; k < 3; k++) {
        const char *n = k == 0 ? "--tokenizer-mode" : k == 1 ? "--reasoning-parser" : "--tool-call-parser";
        if (strcmp(fv(n), "deepseek_v41")) return bad(n, fv(n), "only deepseek_v41 is accepted (deepseek_v4 mishandled tools)");
    }
    if (ds_numerics_parse(fv("--numerics")) < 0)
        return bad("--numerics", fv("--numerics"), "expected exact or fast");
    if (strcmp(fv("--debug-kv-alloc-order"), "low-first") && strcmp(fv("--debug-kv-alloc-order"), "high-first"))
        return bad("--debug-kv-alloc-order", fv("--debug-kv-alloc-order"), "expected low-first or high-first");
    if (strcmp(fv("--self-check"), "full") && strcmp(fv("--self-check"), "quick"))
        return bad("--self-check", fv("--self-check"), "expected full or quick (self-checks cannot be turned off)");
    if (strcmp(fv("--engram-residency"), "page-cache"))
        return bad("--engram-residency", fv("--engram-residency"),
                   "only page-cache is available in this build (locked and disk are not implemented yet)");
    if (strcmp(fv("--numa-nodes"), "all"))
        return bad("--numa-nodes", fv("--numa-nodes"), "NUMA binding is not available in this build; only all is accepted");
    if (strcmp(fv("--limit-mm-per-prompt"), "image=0"))
        return bad("--limit-mm-per-prompt", fv("--limit-mm-per-prompt"), "this build has no vision tower; only image=0 is accepted");
    if (find_flag("--enable-prefix-caching")->val && find_flag("--no-enable-prefix-caching")->val)
        return bad("--no-enable-prefix-caching", NULL, "conflicts with --enable-prefix-caching");
    if (find_flag("--admission-gate")->val && find_flag("--no-admission-gate")->val)
        return bad("--no-admission-gate", NULL, "conflicts with --admission-gate");
    bool prefix = !find_flag("--no-enable-prefix-caching")->val, gate = !find_flag("--no-admission-gate")->val;
    const char *util_s = find_flag("--gpu-memory-utilization")->val ? fv("--gpu-memory-utilization") : fv("--memory-utilization");
    char *end;
    double util = strtod(util_s, &end);
    if (*end || util <= 0 || util > 1) return bad("--memory-utilization", util_s, "expected a share in (0, 1]");
    uint64_t max_body = 0, kv_bytes = 0;
    if (parse_size("--max-request-body", fv("--max-request-body"), &max_body)) return 2;
    const char *kvs = find_flag("--kv-cache-memory")->val ? fv("--kv-cache-memory") : fv("--kv-cache-memory-bytes");
    if (kvs && parse_size("--kv-cache-memory", kvs, &kv_bytes)) return 2;
    cJSON *kwargs = cJSON_Parse(fv("--default-chat-template-kwargs"));
    if (!kwargs || !cJSON_IsObject(kwargs)) {
        cJSON_Delete(kwargs);
        return bad("--default-chat-template-kwargs", fv("--default-chat-template-kwargs"), "expected a JSON object");
    }
    const cJSON *et = cJSON_GetObjectItemCaseSensitive(kwargs, "enable_thinking");
    if (!et) et = cJSON_GetObjectItemCaseSensitive(kwargs, "thinking");
    bool default_thinking = et && cJSON_IsTrue(et);
    cJSON_Delete(kwargs);
    const char *api_key = fv("--api-key");
    if (!api_key) api_key = getenv("DSFLASH_API_KEY");

    /* ---- logging first: the log directory exists before the first line (PITFALLS 49) ---- */
    const char *log_file = fv("--log-file");
    char log_dir[PATH_MAX] = ".";
    if (log_file) {
        snprintf(log_dir, sizeof log_dir, "%s", log_file);
        char *slash = strrchr(log_dir, '/');
        if (slash) *slash = 0;
        else snprintf(log_dir, sizeof log_dir, ".");
        ds_error e;
        if (ds_mkdir_p(log_dir, &e)) {
            fprintf(stderr, "dsflash serve: --log-file %s: %s\n", log_file, e.msg);
            return 3;
        }
        if (start_log_tee(log_file)) {
            fprintf(stderr, "dsflash serve: --log-file %s: cannot open: %s\n", log_file, strerror(errno));
            return 3;
        }
    }
    signal(SIGPIPE, SIG_IGN);
    signal(SIGINT, on_signal);
    signal(SIGTERM, on_signal);

    /* ---- model directory ---- */
    char model_dir[PATH_MAX];
    const char *md = fv("--model") ? fv("--model") : positional;
    if (md) {
        snprintf(model_dir, sizeof model_dir, "%s", md);
    } else {
        int rc = ensure_default_model(model_dir, sizeof model_dir);
        if (rc) return rc;
    }
    char *tok_path = ds_path_join(model_dir, "tokenizer.json");
    if (!ds_file_exists(tok_path)) {
        fprintf(stderr, "dsflash serve: %s: missing (the model directory needs its tokenizer)\n", tok_path);
        free(tok_path);
        return 5;
    }

    /* ---- HTTP listener first: /health reports the phase while checks run ---- */
    const char *names_s = fv("--served-model-name");
    char *names_buf = ds_xstrdup(names_s);
    const char *names[16];
    int n_names = 0;
    for (char *sv, *t = strtok_r(names_buf, ",", &sv); t && n_names < 16; t = strtok_r(NULL, ",", &sv)) names[n_names++] = t;
    if (!n_names) return bad("--served-model-name", names_s, "needs at least one name");

    /* ---- tokenizer, then the listener (so /health reports the phase while the model loads) ---- */
    ds_tokenizer *tok = NULL;
    ds_error e = {0};
    if (ds_tokenizer_load(tok_path, &tok, &e)) {
        fprintf(stderr, "[selfcheck] tokenizer: FAIL %s\n", e.msg);
        return 1;
    }
    free(tok_path);
    ds_metrics metrics;
    ds_metrics_init(&metrics);
    ds_server_config sc = {.host = fv("--host"), .port = (int)port, .api_key = api_key, .names = names, .n_names = n_names,
                           .root = model_dir, .max_model_len = 0, .max_body = max_body,
                           .http_threads = (int)http_threads, .max_connections = (int)max_pending + 64,
                           .http_timeout_s = (double)http_timeout,
                           .dev_endpoints = find_flag("--enable-dev-endpoints")->val != NULL,
                           .default_thinking = default_thinking, .limit_images = 0, .server_info_json = "{}",
                           .log_requests = find_flag("--log-requests")->val != NULL, .max_log_len = (int)max_log};
    ds_server *srv = ds_server_start(&sc, NULL, tok, &metrics, &e);
    if (!srv) {
        fprintf(stderr, "dsflash serve: %s\n", e.msg);
        return 3;
    }
    ds_server_set_phase(srv, "loading");

    /* ---- load ---- */
    ds_load_options lo = {.kernels = fv("--kernels"), .threads = (int)threads, .full_validation = 0, .max_model_len = 0,
                          .numerics = fv("--numerics")};
    if (fv("--max-model-len")) {
        int64_t mml;
        if (parse_i64("--max-model-len", 2, 1 << 30, &mml)) return 2;
        lo.max_model_len = mml;
    }
    char eb[1024] = "";
    double t0 = ds_now();
    ds_model *model = ds_model_load(model_dir, &lo, eb, sizeof eb);
    if (!model) {
        fprintf(stderr, "[selfcheck] checkpoint: FAIL %s\n", eb);
        return 1;
    }
    int64_t max_model_len = model->max_len;
    ds_server_set_phase(srv, "kv-setup");
    fprintf(stderr, "[selfcheck] checkpoint: OK %s (config validated, tensors bound, Engram constants checked) in %.2f s\n",
            model_dir, ds_now() - t0);
    /* §13 step 3: every kernel family in use against the scalar reference on random tiles. */
    {
        ds_kernel_check kc[8];
        int nk = 0;
        ds_error kerr;
        ds_error_clear(&kerr);
        int krc = ds_kernels_selfcheck(kc, &nk, &kerr);
        fprintf(stderr, "[selfcheck] kernels: %s %s (requested %s; %s)\n", krc == 0 ? "OK" : "FAIL", ds_kernels_active(),
                fv("--kernels"), ds_kernels_reason());
        for (int i = 0; i < nk; i++) fprintf(stderr, "[selfcheck] %s\n", kc[i].line);
        if (krc != 0) {
            fprintf(stderr, "[selfcheck] kernels: FAIL %s\n", kerr.msg);
            ds_model_free(model);
            return 1;
        }
    }

    /* ---- budget (§4.4) ---- */
    ds_backend *be = ds_backend_model_new(model);
    uint64_t weights = dir_safetensors_bytes(model_dir, 0);
    uint64_t rows = (uint64_t)DS_MAX(budget, max_seqs);
    uint64_t act = (uint64_t)(1.5 * (double)rows * ((double)be->vocab * 4.0 + 64.0 * (double)model->cfg.dim * 4.0));
    uint64_t misc = 2ull << 30;
    uint64_t total = (uint64_t)(util * (double)mem_total_bytes());
    if (!kv_bytes) {
        if (total <= weights + act + misc) {
            fprintf(stderr, "[selfcheck] memory: FAIL budget %llu B leaves nothing for KV after weights %llu B, activations %llu B "
                            "and 2 GiB misc; pass --kv-cache-memory\n",
                    (unsigned long long)total, (unsigned long long)weights, (unsigned long long)act);
            return 1;
        }
        kv_bytes = total - weights - act - misc;
    }
    fprintf(stderr, "[selfcheck] memory: OK weights %llu B resident (%s), activation reservation %llu B (estimate x1.5), KV budget %llu B%s\n",
            (unsigned long long)weights, fv("--engram-residency"), (unsigned long long)act, (unsigned long long)kv_bytes,
            kvs ? " (--kv-cache-memory)" : "");

    /* ---- sampler mask (§9): spare every control token the encoder/parsers need ---- */
    int32_t spare[64];
    int n_spare = 0;
    for (int i = 0; i < ds_tokenizer_added_count(tok) && n_spare < 64; i++) {
        int32_t id;
        bool special;
        const char *lit = ds_tokenizer_added_content(tok, i, &id, &special);
        for (size_t k = 0; k < DS_ARRAY_LEN(k_control); k++)
            if (lit && !strcmp(lit, k_control[k]) && n_spare < 64) spare[n_spare++] = id;
    }
    ds_token_mask mask;
    ds_token_mask_init(&mask, be->vocab, be->noise_id, be->bos_id, be->pad_id, be->image_id, spare, n_spare);
    fprintf(stderr, "[serve] sampler mask: %d ids (noise %d, BOS %d, PAD %d, sentinel ranges within the vocabulary); spared control ids:",
            mask.count, be->noise_id, be->bos_id, be->pad_id);
    for (int i = 0; i < n_spare; i++) fprintf(stderr, " %d", spare[i]);
    fprintf(stderr, "\n");

    /* ---- engine ---- */
    ds_engine_config ec;
    ds_engine_config_defaults(&ec);
    ec.max_num_seqs = (int)max_seqs;
    ec.max_num_batched_tokens = (int)budget;
    ec.block_size = (int)bs;
    ec.prefix_caching = prefix;
    ec.admission_gate = gate;
    ec.max_prefill_seqs = (int)prefill_seqs;
    ec.gate_decode_steps_per_chunk = (int)gate_steps;
    ec.max_model_len = max_model_len;
    ec.max_pending = (int)max_pending;
    ec.kv_budget_bytes = kv_bytes;
    ec.kv_high_first = !strcmp(fv("--debug-kv-alloc-order"), "high-first");
    char fingerprint[PATH_MAX + 64];
    snprintf(fingerprint, sizeof fingerprint, "%s|bs=%d|kv=bf16", model_dir, (int)bs);
    ec.fingerprint = fingerprint;
    ds_detok_ops dops = ds_server_detok_ops(tok);
    ds_engine *eng = ds_engine_create(&ec, be, &mask, &metrics, &dops, &e);
    if (!eng) {
        fprintf(stderr, "[selfcheck] kv: FAIL %s\n", e.msg);
        return 1;
    }
    char l1[256], l2[768], rep[512];
    ds_kv_budget_lines(ds_engine_kv_plan(eng), l1, sizeof l1, l2, sizeof l2);
    fprintf(stderr, "%s\n%s\n", l1, l2);
    if (ds_engine_kv_selftest(eng, rep, sizeof rep)) {
        fprintf(stderr, "%s\n", rep);
        return 1;
    }
    fprintf(stderr, "%s\n", rep);

    /* ---- configuration echo (§13.1) ---- */
    cJSON *echo = cJSON_CreateObject();
    cJSON *fl = cJSON_AddObjectToObject(echo, "flags");
    for (size_t i = 0; i < DS_ARRAY_LEN(k_flags); i++) {
        const char *v = k_flags[i].val ? k_flags[i].val : k_flags[i].def;
        if (!strcmp(k_flags[i].name, "--api-key") && v) v = "(set)";
        if (v) cJSON_AddStringToObject(fl, k_flags[i].name + 2, v);
        else cJSON_AddNullToObject(fl, k_flags[i].name + 2);
    }
    cJSON_AddStringToObject(echo, "model_dir", model_dir);
    cJSON_AddNumberToObject(echo, "block_size", (double)bs);
    cJSON_AddNumberToObject(echo, "num_speculative_tokens", 0);
    cJSON_AddStringToObject(echo, "speculation", "OFF (not available in this build)");
    cJSON_AddBoolToObject(echo, "admission_gate", gate);
    cJSON_AddBoolToObject(echo, "prefix_caching", prefix);
    cJSON_AddNumberToObject(echo, "max_num_seqs", (double)max_seqs);
    cJSON_AddNumberToObject(echo, "max_model_len", (double)max_model_len);
    cJSON_AddStringToObject(echo, "setting", (max_seqs <= 4 && !prefix) ? "performance" : "production");
    cJSON_AddStringToObject(echo, "kernels", ds_kernels_active());
    cJSON_AddStringToObject(echo, "numerics", ds_model_numerics(model));
    cJSON_AddNumberToObject(echo, "threads", (double)threads);
    cJSON_AddStringToObject(echo, "reduce_mode", fv("--reduce-mode"));
    cJSON_AddNumberToObject(echo, "kv_budget_bytes", (double)kv_bytes);
    cJSON_AddNumberToObject(echo, "kv_capacity_tokens", (double)ds_engine_kv_plan(eng)->capacity_tokens);
    cJSON_AddNumberToObject(echo, "weights_bytes", (double)weights);
    cJSON_AddNumberToObject(echo, "activation_reservation_bytes", (double)act);
    cJSON_AddNumberToObject(echo, "pid", (double)getpid());
    cJSON_AddNumberToObject(echo, "start_time", (double)time(NULL));
    cJSON_AddStringToObject(echo, "version", "dsflash 0.1");
    char *echo_s = cJSON_PrintUnformatted(echo);
    fprintf(stderr, "[selfcheck] configuration: OK %s\n", echo_s);
    char *cfg_path = ds_path_join(log_dir, "serve_config.json");
    if (log_file && ds_write_file_atomic(cfg_path, echo_s, strlen(echo_s), &e))
        fprintf(stderr, "[serve] WARN cannot write %s: %s\n", cfg_path, e.msg);
    free(cfg_path);

    ds_server_set_info(srv, echo_s);
    ds_server_set_engine(srv, eng, max_model_len);

    /* ---- remaining self-checks ---- */
    ds_server_set_phase(srv, "selfcheck");
    if (selfcheck_tokenizer(tok, &mask, be->vocab)) return 1;
    fprintf(stderr, "[selfcheck] dspark: SKIP speculation is not available in this build\n");
    fprintf(stderr, "[selfcheck] vision: SKIP no vision tower (image inputs are rejected)\n");
    if (selfcheck_probe(eng, 16, be->vocab, "warm-up")) return 1;
    if (!strcmp(fv("--self-check"), "full")) {
        int64_t probe = DS_MIN((int64_t)8192, max_model_len / 2);
        if (selfcheck_probe(eng, probe, be->vocab, "prefill probe")) return 1;
    } else {
        fprintf(stderr, "[selfcheck] prefill probe: SKIP (--self-check quick)\n");
    }
    fprintf(stderr, "[selfcheck] scheduler: OK admission gate: %s (max prefill seqs %lld, decode steps per chunk %lld); "
                    "prefix caching %s; max-num-seqs %lld; max-num-batched-tokens %lld\n",
            gate ? "ON" : "OFF", (long long)prefill_seqs, (long long)gate_steps, prefix ? "ON" : "OFF", (long long)max_seqs,
            (long long)budget);
    ds_engine_reset_prefix_cache(eng);
    ds_metrics_reset(&metrics);
    fprintf(stderr, "[selfcheck] reset: OK prefix cache cleared, metrics reset\n");
    char instance[64];
    ds_api_new_id("", instance, sizeof instance);
    /* uuid layout 8-4-4-4-12 from 32 hex digits */
    char uuid[40];
    snprintf(uuid, sizeof uuid, "%.8s-%.4s-%.4s-%.4s-%.12s", instance, instance + 8, instance + 12, instance + 16, instance + 20);
    ds_server_set_ready(srv, uuid);
    fprintf(stderr, "READY http://%s:%d model=%s instance=%s pid=%d\n", fv("--host"), ds_server_port(srv), names[0], uuid,
            (int)getpid());
    fflush(stderr);
    if (g_log_fd >= 0) {
        usleep(100000); /* let the tee thread copy READY to stderr too */
        atomic_store(&g_after_ready, true);
    }
    while (!g_stop) pause();
    fprintf(stderr, "[serve] shutting down: draining for up to %llds\n", (long long)shutdown_timeout);
    int left = ds_server_drain(srv, (double)shutdown_timeout);
    fprintf(stderr, "[serve] drained (%d request(s) ended with finish_reason abort)\n", left);
    ds_server_stop(srv);
    ds_engine_destroy(eng);
    ds_backend_free(be);
    ds_token_mask_free(&mask);
    ds_tokenizer_free(tok);
    ds_model_free(model);
    ds_metrics_destroy(&metrics);
    cJSON_Delete(echo);
    free(echo_s);
    free(names_buf);
    return 0;
}
