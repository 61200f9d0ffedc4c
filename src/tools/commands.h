// The sub-commands of the vllmc executable. Each takes the arguments after
// "vllmc" (argv[0] is the command name) and returns the exit status.
#ifndef VLLMC_TOOLS_COMMANDS_H
#define VLLMC_TOOLS_COMMANDS_H

int op_parity_main(int argc, char **argv); // op_parity.c

#endif
