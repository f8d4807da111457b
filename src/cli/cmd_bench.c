/* dsflash bench: placeholder until its issue lands; it refuses to run rather than pretend. */
#include "cli/commands.h"
#include <stdio.h>
int cmd_bench(int argc, char **argv) {
    (void)argc; (void)argv;
    fprintf(stderr, "dsflash bench: not available in this build yet\n");
    return 2;
}
