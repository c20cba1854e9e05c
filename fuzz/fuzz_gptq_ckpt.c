/*
 * libFuzzer harness for GPTQ checkpoint reading: the input is
 *   u16 LE n, then n bytes of quantization_config JSON
 *   (lb_gptq_qconfig_parse), then a safetensors image (lb_st_parse)
 * loaded with lb_gptq_build_model (the tensor part of lb_model_load_gptq)
 * for a fixed tiny Llama config: hidden 64, 1 layer, 2 heads of 32 (2 KV
 * heads), MLP 64, vocab 32; when the JSON contains "fuzz_arch": "qwen3moe"
 * / "phi3", the same sizes as Qwen3-MoE (2 experts of 32, top 1, q/k norm;
 * per-expert GPTQ modules, the router dense) or Phi-3 (fused qkv_proj and
 * gate_up_proj) through the issue-13 layer walk. The load mode comes from
 * the length's parity.
 * Every input must either give a model whose linears are readable, or
 * fail with a status and a message — never crash, leak or read outside.
 * Seeds: fuzz/corpus/fuzz_gptq_ckpt (made by fuzz/make_gptq_seeds.py).
 */
#include "lowbit/gptq_ckpt.h"
#include "lowbit/quants.h"
#include "lowbit/safetensors.h"
#include "fuzz_ckpt_common.h"
#include "model/model_internal.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 2) return 0;
    size_t n = (size_t)data[0] | (size_t)data[1] << 8;
    if (n > size - 2) return 0;
    lb_gptq_qconfig qc;
    if (lb_gptq_qconfig_parse((const char *)data + 2, n, "fuzz", &qc) !=
        LB_OK) {
        if (lb_last_error()[0] == '\0') abort();
        return 0;
    }
    /* module settings lookups must not fail or crash */
    lb_gptq_module_cfg mc = lb_gptq_qconfig_module(&qc, "model.layers.0.mlp."
                                                        "down_proj");
    if (mc.quantized && (mc.bits < 1 || mc.group_size == 0)) abort();
    lb_safetensors *st = NULL;
    if (lb_st_parse(data + 2 + n, size - 2 - n, "fuzz", &st) != LB_OK) {
        lb_gptq_qconfig_clear(&qc);
        return 0;
    }
    lb_model_config cfg;
    const char *js = (const char *)data + 2;
    if (memmem(js, n, "\"fuzz_arch\": \"qwen3moe\"", 23)) {
        static const char moe[] =
            "{\"architectures\": [\"Qwen3MoeForCausalLM\"], \"hidden_size\": 64, "
            "\"intermediate_size\": 64, \"moe_intermediate_size\": 32, "
            "\"num_experts\": 2, \"num_experts_per_tok\": 1, \"norm_topk_prob\": true, "
            "\"num_hidden_layers\": 1, \"num_attention_heads\": 2, \"head_dim\": 32, "
            "\"num_key_value_heads\": 2, \"vocab_size\": 32, "
            "\"max_position_embeddings\": 64, \"tie_word_embeddings\": true}";
        if (lb_model_config_parse(moe, sizeof moe - 1, "cfg", &cfg) != LB_OK) abort();
    } else if (memmem(js, n, "\"fuzz_arch\": \"phi3\"", 19)) {
        static const char phi[] =
            "{\"architectures\": [\"Phi3ForCausalLM\"], \"hidden_size\": 64, "
            "\"intermediate_size\": 64, \"num_hidden_layers\": 1, "
            "\"num_attention_heads\": 2, \"num_key_value_heads\": 2, "
            "\"vocab_size\": 32, \"max_position_embeddings\": 64, "
            "\"tie_word_embeddings\": true}";
        if (lb_model_config_parse(phi, sizeof phi - 1, "cfg", &cfg) != LB_OK) abort();
    } else {
        fuzz_ckpt_config(&cfg);
    }
    lb_model_load_opts o;
    memset(&o, 0, sizeof o);
    o.gptq_mode = (lb_gptq_load_mode)(size % 4);
    lb_model *m = NULL;
    lb_status s = lb_gptq_build_model(&cfg, &qc, st, true, "fuzz", &o, &m);
    fuzz_ckpt_check(s, m);
    lb_model_config_clear(&cfg);
    lb_gptq_qconfig_clear(&qc);
    return 0;
}
