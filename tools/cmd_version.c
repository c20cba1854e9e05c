/* lowbit version — version and detected CPU features. */
#include "cli.h"
#include "lowbit/kernels.h"

int cmd_version(int argc, char **argv) {
    (void)argc;
    (void)argv;
    char feats[256];
    lb_cpu_describe(feats, sizeof feats);
    /* the matmul kernel per weight type: decode (1 token), prefill (512) */
    static const lb_type types[] = {LB_TYPE_Q4_0, LB_TYPE_Q4_1, LB_TYPE_Q5_0, LB_TYPE_Q5_1,
                                    LB_TYPE_Q8_0, LB_TYPE_Q2_K, LB_TYPE_Q3_K, LB_TYPE_Q4_K,
                                    LB_TYPE_Q5_K, LB_TYPE_Q6_K, LB_TYPE_F16, LB_TYPE_BF16,
                                    LB_TYPE_F32};
    const int nt = (int)(sizeof types / sizeof types[0]);
    if (g_cli.json) {
        printf("{\"version\": \"%s\", \"cpu_features\": ", LB_VERSION_STRING);
        cli_json_string(stdout, feats);
        printf(", \"threads\": %d, \"kernels\": \"%s\", \"matmul\": {", lb_cpu_count(),
               lb_kernels_variant());
        for (int i = 0; i < nt; i++) {
            const char *d = lb_kernel_name(types[i], 1), *p = lb_kernel_name(types[i], 512);
            printf("%s\"%s\": {\"decode\": \"%s\", \"prefill\": \"%s\"}", i ? ", " : "",
                   lb_type_name(types[i]), d ? d : "", p ? p : "");
        }
        printf("}}\n");
    } else {
        printf("lowbit %s\ncpu: %s\nthreads: %d\nkernels: %s\n", LB_VERSION_STRING, feats,
               lb_cpu_count(), lb_kernels_variant());
        for (int i = 0; i < nt; i++) {
            const char *d = lb_kernel_name(types[i], 1), *p = lb_kernel_name(types[i], 512);
            printf("  %-5s decode %s, prefill %s\n", lb_type_name(types[i]), d ? d : "-",
                   p ? p : "-");
        }
    }
    return 0;
}
