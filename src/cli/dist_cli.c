/* Multi-process start-up and shutdown shared by the commands that run the model (dist_cli.h).
 *
 * Why here and not in the model: the world size, the flags that must agree and what a rank prints
 * are decisions of the command; the model only reads the shard plan (dist/dist.h) at load. */
#include "cli/dist_cli.h"
#include "dist/dist.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static double g_timeout;

int ds_cli_dist_begin(const ds_flagset *fs_in, const char *cmd, const char *model_dir, int argc, char **argv) {
    ds_flagset *fs = (ds_flagset *)fs_in;
    const int tp = (int)ds_flag_int(fs, "--tensor-parallel-size");
    const char *ep = ds_flag_str(fs, "--expert-parallel"), *mode = ds_flag_str(fs, "--reduce-mode");
    g_timeout = ds_flag_double(fs, "--dist-timeout");
    if (tp != 1 && tp != 2 && tp != 4 && tp != 8) {
        fprintf(stderr, "%s: --tensor-parallel-size: expected 1, 2, 4 or 8, found %d\n", cmd, tp);
        return 2;
    }
    if (tp == 1 && !strcmp(ep, "on")) {
        fprintf(stderr, "%s: --expert-parallel on: expected --tensor-parallel-size > 1, found 1\n", cmd);
        return 2;
    }
    ds_error err = {{0}, {0}};
    if (ds_dist_init(0, &err) < 0) {
        fprintf(stderr, "%s: %s: %s\n", cmd, err.code, err.msg);
        return 1;
    }
    const int R = ds_dist_size();
    if (R != tp) {
        if (ds_dist_rank() == 0)
            fprintf(stderr, "%s: --tensor-parallel-size %d: expected the MPI world size %d (launch with mpirun -np %d "
                    "... --tensor-parallel-size %d)\n", cmd, tp, R, tp, tp);
        return ds_cli_dist_end(2);
    }
    ds_dist_configure(strcmp(ep, "off") != 0 && R > 1, !strcmp(mode, "fast") ? DS_REDUCE_FAST : DS_REDUCE_ORDERED);
    if (R == 1) return 0;
    if (ds_dist_rank() != 0 && !freopen("/dev/null", "w", stdout)) {
        fprintf(stderr, "%s: rank %d: cannot silence stdout\n", cmd, ds_dist_rank());
        return ds_cli_dist_end(1);
    }
    if (ds_dist_agree(model_dir, argc, argv, &err) < 0) {
        if (ds_dist_rank() == 0) fprintf(stderr, "%s: %s: %s\n", cmd, err.code, err.msg);
        return ds_cli_dist_end(1);
    }
    if (ds_dist_rank() == 0)
        fprintf(stderr, "dist: %d ranks, reduce mode %s, expert parallel %s\n", R, mode, strcmp(ep, "off") ? "on" : "off");
    return 0;
}

void ds_cli_dist_loaded(void) {
    ds_dist_report_resident("after load (this rank's shard only)");
    ds_dist_watchdog_start(g_timeout);
}

double ds_cli_dist_comm_share(FILE *out, const char *what, double comm_s, double section_s) {
    if (!ds_dist_active()) return 0.0;
    const int R = ds_dist_size();
    double *all = ds_xcalloc((size_t)R * 2, sizeof(double));
    int *bounds = ds_xmalloc(sizeof(int) * (size_t)(R + 1));
    for (int r = 0; r <= R; r++) bounds[r] = r;
    all[2 * ds_dist_rank()] = comm_s;
    all[2 * ds_dist_rank() + 1] = section_s;
    ds_dist_gather_rows(all, bounds, 2 * sizeof(double));
    double worst = 0.0;
    for (int r = 0; r < R; r++) {
        double pct = all[2 * r + 1] > 0 ? 100.0 * all[2 * r] / all[2 * r + 1] : 0.0;
        if (pct > worst) worst = pct;
        if (ds_dist_rank() == 0)
            fprintf(out, "%s: rank %d/%d: collectives %.3f s of %.3f s = %.1f%% communication\n", what, r, R, all[2 * r],
                    all[2 * r + 1], pct);
    }
    free(all);
    free(bounds);
    return worst;
}

int ds_cli_dist_end(int rc) {
    /* a failing rank takes the job down (MPI_Finalize would wait for peers that may never come) */
    if (rc && ds_dist_active()) ds_dist_abort(rc);
    ds_dist_finalize();
    return rc;
}
