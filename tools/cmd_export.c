/* lowbit export / lowbit plan — GGUF export of a HF or GPTQ checkpoint. */
#include "cli.h"

#include "lowbit/export.h"
#include "lowbit/export_hf.h"
#include "lowbit/file.h"

#include <stdlib.h>
#include <string.h>

#define MAX_RULES 256

static void usage(FILE *fp, const char *cmd) {
    bool plan = !strcmp(cmd, "plan");
    fprintf(fp,
            "usage: lowbit %s IN%s [options]\n"
            "\n"
            "%s IN (a Hugging Face checkpoint directory: dense F32/F16/BF16,\n"
            "or a GPTQ checkpoint in the AutoGPTQ/GPTQModel layout)%s.\n"
            "\n"
            "Routes: direct (GPTQ codes mapped losslessly: 4-bit zero 8 -> Q4_0,\n"
            "4-bit asym -> Q4_1, 8-bit zero 128 -> Q8_0), mixed (a GPTQ module that\n"
            "cannot go direct, dequantized -> 2:Q2_K 3:Q3_K 4:Q4_K 8:Q8_0), fallback\n"
            "(dequantize/convert -> lowbit's quantizer, llama.cpp's per-tensor\n"
            "--qtype mix), keep (F32/F16/BF16).\n"
            "\n"
            "%s"
            "  (IN a PEFT LoRA directory: llama.cpp LoRA GGUF; --base MODEL)\n"
            "  --mode M              auto (default) | direct | mixed | dequantize\n"
            "  --qtype T             Q4_0 Q4_1 Q8_0 Q2_K Q6_K Q3_K_M Q4_K_M Q5_K_M\n"
            "                        F16 BF16 F32 (llama-quantize file types and\n"
            "                        their mix) or Q3_K Q4_K Q5_K (that type for\n"
            "                        every quantizable tensor). Default: GPTQ input\n"
            "                        keeps unquantized tensors as stored; dense\n"
            "                        input F16 (BF16 for a BF16 checkpoint)\n"
            "  --output-type T       type of output.weight (any GGUF type name)\n"
            "  --embedding-type T    type of token_embd.weight\n"
            "  --modules RULE        REGEX=SPEC (repeatable; or @FILE, one rule a\n"
            "                        line): SPEC = type name, bits (2 3 4 5 6 8 16)\n"
            "                        or keep; REGEX is searched in the HF module name\n"
            "  --name NAME           general.name (default: from the directory name)\n"
            "  --vocab-only          metadata only, no tensors\n"
            "  -t, --threads N       quantizer threads (default: all CPUs)\n"
            "%s"
            "global: --quiet, --json\n",
            cmd, plan ? "" : " -o OUT.gguf",
            plan ? "Show how lowbit export would write" : "Write",
            plan ? ": per tensor the route, the GGUF type and the reason"
                 : " as a GGUF file for llama.cpp and lowbit, streaming one\n"
                   "tensor at a time; the file appears only when complete",
            plan ? "" : "  -o, --output OUT      output .gguf file (required)\n",
            plan ? "" :
            "\nGGUF back to Hugging Face: lowbit export MODEL.gguf -o DIR --format hf|gptq\n"
            "  --format F            gguf (default) | hf (dequantized safetensors,\n"
            "                        config.json, tokenizer.json) | gptq (Q4_0/Q4_1/\n"
            "                        Q8_0 linears as GPTQ group-32 codes, the rest dense)\n"
            "  --dtype D             hf/gptq dense tensors: f32 | f16 | bf16 (default:\n"
            "                        the file's 16-bit type if all 2-D tensors have it,\n"
            "                        else f32)\n");
}

typedef struct rules_buf {
    char *rule[MAX_RULES];
    int n;
    char *file_text[8];
    int n_files;
} rules_buf;

static bool add_rules(const char *cmd, rules_buf *rb, const char *v) {
    if (v[0] != '@') {
        if (rb->n == MAX_RULES) {
            cli_usage_error(cmd, "too many --modules rules (max %d)", MAX_RULES);
            return false;
        }
        rb->rule[rb->n++] = (char *)v;
        return true;
    }
    if (rb->n_files == 8) {
        cli_usage_error(cmd, "too many --modules @FILE (max 8)");
        return false;
    }
    char *text;
    size_t len;
    lb_status s = lb_read_file(v + 1, 1 << 20, &text, &len);
    if (s != LB_OK) {
        cli_fail(cmd, s);
        return false;
    }
    rb->file_text[rb->n_files++] = text;
    for (char *save = NULL, *line = strtok_r(text, "\n", &save); line;
         line = strtok_r(NULL, "\n", &save)) {
        while (*line == ' ' || *line == '\t') line++;
        size_t l = strlen(line);
        while (l && (line[l - 1] == '\r' || line[l - 1] == ' ')) line[--l] = '\0';
        if (!*line || *line == '#') continue;
        if (rb->n == MAX_RULES) {
            cli_usage_error(cmd, "too many --modules rules (max %d)", MAX_RULES);
            return false;
        }
        rb->rule[rb->n++] = line;
    }
    return true;
}

