/* `dsflash` — one binary, many subcommands.  This file only dispatches; each subcommand parses its
 * own options (long options, exact match only: TOOLS.md §0) in src/cli/cmd_*.c. */
#include "cli/commands.h"
#include "dsflash.h"
#include <stdio.h>
#include <string.h>

typedef struct { const char *name; int (*fn)(int, char **); const char *help; } subcommand;

static const subcommand k_cmds[] = {
    {"serve", cmd_serve, "OpenAI-compatible HTTP server"},
    {"generate", cmd_generate, "greedy generation from prompt ids or text"},
    {"mkmodel", cmd_mkmodel, "write a synthetic checkpoint in the exact release format"},
    {"reassemble", cmd_reassemble, "verify and join split Engram parts (PARTS.sha256)"},
    {"split", cmd_split, "cut a large file into parts with PARTS.sha256"},
    {"verify", cmd_verify, "structural checkpoint verifier"},
    {"verify-checkpoint", cmd_verify, "alias of verify"},
    {"quantize", cmd_quantize, "float checkpoint -> W4A8 release"},
    {"bench", cmd_bench, "concurrency benchmark client of an OpenAI-compatible server"},
    {"bench-plot", cmd_bench_plot, "SVG + CSV plots of bench results"},
    {"perf", cmd_perf, "in-process benchmarks (kernels, decode, serve)"},
    {"eval", cmd_eval, "held-out perplexity and DSpark acceptance on token files"},
    {"tokenize", cmd_tokenize, "text -> token ids"},
    {"detokenize", cmd_detokenize, "token ids -> text"},
    {"engram-map", cmd_engram_map, "write the Engram token normalization map"},
    {"needle", cmd_needle, "long-context retrieval probe"},
    {"kv-walk", cmd_kv_walk, "KV-corruption detector: per-position prompt logprobs across runs"},
    {"gsm8k", cmd_gsm8k, "GSM8K accuracy gate on JSONL files"},
    {"agent-gate", cmd_agent_gate, "tool-call gate over long documents"},
    {"multibatch-gate", cmd_multibatch_gate, "recall, batch invariance and long/short overlap gate"},
    {"determinism", cmd_determinism, "repeated-prompt determinism gate"},
    {"fisher", cmd_fisher, "two-sided Fisher exact p-value of a 2x2 table"},
};

static void usage(FILE *f) {
    fprintf(f, "usage: dsflash <command> [options]\n\ncommands:\n");
    for (size_t i = 0; i < sizeof k_cmds / sizeof k_cmds[0]; i++)
        fprintf(f, "  %-12s %s\n", k_cmds[i].name, k_cmds[i].help);
    fprintf(f, "\n`dsflash <command> --help` describes each command; `dsflash --version` prints the release.\n");
}

int main(int argc, char **argv) {
    if (argc < 2) { usage(stderr); return 2; }
    if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "help")) { usage(stdout); return 0; }
    if (!strcmp(argv[1], "--version") || !strcmp(argv[1], "version")) {
        if (argc > 2) { fprintf(stderr, "dsflash --version: expected no arguments, got '%s'\n", argv[2]); return 2; }
        printf("dsflash %s\n", DSFLASH_VERSION);
        return 0;
    }
    for (size_t i = 0; i < sizeof k_cmds / sizeof k_cmds[0]; i++)
        if (!strcmp(argv[1], k_cmds[i].name)) return k_cmds[i].fn(argc - 1, argv + 1);
    fprintf(stderr, "dsflash: unknown command '%s'\n", argv[1]);
    usage(stderr);
    return 2;
}
