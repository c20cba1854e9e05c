/*
 * cli_lora.h — the --lora PATH / --lora-scale S options shared by run,
 * ppl, parity and serve (lowbit/lora.h).
 */
#ifndef LB_CLI_LORA_H
#define LB_CLI_LORA_H

#include "lowbit/lora.h"

typedef struct cli_lora {
    int n;
    const char *path[LB_LORA_MAX_SET];
    float scale[LB_LORA_MAX_SET];
    lb_lora *ad[LB_LORA_MAX_SET];
} cli_lora;

/* If argv[*i] is --lora or --lora-scale, consume it (and its value) and
 * return 1; 0 when it is another option; -1 (after printing a usage
 * error) on a bad value. --lora-scale applies to the --lora before it. */
int cli_lora_arg(cli_lora *L, const char *cmd, int argc, char **argv, int *i);
/* Load every adapter for model m (error printed by the caller). */
lb_status cli_lora_load(cli_lora *L, const lb_model *m);
/* The set of the loaded adapters with their scales. */
lb_lora_set cli_lora_set(const cli_lora *L);
void cli_lora_free(cli_lora *L);

#define CLI_LORA_USAGE                                                        \
    "  --lora ADAPTER      LoRA adapter applied beside the weights (PEFT "   \
    "directory\n"                                                            \
    "                      or llama.cpp LoRA .gguf; repeat for several)\n"   \
    "  --lora-scale S      scale of the preceding --lora (default 1)\n"

#endif
