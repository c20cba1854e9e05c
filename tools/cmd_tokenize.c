/* lowbit tokenize — text to token ids (tokenizer.json or a GGUF
 * vocabulary), printed like llama.cpp's llama-tokenize ("%6d -> 'piece'"
 * per token) or as JSON. */
#include "cli.h"

#include "lowbit/tokenizer.h"

#include <stdlib.h>
#include <string.h>

static void usage(FILE *fp) {
    fprintf(fp,
            "usage: lowbit tokenize MODEL (TEXT | -) [options]\n\n"
            "MODEL is a model directory, a tokenizer.json file or a .gguf file (its\n"
            "tokenizer.ggml.* vocabulary, tokenized as llama.cpp does); TEXT '-' reads\n"
            "standard input. Prints one line per token: `id -> 'piece'`.\n\n"
            "options:\n"
            "  --no-special        do not add special tokens (BOS / template)\n"
            "  --no-parse-special  treat special tokens written in TEXT as text\n"
            "  --json              print {\"ids\": [...]}\n");
}

static char *read_stdin(size_t *len) {
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap);
    if (!buf) return NULL;
    for (;;) {
        if (n == cap) {
            char *nb = cap < ((size_t)1 << 30) ? realloc(buf, cap * 2) : NULL;
            if (!nb) {
                free(buf);
                return NULL;
            }
            buf = nb;
            cap *= 2;
        }
        size_t r = fread(buf + n, 1, cap - n, stdin);
        n += r;
        if (r == 0) break;
    }
    if (ferror(stdin)) {
        free(buf);
        return NULL;
    }
    *len = n;
    return buf;
}

int cmd_tokenize(int argc, char **argv) {
    const char *model = NULL, *text = NULL;
    unsigned flags = LB_TOK_ADD_SPECIAL;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            return 0;
        } else if (!strcmp(a, "--no-special")) {
            flags &= ~LB_TOK_ADD_SPECIAL;
        } else if (!strcmp(a, "--no-parse-special")) {
            flags |= LB_TOK_PLAIN_SPECIAL;
        } else if (a[0] == '-' && a[1] == '-') {
            return cli_usage_error("tokenize", "unknown option %s", a);
        } else if (!model) {
            model = a;
        } else if (!text) {
            text = a;
        } else {
            return cli_usage_error("tokenize", "unexpected argument '%s'", a);
        }
    }
    if (!model || !text) return cli_usage_error("tokenize", "needs MODEL and TEXT (or -)");

    char *owned = NULL;
    size_t len;
    if (!strcmp(text, "-")) {
        owned = read_stdin(&len);
        if (!owned) {
            fprintf(stderr, "lowbit tokenize: error: cannot read standard input\n");
            return 1;
        }
        text = owned;
    } else {
        len = strlen(text);
    }

    lb_tokenizer *tok = NULL;
    lb_status st = lb_tokenizer_load(model, &tok);
    if (st != LB_OK) {
        free(owned);
        return cli_fail("tokenize", st);
    }
    int32_t *ids = NULL;
    size_t n = 0;
    st = lb_tokenizer_encode_ex(tok, text, len, flags, &ids, NULL, &n);
    free(owned);
    if (st != LB_OK) {
        lb_tokenizer_free(tok);
        return cli_fail("tokenize", st);
    }
    int rc = 0;
    if (g_cli.json) {
        fputs("{\"ids\": [", stdout);
        for (size_t i = 0; i < n; i++) printf(i ? ", %d" : "%d", ids[i]);
        fputs("]}\n", stdout);
    } else {
        char small[256];
        for (size_t i = 0; i < n && rc == 0; i++) {
            int k = lb_tokenizer_token_to_piece(tok, ids[i], small, sizeof small);
            if (k < 0) {
                rc = cli_fail("tokenize", LB_ERR_INTERNAL);
                break;
            }
            char *piece = small;
            if ((size_t)k >= sizeof small) {
                piece = malloc((size_t)k + 1);
                if (!piece || lb_tokenizer_token_to_piece(tok, ids[i], piece, (size_t)k + 1) != k) {
                    free(piece);
                    rc = cli_fail("tokenize", LB_ERR_NOMEM);
                    break;
                }
            }
            printf("%6d -> '", ids[i]);
            fwrite(piece, 1, (size_t)k, stdout);
            fputs("'\n", stdout);
            if (piece != small) free(piece);
        }
    }
    if (fflush(stdout) != 0) rc = 1;
    free(ids);
    lb_tokenizer_free(tok);
    return rc;
}
