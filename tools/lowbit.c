/* lowbit — command-line entry point: dispatches to tools/cmd_*.c. */
#include "cli.h"

#include <string.h>

typedef struct cli_command {
    const char *name;
    const char *summary;
    int (*fn)(int, char **);
} cli_command;

static const cli_command commands[] = {
#define LB_CMD(name, summary) {#name, summary, cmd_##name},
#include "commands.h"
#undef LB_CMD
};

static void usage(FILE *fp) {
    fprintf(fp, "lowbit %s — post-training quantization and CPU inference "
                "for LLMs\n\nusage: lowbit COMMAND [options]\n\ncommands:\n",
            LB_VERSION_STRING);
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        fprintf(fp, "  %-10s %s\n", commands[i].name, commands[i].summary);
    fprintf(fp, "\nglobal options (any command): --quiet, --json, -v\n"
                "run `lowbit COMMAND --help` for a command's options\n");
}

int main(int argc, char **argv) {
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    if (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help") ||
        !strcmp(argv[1], "help")) {
        usage(stdout);
        return 0;
    }
    if (!strcmp(argv[1], "--version")) argv[1] = "version";
    /* Global flags may appear anywhere after the command; strip them. */
    int n = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--quiet") || !strcmp(argv[i], "-q"))
            g_cli.quiet = true;
        else if (!strcmp(argv[i], "--json"))
            g_cli.json = true;
        else if (!strcmp(argv[i], "-v") || !strcmp(argv[i], "--verbose"))
            g_cli.verbose++;
        else if (!strcmp(argv[i], "--")) {
            /* keep the rest verbatim */
            for (; i < argc; i++) argv[1 + n++] = argv[i];
            break;
        } else
            argv[1 + n++] = argv[i];
    }
    argc = 1 + n;
    argv[argc] = NULL;
    cli_install_logger();
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        if (!strcmp(argv[1], commands[i].name))
            return commands[i].fn(argc - 1, argv + 1);
    fprintf(stderr, "lowbit: unknown command '%s'\n\n", argv[1]);
    usage(stderr);
    return 2;
}
