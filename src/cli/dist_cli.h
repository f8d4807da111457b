/* The multi-process flags shared by generate and serve (SERVING.md §12, §14). */
#ifndef DS_CLI_DIST_CLI_H
#define DS_CLI_DIST_CLI_H
#include "base/flags.h"
#include <stdio.h>

#define DS_DIST_FLAG_ROWS                                                                                        \
    {.name = "--tensor-parallel-size", .type = DS_FLAG_INT, .def = "1", .lo = 1, .hi = 8,                        \
     .help = "MPI ranks (1, 2, 4 or 8): launch with mpirun -np R"},                                              \
    {.name = "--expert-parallel", .type = DS_FLAG_ENUM, .def = "auto", .choices = "auto|on|off",                 \
     .help = "routed experts split over the ranks (auto: on when R > 1)"},                                       \
    {.name = "--reduce-mode", .type = DS_FLAG_ENUM, .def = "ordered", .choices = "ordered|fast",                  \
     .help = "ordered: bit-identical to one process; fast: MPI_Allreduce of expert partials"},                   \
    {.name = "--dist-timeout", .type = DS_FLAG_DOUBLE, .def = "10", .dlo = 0, .dhi = 3600,                        \
     .help = "seconds a collective may wait for a peer before every rank stops (0: never)"}

/* Before the model loads: MPI start-up under mpirun, world size == --tensor-parallel-size, the
 * start-up agreement of every rank (config, index, flags).  Ranks other than 0 send stdout to
 * /dev/null.  Returns 0, or the exit status after printing the reason (`cmd: ...`). */
int ds_cli_dist_begin(const ds_flagset *fs, const char *cmd, const char *model_dir, int argc, char **argv);
/* After the load: each rank's resident bytes (rank 0 prints them) and the collective watchdog. */
void ds_cli_dist_loaded(void);
/* The communication share of a measured section, per rank: every rank passes its seconds inside
 * collectives and the section's seconds; rank 0 prints one line per rank to `out` (prefixed by
 * `what`) and returns the largest share in percent (every rank calls it; no-op for one rank,
 * returns 0). */
double ds_cli_dist_comm_share(FILE *out, const char *what, double comm_s, double section_s);
/* At exit: MPI_Finalize; returns rc. */
int ds_cli_dist_end(int rc);
#endif
