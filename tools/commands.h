/* The subcommand table: LB_CMD(name, one-line summary). One line each. */
LB_CMD(version, "print version and detected CPU features")
LB_CMD(inspect, "show a GGUF file's tensors, bits/weight and metadata")
LB_CMD(bench, "prefill/decode tokens per second (like llama-bench)")
