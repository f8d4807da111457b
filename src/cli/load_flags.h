/* Flag rows of the model load that serve, generate, eval and perf decode|serve share (one text for all). */
#ifndef DS_CLI_LOAD_FLAGS_H
#define DS_CLI_LOAD_FLAGS_H
#include "base/flags.h"

#define DS_ENGRAM_RESIDENCY_FLAG_ROW                                                                          \
    {.name = "--engram-residency", .type = DS_FLAG_ENUM, .def = "page-cache",                                 \
     .choices = "page-cache|huge-pages|locked|disk",                                                          \
     .help = "Engram tables: page-cache (read through the file mapping, every page read in and mapped at "   \
             "load), huge-pages (copied at load into "    \
             "anonymous memory on transparent huge pages, file pages given back: faster random lookups), "    \
             "locked (the mapping mlock'ed at load), disk (the mapping, left out of the memory budget)"}

#define DS_NUMA_NODES_FLAG_ROW                                                                                \
    {.name = "--numa-nodes", .type = DS_FLAG_STRING, .def = "all",                                            \
     .help = "all: the kernel places threads and memory; or node ids such as 0 or 0,1: the process runs on "  \
             "those nodes' CPUs, one worker pinned per physical core, its memory bound to the node (one) or " \
             "interleaved over them (several), and the memory plan counts their memory only"}
#define DS_THREADS_HELP "0: one per physical core of the --numa-nodes the process may run on"

#endif
