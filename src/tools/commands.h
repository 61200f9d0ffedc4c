// The sub-commands of the vllmc executable. Each takes the arguments after
// "vllmc" (argv[0] is the command name) and returns the exit status.
#ifndef VLLMC_TOOLS_COMMANDS_H
#define VLLMC_TOOLS_COMMANDS_H

int bench_main(int argc, char **argv);     // bench.c
int gen_model_main(int argc, char **argv); // gen_model.c
int generate_main(int argc, char **argv);  // generate.c
int info_main(int argc, char **argv);      // info.c
int op_parity_main(int argc, char **argv); // op_parity.c
int bench_ops_main(int argc, char **argv); // bench_ops.c
int parity_main(int argc, char **argv);    // parity.c
int tokenize_main(int argc, char **argv);  // tokenize.c
int detokenize_main(int argc, char **argv); // tokenize.c
int quantize_main(int argc, char **argv);   // quantize.c
int serve_main(int argc, char **argv);     // serve.c
int chat_template_main(int argc, char **argv); // chat_template.c

#endif
