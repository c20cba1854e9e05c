/* The subcommand table: LB_CMD(name, one-line summary). One line each. */
LB_CMD(version, "print version and detected CPU features")
LB_CMD(quantize, "RTN / GPTQ quantization into a GPTQ checkpoint")
LB_CMD(ppl, "perplexity of a model on a text (llama.cpp or full windows)")