static void rules_free(rules_buf *rb) {
    for (int i = 0; i < rb->n_files; i++) free(rb->file_text[i]);
}

static bool parse_type(const char *cmd, const char *opt, const char *v, int *out) {
    int t = lb_type_from_name(v);
    if (t < 0) {
        cli_usage_error(cmd, "%s: unknown type '%s'", opt, v);
        return false;
    }
    *out = t;
    return true;
}

static void print_shape(FILE *fp, const lb_export_tensor *e) {
    fputc('[', fp);
    for (int d = 0; d < e->n_dims; d++) fprintf(fp, "%s%lld", d ? ", " : "", (long long)e->shape[d]);
    fputc(']', fp);
}

static void print_plan_json(FILE *fp, const lb_export_plan *p, bool tensors) {
    fprintf(fp, "\"arch\": ");
    cli_json_string(fp, p->arch);
    fprintf(fp, ", \"hf_arch\": ");
    cli_json_string(fp, p->hf_arch);
    fprintf(fp, ", \"gptq\": %s, \"mode\": \"%s\", \"qtype\": ", p->gptq ? "true" : "false",
            lb_export_mode_name(p->mode));
    if (p->has_qtype) cli_json_string(fp, lb_export_qtype_name(p->qtype));
    else fputs("null", fp);
    fprintf(fp, ", \"file_type\": \"%s\", \"tokenizer_model\": ", lb_ftype_name(p->file_type));
    cli_json_string(fp, p->tokenizer_model);
    fprintf(fp, ", \"tokenizer_pre\": ");
    cli_json_string(fp, p->tokenizer_pre);
    fprintf(fp, ", \"tokenizer_warning\": ");
    cli_json_string(fp, p->tokenizer_warning);
    fprintf(fp, ", \"n_tensors\": %zu, \"routes\": {", p->n_tensors);
    for (int r = 0; r < LB_EXPORT_ROUTE_COUNT_; r++)
        fprintf(fp, "%s\"%s\": %d", r ? ", " : "", lb_export_route_name((lb_export_route)r),
                p->n_route[r]);
    fprintf(fp, "}, \"n_params\": %llu, \"data_bytes\": %zu, \"file_bytes\": %zu, \"notes\": ",
            (unsigned long long)p->n_params, p->data_bytes, p->file_bytes);
    cli_json_string(fp, p->notes);
    if (!tensors) return;
    fprintf(fp, ", \"tensors\": [");
    for (size_t i = 0; i < p->n_tensors; i++) {
        const lb_export_tensor *e = &p->tensors[i];
        fprintf(fp, "%s\n  {\"name\": ", i ? "," : "");
        cli_json_string(fp, e->name);
        fprintf(fp, ", \"source\": ");
        cli_json_string(fp, e->source);
        fprintf(fp, ", \"route\": \"%s\", \"type\": \"%s\", \"src_type\": %s%s%s, \"bits\": %d, "
                    "\"group_size\": %d, \"sym\": %s, \"desc_act\": %s, \"permuted\": %s, "
                    "\"shape\": ",
                lb_export_route_name(e->route), lb_type_name(e->type),
                e->src_type >= 0 ? "\"" : "", e->src_type >= 0 ? lb_type_name(e->src_type) : "null",
                e->src_type >= 0 ? "\"" : "", e->bits, e->group_size, e->sym ? "true" : "false",
                e->desc_act ? "true" : "false", e->permuted ? "true" : "false");
        print_shape(fp, e);
        fprintf(fp, ", \"wanted_type\": \"%s\"", lb_type_name(e->wanted_type));
        fprintf(fp, ", \"bytes\": %zu, \"reason\": ", e->nbytes);
        cli_json_string(fp, e->reason);
        fputc('}', fp);
    }
    fprintf(fp, "\n]");
}

