/* Flag rows of the model load that serve, generate and perf decode|serve share (one text for all). */
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

#endif
