/* Flag rows and helpers shared by the probe and gate subcommands (needle, kv-walk, gsm8k,
 * agent-gate, multibatch-gate, determinism): the §0 client options appear once here so every
 * tool spells and validates them the same way. */
#ifndef DS_CLI_PROBE_CLI_H
#define DS_CLI_PROBE_CLI_H
#include "base/flags.h"
#include "tools/probe_client.h"
#include <stdlib.h>

#define DS_PROBE_CLIENT_FLAGS(json_default)                                                                   \
    {.name = "--base-url", .type = DS_FLAG_STRING, .def = "http://127.0.0.1:8000",                              \
     .help = "the OpenAI-compatible server (proxies in the environment are never used)"},                       \
    {.name = "--api-key", .type = DS_FLAG_STRING, .help = "bearer key (also DSFLASH_API_KEY)"},                \
    {.name = "--model", .type = DS_FLAG_STRING, .help = "default: /v1/models data[0].id; must be listed"},      \
    {.name = "--timeout", .type = DS_FLAG_DOUBLE, .def = "900", .dlo = 0, .dhi = 86400, .lo_open = true,        \
     .help = "seconds per request"},                                                                            \
    {.name = "--json-out", .type = DS_FLAG_STRING, .def = json_default, .help = "machine result (atomic write)"}

/* Open the session from the rows above; returns 0 or the exit status. */
static inline int ds_probe_cli_open(ds_probe *p, ds_flagset *fs, const char *tool, int argc, char **argv) {
    const char *key = ds_flag_str(fs, "--api-key");
    if (!key) key = getenv("DSFLASH_API_KEY");
    return ds_probe_open(p, tool, ds_flag_str(fs, "--base-url"), key, ds_flag_str(fs, "--model"),
                         ds_flag_double(fs, "--timeout"), argc, argv);
}

#endif
