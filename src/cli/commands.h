/* Subcommand entry points of the `dsflash` binary.  Each lives in its own src/cli/cmd_*.c file and
 * returns the process exit status (TOOLS.md §0: 0 ok, 1 check failed, 2 usage, 3 I/O, 4 lock,
 * 5 input missing, 10 check-only found work). */
#ifndef DS_CLI_COMMANDS_H
#define DS_CLI_COMMANDS_H
int cmd_mkmodel(int argc, char **argv);
int cmd_generate(int argc, char **argv);
int cmd_serve(int argc, char **argv);
int cmd_reassemble(int argc, char **argv);
int cmd_split(int argc, char **argv);
int cmd_verify(int argc, char **argv);
int cmd_quantize(int argc, char **argv);
int cmd_bench(int argc, char **argv);
int cmd_bench_plot(int argc, char **argv);
int cmd_perf(int argc, char **argv);
int cmd_tokenize(int argc, char **argv);
int cmd_detokenize(int argc, char **argv);
int cmd_engram_map(int argc, char **argv);
int cmd_eval(int argc, char **argv);
/* long-context probes and gates (TOOLS.md §5, §6) */
int cmd_needle(int argc, char **argv);
int cmd_kv_walk(int argc, char **argv);
int cmd_gsm8k(int argc, char **argv);
int cmd_agent_gate(int argc, char **argv);
int cmd_multibatch_gate(int argc, char **argv);
int cmd_determinism(int argc, char **argv);
int cmd_fisher(int argc, char **argv);
#endif
