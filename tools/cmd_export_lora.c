/*
 * lowbit export ADAPTER_DIR -o adapter.gguf [--base MODEL]: a PEFT LoRA
 * adapter (or a llama.cpp LoRA GGUF) to a llama.cpp LoRA GGUF
 * (lowbit/lora.h lb_lora_write_gguf). Reached from cmd_export when IN holds
 * an adapter_config.json.
 */
#include "cli.h"
#include "cli_lora.h"

#include "lowbit/file.h"
#include "lowbit/model.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int cli_export_adapter(int argc, char **argv);
bool cli_is_adapter_export(int argc, char **argv);

/* The first positional argument of export is a directory with an
 * adapter_config.json. */
bool cli_is_adapter_export(int argc, char **argv) {
    static const char *const with_value[] = {
        "-o", "--output", "--mode", "--qtype", "--output-type", "--embedding-type",
        "--token-embedding-type", "--modules", "--name", "-t", "--threads", "--base"};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        bool skip = false;
        for (size_t k = 0; k < sizeof with_value / sizeof *with_value; k++)
            if (!strcmp(a, with_value[k])) skip = true;
        if (skip) {
            i++;
            continue;
        }
        if (a[0] == '-' && a[1]) continue;
        char *p = lb_path_join(a, "adapter_config.json");
        bool yes = p && lb_is_dir(a) && lb_is_file(p);
        free(p);
        return yes;
    }
    return false;
}

/* base_model_name_or_path of the adapter when it names a local path. */
static char *base_from_config(const char *dir) {
    char *p = lb_path_join(dir, "adapter_config.json"), *json = NULL, *res = NULL;
    size_t n = 0;
    if (p && lb_read_file(p, 1 << 24, &json, &n) == LB_OK) {
        cJSON *c = cJSON_ParseWithLength(json, n);
        const cJSON *b = cJSON_GetObjectItemCaseSensitive(c, "base_model_name_or_path");
        if (cJSON_IsString(b) && (lb_is_dir(b->valuestring) || lb_is_file(b->valuestring)))
            res = strdup(b->valuestring);
        cJSON_Delete(c);
    }
    lb_clear_error();
    free(json);
    free(p);
    return res;
}

int cli_export_adapter(int argc, char **argv) {
    const char *cmd = "export";
    const char *in = NULL, *out = NULL, *base = NULL;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v;
        if (!strcmp(a, "-o") || !strcmp(a, "--output")) {
            if (!(v = cli_value(cmd, argc, argv, &i))) return 2;
            out = v;
        } else if (!strcmp(a, "--base")) {
            if (!(v = cli_value(cmd, argc, argv, &i))) return 2;
            base = v;
        } else if (a[0] == '-' && a[1]) {
            return cli_usage_error(cmd, "%s: not an option of adapter export "
                                   "(ADAPTER_DIR -o OUT.gguf [--base MODEL])", a);
        } else if (!in) {
            in = a;
        } else {
            return cli_usage_error(cmd, "unexpected argument '%s'", a);
        }
    }
    if (!out) return cli_usage_error(cmd, "missing -o OUT.gguf");
    char *bcfg = base ? NULL : base_from_config(in);
    if (!base && !bcfg)
        return cli_usage_error(cmd, "adapter export needs the base model: --base "
                               "MODEL (adapter_config.json's "
                               "base_model_name_or_path is not a local path)");
    lb_model *m = NULL;
    lb_lora *ad = NULL;
    lb_model_load_opts lo = {0};
    lb_status st = lb_model_load(base ? base : bcfg, &lo, &m);
    if (st == LB_OK) st = lb_lora_load(in, m, &ad);
    if (st == LB_OK) st = lb_lora_write_gguf(ad, &m->config, out);
    int rc = 0;
    if (st != LB_OK)
        rc = cli_fail(cmd, st);
    else if (!g_cli.quiet)
        printf("export: LoRA adapter %s (rank %d, alpha %g, %lld parameters) -> %s\n",
               lb_lora_name(ad), lb_lora_rank(ad), (double)lb_lora_alpha(ad),
               (long long)lb_lora_n_params(ad), out);
    lb_lora_free(ad);
    lb_model_free(m);
    free(bcfg);
    return rc;
}
