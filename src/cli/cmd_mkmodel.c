/* dsflash mkmodel: placeholder until its issue lands; it refuses to run rather than pretend. */
#include "cli/commands.h"
#include <stdio.h>
int cmd_mkmodel(int argc, char **argv) {
    (void)argc; (void)argv;
    fprintf(stderr, "dsflash mkmodel: not available in this build yet\n");
    return 2;
}