static void print_plan_text(FILE *fp, const lb_export_plan *p) {
    fprintf(fp, "architecture: %s (%s)%s\n", p->arch, p->hf_arch, p->awq ? ", AWQ (gemm) checkpoint" : p->gptq ? ", GPTQ checkpoint" : "");
    fprintf(fp, "mode: %s, qtype: %s, general.file_type: %s\n", lb_export_mode_name(p->mode),
            p->has_qtype ? lb_export_qtype_name(p->qtype) : "(none)", lb_ftype_name(p->file_type));
    fprintf(fp, "tokenizer: %s%s%s\n", p->tokenizer_model, p->tokenizer_pre[0] ? ", pre " : "",
            p->tokenizer_pre);
    size_t wn = 4, ws = 6;
    for (size_t i = 0; i < p->n_tensors; i++) {
        if (strlen(p->tensors[i].name) > wn) wn = strlen(p->tensors[i].name);
        if (strlen(p->tensors[i].source) > ws) ws = strlen(p->tensors[i].source);
    }
    fprintf(fp, "\n%-*s  %-*s  %-8s  %-5s  %s\n", (int)wn, "tensor", (int)ws, "source", "route",
            "type", "reason");
    for (size_t i = 0; i < p->n_tensors; i++) {
        const lb_export_tensor *e = &p->tensors[i];
        fprintf(fp, "%-*s  %-*s  %-8s  %-5s  %s\n", (int)wn, e->name, (int)ws, e->source,
                lb_export_route_name(e->route), lb_type_name(e->type), e->reason);
    }
    fprintf(fp, "\n%zu tensors: %d keep, %d direct, %d mixed, %d fallback; %llu parameters, "
                "%.2f MB (%.3f bits/weight)\n",
            p->n_tensors, p->n_route[0], p->n_route[1], p->n_route[2], p->n_route[3],
            (unsigned long long)p->n_params, (double)p->file_bytes / 1e6,
            p->n_params ? 8.0 * (double)p->data_bytes / (double)p->n_params : 0.0);
    if (p->notes[0]) fprintf(fp, "notes: %s\n", p->notes);
    if (p->tokenizer_warning[0]) fprintf(fp, "WARNING (tokenizer): %s\n", p->tokenizer_warning);
}

/* GPTQ modules that were dequantized and quantized again (mixed/fallback
 * routes: not lossless), and tensors written in another type than asked
 * (row fallback). Listed by name, at most `cap` each (0: all). */
static bool is_requantized(const lb_export_plan *p, const lb_export_tensor *e) {
    return p->gptq && e->bits > 0 &&
           (e->route == LB_EXPORT_ROUTE_MIXED || e->route == LB_EXPORT_ROUTE_FALLBACK);
}

static void print_lists_text(FILE *fp, const lb_export_plan *p, size_t cap) {
    for (int pass = 0; pass < 2; pass++) {
        size_t n = 0, shown = 0;
        for (size_t i = 0; i < p->n_tensors; i++) {
            const lb_export_tensor *e = &p->tensors[i];
            bool in = pass == 0 ? is_requantized(p, e) : e->type != e->wanted_type;
            if (!in) continue;
            if (n++ == 0)
                fprintf(fp, "lowbit export: %s", pass == 0
                        ? "re-quantized GPTQ modules (dequantized, not lossless): "
                        : "warning: written in another type than asked (rows not a multiple "
                          "of the type's block): ");
            if (cap && shown == cap) continue;
            if (pass == 0)
                fprintf(fp, "%s%s -> %s", shown ? ", " : "", e->source, lb_type_name(e->type));
            else
                fprintf(fp, "%s%s %s -> %s", shown ? ", " : "", e->name,
                        lb_type_name(e->wanted_type), lb_type_name(e->type));
            shown++;
        }
        if (n > shown) fprintf(fp, ", and %zu more (lowbit plan lists all)", n - shown);
        if (n) fputc('\n', fp);
    }
}

static void print_lists_json(FILE *fp, const lb_export_plan *p) {
    for (int pass = 0; pass < 2; pass++) {
        fprintf(fp, ", \"%s\": [", pass == 0 ? "requantized" : "substituted");
        size_t n = 0;
        for (size_t i = 0; i < p->n_tensors; i++) {
            const lb_export_tensor *e = &p->tensors[i];
            bool in = pass == 0 ? is_requantized(p, e) : e->type != e->wanted_type;
            if (!in) continue;
            fprintf(fp, "%s{\"name\": ", n++ ? ", " : "");
            cli_json_string(fp, e->name);
            fprintf(fp, ", \"source\": ");
            cli_json_string(fp, e->source);
            fprintf(fp, ", \"type\": \"%s\", \"wanted_type\": \"%s\"}", lb_type_name(e->type),
                    lb_type_name(e->wanted_type));
        }
        fputc(']', fp);
    }
}

