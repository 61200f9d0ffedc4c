// The vllmc command: dispatches to the sub-commands.
#include <stdio.h>
#include <string.h>

#include "vllmc.h"

static void usage(FILE *f)
{
    fprintf(f, "usage: vllmc <command> [options]\n"
               "\n"
               "commands:\n"
               "  version    print the version\n");
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    if (!strcmp(argv[1], "version") || !strcmp(argv[1], "--version")) {
        printf("vllmc %s\n", vllmc_version());
        return 0;
    }
    if (!strcmp(argv[1], "help") || !strcmp(argv[1], "--help")) {
        usage(stdout);
        return 0;
    }
    fprintf(stderr, "vllmc: unknown command '%s'\n", argv[1]);
    usage(stderr);
    return 2;
}
