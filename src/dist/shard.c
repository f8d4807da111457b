/* The split of the model over the ranks (SERVING.md §14 table), the start-up agreement between the
 * ranks, the per-rank resident report and the collective watchdog.
 *
 * Why groups carry the heads: wo_a row block g reads only the heads of group g, so a rank that owns
 * whole groups computes its z columns from its own heads with no communication; only z, the wo_b
 * rows and the head rows are gathered.  Splits are balanced in units (16 rows for wo_b and the
 * head, whole groups and experts), so any R works; R in {1, 2, 4, 8} is what the CLI accepts.
 * Why a watchdog: OpenMPI tears the job down when a rank exits, but a rank that hangs (stopped,
 * deadlocked, or on a host that vanished) would block its peers forever inside a collective. */
#include "dist/dist.h"
#include "base/sha256.h"
#include "base/fsutil.h"
#include <dirent.h>
#include <mpi.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

double ds_dist_collective_since(void);   /* dist.c */

void ds_split_range(int n, int unit, int parts, int i, int *lo, int *hi) {
    if (unit < 1) unit = 1;
    const long nu = ((long)n + unit - 1) / unit;
    long a = nu * i / parts * unit, b = nu * (i + 1) / parts * unit;
    *lo = (int)(a < n ? a : n);
    *hi = (int)(b < n ? b : n);
}

void ds_shard_plan(const ds_config *c, int rank, int size, int expert_parallel, ds_reduce_mode mode, ds_shard *out) {
    memset(out, 0, sizeof *out);
    out->rank = rank;
    out->size = size;
    out->mode = mode;
    out->expert_parallel = expert_parallel && size > 1;
    ds_split_range(c->o_groups, 1, size, rank, &out->g0, &out->g1);
    const int hpg = c->n_heads / c->o_groups;
    out->h0 = out->g0 * hpg;
    out->h1 = out->g1 * hpg;
    ds_split_range(c->dim, 16, size, rank, &out->d0, &out->d1);
    ds_split_range(c->vocab_size, 16, size, rank, &out->v0, &out->v1);
    if (out->expert_parallel) ds_split_range(c->n_experts, 1, size, rank, &out->e0, &out->e1);
    else out->e0 = 0, out->e1 = c->n_experts;
}

/* ---- start-up agreement ---- */

enum { F_CONFIG, F_INDEX, F_WEIGHTS, F_FLAGS, F_N };
static const char *const k_field[F_N] = {"config.json", "checkpoint index (*.index.json)",
                                          "checkpoint weights (first 64 KiB and last 4 KiB of each shard)", "flags"};

