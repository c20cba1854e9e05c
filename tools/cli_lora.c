/* --lora / --lora-scale options (cli_lora.h). */
#include "cli.h"
#include "cli_lora.h"

#include <string.h>

int cli_lora_arg(cli_lora *L, const char *cmd, int argc, char **argv, int *i) {
    const char *a = argv[*i];
    if (!strcmp(a, "--lora")) {
        const char *v = cli_value(cmd, argc, argv, i);
        if (!v) return -1;
        if (L->n >= LB_LORA_MAX_SET) {
            cli_usage_error(cmd, "at most %d --lora adapters", LB_LORA_MAX_SET);
            return -1;
        }
        L->path[L->n] = v;
        L->scale[L->n] = 1.0f;
        L->n++;
        return 1;
    }
    if (!strcmp(a, "--lora-scale")) {
        const char *v = cli_value(cmd, argc, argv, i);
        double s;
        if (!v) return -1;
        if (!L->n) {
            cli_usage_error(cmd, "--lora-scale must follow a --lora");
            return -1;
        }
        if (!cli_parse_float(cmd, a, v, -1e6, 1e6, &s)) return -1;
        L->scale[L->n - 1] = (float)s;
        return 1;
    }
    return 0;
}

lb_status cli_lora_load(cli_lora *L, const lb_model *m) {
    for (int k = 0; k < L->n; k++)
        if (!L->ad[k]) {
            lb_status s = lb_lora_load(L->path[k], m, &L->ad[k]);
            if (s != LB_OK) return s;
        }
    return LB_OK;
}

lb_lora_set cli_lora_set(const cli_lora *L) {
    lb_lora_set s;
    memset(&s, 0, sizeof s);
    s.n = L->n;
    for (int k = 0; k < L->n; k++) {
        s.a[k] = L->ad[k];
        s.scale[k] = L->scale[k];
    }
    return s;
}

void cli_lora_free(cli_lora *L) {
    for (int k = 0; k < L->n; k++) {
        lb_lora_free(L->ad[k]);
        L->ad[k] = NULL;
    }
}
