/* dsflash quantize: placeholder until its issue lands; it refuses to run rather than pretend. */
#include "cli/commands.h"
#include <stdio.h>
int cmd_quantize(int argc, char **argv) {
    (void)argc; (void)argv;
    fprintf(stderr, "dsflash quantize: not available in this build yet\n");
    return 2;
}