/* --format hf|gptq: a GGUF file back to a Hugging Face directory */
static int export_hf(const char *cmd, const char *in, const char *out, const char *format,
                     int dtype) {
    lb_export_hf_opts ho;
    lb_export_hf_opts_default(&ho);
    ho.dtype = dtype;
    cli_progress prog;
    ho.progress = cli_progress_make(&prog);
    lb_export_hf_stats hs;
    lb_status s = !strcmp(format, "hf") ? lb_export_gguf_to_hf(in, out, &ho, &hs)
                                        : lb_export_gguf_to_gptq(in, out, &ho, &hs);
    cli_progress_done(&prog);
    if (s != LB_OK) return cli_fail(cmd, s);
    if (g_cli.json) {
        fprintf(stdout, "{\"output\": ");
        cli_json_string(stdout, out);
        fprintf(stdout, ", \"format\": \"%s\", \"dtype\": \"%s\", \"n_tensors\": %zu, "
                        "\"n_dequantized\": %zu, \"n_gptq\": %zu, \"tokenizer\": %s, "
                        "\"permuted\": %s, \"notes\": ",
                format, lb_type_name(hs.dtype), hs.n_tensors, hs.n_dequantized, hs.n_gptq,
                hs.tokenizer ? "true" : "false", hs.permuted ? "true" : "false");
        cli_json_string(stdout, hs.notes);
        fputs("}\n", stdout);
    } else if (!g_cli.quiet) {
        fprintf(stderr, "lowbit export: wrote %s (%s): %zu tensors in %s (%zu dequantized, %zu as "
                        "GPTQ codes)%s%s\n",
                out, format, hs.n_tensors, lb_type_name(hs.dtype), hs.n_dequantized, hs.n_gptq,
                hs.permuted ? ", llama q/k permutation undone" : "",
                hs.tokenizer ? ", tokenizer" : "");
        if (hs.notes[0]) fprintf(stderr, "lowbit export: note: %s\n", hs.notes);
    }
    return 0;
}

static int export_main(int argc, char **argv, bool plan_only) {
    const char *cmd = plan_only ? "plan" : "export";
    const char *in = NULL, *out = NULL, *format = "gguf";
    int hf_dtype = -1;
    lb_export_opts o;
    lb_export_opts_default(&o);
    rules_buf rb;
    memset(&rb, 0, sizeof rb);
    int rc = 2;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout, cmd);
            rules_free(&rb);
            return 0;
        }
#define VAL() \
    do { if (!(v = cli_value(cmd, argc, argv, &i))) goto done; } while (0)
        if (!plan_only && (!strcmp(a, "-o") || !strcmp(a, "--output"))) {
            VAL();
            out = v;
        } else if (!strcmp(a, "--mode")) {
            VAL();
            int m = lb_export_mode_from_name(v);
            if (m < 0) {
                cli_usage_error(cmd, "--mode: expected auto, direct, mixed or dequantize, got '%s'", v);
                goto done;
            }
            o.mode = (lb_export_mode)m;
        } else if (!strcmp(a, "--qtype")) {
            VAL();
            lb_export_qtype q;
            if (lb_export_qtype_parse(v, &q) != LB_OK) {
                cli_usage_error(cmd, "--qtype: %s", lb_last_error());
                goto done;
            }
            o.qtype = v;
        } else if (!strcmp(a, "--output-type")) {
            VAL();
            if (!parse_type(cmd, a, v, &o.output_type)) goto done;
        } else if (!strcmp(a, "--embedding-type") || !strcmp(a, "--token-embedding-type")) {
            VAL();
            if (!parse_type(cmd, a, v, &o.embedding_type)) goto done;
        } else if (!strcmp(a, "--modules")) {
            VAL();
            if (!add_rules(cmd, &rb, v)) goto done;
        } else if (!strcmp(a, "--name")) {
            VAL();
            o.name = v;
        } else if (!plan_only && !strcmp(a, "--format")) {
            VAL();
            if (strcmp(v, "gguf") && strcmp(v, "hf") && strcmp(v, "gptq")) {
                cli_usage_error(cmd, "--format: expected gguf, hf or gptq, got '%s'", v);
                goto done;
            }
            format = v;
        } else if (!plan_only && !strcmp(a, "--dtype")) {
            VAL();
            if (!strcmp(v, "f32") || !strcmp(v, "F32")) hf_dtype = LB_TYPE_F32;
            else if (!strcmp(v, "f16") || !strcmp(v, "F16")) hf_dtype = LB_TYPE_F16;
            else if (!strcmp(v, "bf16") || !strcmp(v, "BF16")) hf_dtype = LB_TYPE_BF16;
            else {
                cli_usage_error(cmd, "--dtype: expected f32, f16 or bf16, got '%s'", v);
                goto done;
            }
        } else if (!strcmp(a, "--vocab-only")) {
            o.vocab_only = true;
        } else if (!strcmp(a, "-t") || !strcmp(a, "--threads")) {
            VAL();
            long t;
            if (!cli_parse_int(cmd, a, v, 1, 4096, &t)) goto done;
            o.n_threads = (int)t;
        } else if (a[0] == '-' && a[1]) {
            cli_usage_error(cmd, "unknown option %s", a);
            goto done;
        } else if (!in) {
            in = a;
        } else {
            cli_usage_error(cmd, "unexpected argument '%s'", a);
            goto done;
        }
