/* lowbit version — version and detected CPU features. */
#include "cli.h"

int cmd_version(int argc, char **argv) {
    (void)argc;
    (void)argv;
    char feats[256];
    lb_cpu_describe(feats, sizeof feats);
    if (g_cli.json) {
        printf("{\"version\": \"%s\", \"cpu_features\": ", LB_VERSION_STRING);
        cli_json_string(stdout, feats);
        printf(", \"threads\": %d}\n", lb_cpu_count());
    } else {
        printf("lowbit %s\ncpu: %s\nthreads: %d\n", LB_VERSION_STRING, feats,
               lb_cpu_count());
    }
    return 0;
}