static int cmp_names(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* Two seeds of one configuration share every index and header; a few pages of each shard tell them
 * apart without reading the weights (a rank reads only its shard). */
static int sample_file(const char *path, ds_sha256 *h, ds_error *err) {
    FILE *f = fopen(path, "rb");
    if (!f) return ds_fail(err, "E_IO", "%s: cannot open", path);
    static uint8_t buf[65536];
    size_t n = fread(buf, 1, sizeof buf, f);
    ds_sha256_update(h, buf, n);
    if (n == sizeof buf && fseek(f, -4096, SEEK_END) == 0) ds_sha256_update(h, buf, fread(buf, 1, 4096, f));
    fclose(f);
    return 0;
}

/* sha256 over every file of the directory named *suffix (sorted names, then bytes or samples). */
static int hash_files(const char *dir, const char *suffix, int sample, uint8_t out[DS_SHA256_LEN], ds_error *err) {
    const size_t sl = strlen(suffix);
    DIR *d = opendir(dir);
    if (!d) return ds_fail(err, "E_IO", "%s: cannot list the checkpoint directory", dir);
    char *names[256];
    int n = 0;
    for (struct dirent *e; (e = readdir(d)) && n < 256;) {
        size_t l = strlen(e->d_name);
        if (l > sl && !strcmp(e->d_name + l - sl, suffix)) names[n++] = ds_xstrdup(e->d_name);
    }
    closedir(d);
    qsort(names, (size_t)n, sizeof *names, cmp_names);
    ds_sha256 *h = ds_sha256_new();
    int rc = 0;
    for (int i = 0; i < n; i++) {
        char *p = ds_path_join(dir, names[i]), *data = NULL;
        size_t len = 0;
        ds_sha256_update(h, names[i], strlen(names[i]) + 1);
        if (!rc && sample && sample_file(p, h, err) < 0) rc = -1;
        if (!rc && !sample && ds_read_file(p, &data, &len, err) < 0) rc = -1;
        if (data) ds_sha256_update(h, data, len);
        free(data);
        free(p);
        free(names[i]);
    }
    ds_sha256_final(h, out);
    ds_sha256_free(h);
    return rc;
}

/* Flags as given, minus the checkpoint path (each host may keep its copy elsewhere). */
/* Flags a rank may set for itself: its checkpoint path, and where it runs (threads, NUMA nodes: the
 * results do not depend on either, and hosts or sockets may differ; decision 200). */
static bool rank_local_flag(const char *arg, bool *takes_value) {
    static const char *const names[] = {"--model", "--threads", "--numa-nodes"};
    for (size_t k = 0; k < DS_ARRAY_LEN(names); k++) {
        size_t n = strlen(names[k]);
        if (!strncmp(arg, names[k], n) && (arg[n] == 0 || arg[n] == '=')) {
            *takes_value = arg[n] == 0;
            return true;
        }
    }
    return false;
}

static void hash_flags(int argc, char **argv, uint8_t out[DS_SHA256_LEN]) {
    ds_sha256 *h = ds_sha256_new();
    for (int i = 0; i < argc; i++) {
        bool takes_value;
        if (rank_local_flag(argv[i], &takes_value)) {
            i += takes_value;
            continue;
        }
        ds_sha256_update(h, argv[i], strlen(argv[i]) + 1);
    }
    ds_sha256_final(h, out);
    ds_sha256_free(h);
}

int ds_dist_agree(const char *model_dir, int argc, char **argv, ds_error *err) {
    if (!ds_dist_active()) return 0;
    uint8_t mine[F_N][DS_SHA256_LEN];
    char *cfg = ds_path_join(model_dir, "config.json"), *data = NULL;
    size_t len = 0;
    int bad = ds_read_file(cfg, &data, &len, err) < 0 ? 1 : 0;
    ds_sha256 *h = ds_sha256_new();
    if (data) ds_sha256_update(h, data, len);
    ds_sha256_final(h, mine[F_CONFIG]);
    ds_sha256_free(h);
    free(data);
    free(cfg);
    if (hash_files(model_dir, ".index.json", 0, mine[F_INDEX], err) < 0) bad = 1;
    if (hash_files(model_dir, ".safetensors", 1, mine[F_WEIGHTS], err) < 0) bad = 1;
    hash_flags(argc, argv, mine[F_FLAGS]);
    const int R = ds_dist_size();
    uint8_t *all = ds_xmalloc((size_t)R * sizeof mine);
    int *bads = ds_xmalloc(sizeof(int) * (size_t)R);
    MPI_Allgather(mine, (int)sizeof mine, MPI_BYTE, all, (int)sizeof mine, MPI_BYTE, MPI_COMM_WORLD);
    MPI_Allgather(&bad, 1, MPI_INT, bads, 1, MPI_INT, MPI_COMM_WORLD);
    int rc = 0;
    for (int r = 0; r < R && !rc; r++) {
        if (bads[r]) {
            rc = r == ds_dist_rank() ? -1 : ds_fail(err, "E_DIST_MISMATCH", "rank %d: cannot read its checkpoint "
                                                   "description (config.json or index)", r);
            break;
        }
        for (int f = 0; f < F_N && !rc; f++)
            if (memcmp(all + (size_t)r * sizeof mine + (size_t)f * DS_SHA256_LEN, all + (size_t)f * DS_SHA256_LEN, DS_SHA256_LEN)) {
                char a[DS_SHA256_HEX_LEN + 1], b[DS_SHA256_HEX_LEN + 1];
                ds_sha256_to_hex(all + (size_t)f * DS_SHA256_LEN, a);
                ds_sha256_to_hex(all + (size_t)r * sizeof mine + (size_t)f * DS_SHA256_LEN, b);
                rc = ds_fail(err, "E_DIST_MISMATCH", "rank %d: %s differs from rank 0 (sha256 %.12s, rank 0 %.12s); "
                             "every rank must run the same checkpoint with the same flags", r, k_field[f], b, a);
            }
    }
    free(all);
    free(bads);
    return rc;
}

/* ---- resident bytes ---- */

static uint64_t resident_bytes(void) {
    FILE *f = fopen("/proc/self/statm", "r");
    unsigned long long size = 0, res = 0;
    if (f) {
        if (fscanf(f, "%llu %llu", &size, &res) != 2) res = 0;
        fclose(f);
    }
    return (uint64_t)res * (uint64_t)sysconf(_SC_PAGESIZE);
}

void ds_dist_report_resident(const char *what) {
    if (!ds_dist_active()) return;
    uint64_t mine = resident_bytes();
    const int R = ds_dist_size();
    uint64_t *all = ds_xmalloc(sizeof(uint64_t) * (size_t)R);
    MPI_Gather(&mine, 1, MPI_UINT64_T, all, 1, MPI_UINT64_T, 0, MPI_COMM_WORLD);
    if (ds_dist_rank() == 0)
        for (int r = 0; r < R; r++)
            fprintf(stderr, "dist: rank %d/%d: resident %.1f MiB %s\n", r, R, (double)all[r] / 1048576.0, what);
    free(all);
    /* ranks finish loading at different times: line them up so no step's wait counts the skew */
    MPI_Barrier(MPI_COMM_WORLD);
}

/* ---- watchdog ---- */

static double g_limit;

static void *watchdog(void *arg) {
    (void)arg;
    for (;;) {
        usleep(100000);
        double since = ds_dist_collective_since();
        if (since > 0 && ds_now() - since > g_limit) {
            fprintf(stderr, "dsflash: E_DIST_TIMEOUT: rank %d: a collective has waited more than %.1f s: a peer rank "
                    "died or hangs; stopping this rank\n", ds_dist_rank(), g_limit);
            fflush(stderr);
            _exit(71);
        }
    }
    return NULL;
}

void ds_dist_watchdog_start(double seconds) {
    if (!ds_dist_active() || seconds <= 0 || g_limit > 0) return;
    g_limit = seconds;
    pthread_t t;
    if (pthread_create(&t, NULL, watchdog, NULL) == 0) pthread_detach(t);
}