#undef VAL
    }
    if (!in) {
        cli_usage_error(cmd, "missing input checkpoint directory");
        goto done;
    }
    if (!plan_only && !out) {
        cli_usage_error(cmd, "missing -o OUT.gguf");
        goto done;
    }
    if (strcmp(format, "gguf")) {
        rc = export_hf(cmd, in, out, format, hf_dtype);
        goto done;
    }
    if (hf_dtype >= 0) {
        cli_usage_error(cmd, "--dtype applies to --format hf|gptq");
        goto done;
    }
    o.rules = (const char *const *)rb.rule;
    o.n_rules = rb.n;
    lb_export_plan *plan = NULL;
    if (plan_only) {
        lb_status s = lb_export_plan_make(in, &o, &plan);
        if (s != LB_OK) {
            rc = cli_fail(cmd, s);
            goto done;
        }
        if (g_cli.json) {
            fputc('{', stdout);
            print_plan_json(stdout, plan, true);
            fputs("}\n", stdout);
        } else
            print_plan_text(stdout, plan);
        lb_export_plan_free(plan);
        rc = 0;
        goto done;
    }
    cli_progress prog;
    o.progress = cli_progress_make(&prog);
    lb_export_stats st;
    lb_status s = lb_export_gguf(in, out, &o, &plan, &st);
    cli_progress_done(&prog);
    if (s != LB_OK) {
        rc = cli_fail(cmd, s);
        goto done;
    }
    if (g_cli.json) {
        fputc('{', stdout);
        fprintf(stdout, "\"output\": ");
        cli_json_string(stdout, out);
        fprintf(stdout, ", \"seconds\": %.3f, \"bytes_in\": %llu, \"bytes_out\": %llu, "
                        "\"mb_per_s\": %.1f, \"peak_buffer_bytes\": %zu, ",
                st.seconds, (unsigned long long)st.bytes_in, (unsigned long long)st.bytes_out,
                st.mb_per_s, st.peak_buffer_bytes);
        print_plan_json(stdout, plan, false);
        print_lists_json(stdout, plan);
        fputs("}\n", stdout);
    } else if (!g_cli.quiet) {
        fprintf(stderr, "lowbit export: wrote %s: %zu tensors (%d keep, %d direct, %d mixed, "
                        "%d fallback), %s, %.2f MB in %.2f s (%.1f MB/s read)\n",
                out, st.n_tensors, st.n_route[0], st.n_route[1], st.n_route[2], st.n_route[3],
                lb_ftype_name(st.file_type), (double)st.bytes_out / 1e6, st.seconds, st.mb_per_s);
        if (plan->notes[0]) fprintf(stderr, "lowbit export: note: %s\n", plan->notes);
        print_lists_text(stderr, plan, 64);
        if (plan->tokenizer_warning[0])
            fprintf(stderr, "lowbit export: WARNING: the GGUF tokenizer differs from "
                    "tokenizer.json: %s\n", plan->tokenizer_warning);
    }
    lb_export_plan_free(plan);
    rc = 0;
done:
    rules_free(&rb);
    return rc;
}

int cli_export_adapter(int argc, char **argv);
bool cli_is_adapter_export(int argc, char **argv);
int cmd_export(int argc, char **argv) {
    /* a PEFT LoRA directory: llama.cpp LoRA GGUF (cmd_export_lora.c) */
    if (cli_is_adapter_export(argc, argv)) return cli_export_adapter(argc, argv);
    return export_main(argc, argv, false);
}
int cmd_plan(int argc, char **argv) { return export_main(argc, argv, true); }
