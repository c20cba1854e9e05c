/* The subcommand table: LB_CMD(name, one-line summary). One line each. */
LB_CMD(version, "print version and detected CPU features")
LB_CMD(run, "generate text from a model (HF dir, GPTQ checkpoint or GGUF)")
LB_CMD(tokenize, "show the token ids and pieces of a text")
LB_CMD(inspect, "show a model file's tensors, bits/weight and metadata")
LB_CMD(quantize, "RTN / GPTQ quantization into a GPTQ checkpoint")
LB_CMD(ppl, "perplexity of a model on a text (llama.cpp or full windows)")
LB_CMD(serve, "OpenAI-compatible HTTP server (completions, chat, streaming)")
LB_CMD(bench, "prefill/decode tokens per second (like llama-bench)")
