/*
 * Task files (lowbit/eval_task.h): JSON Lines of multiple-choice items and
 * rolling log-likelihood documents. Input is hostile: every field is
 * checked and errors name the file and line.
 */
#include "lowbit/eval_task.h"
#include "core/internal.h"

#include <cjson/cJSON.h>
#include <stdlib.h>

static void item_free(lb_task_item *it) {
    free(it->context);
    if (it->choices)
        for (int32_t i = 0; i < it->n_choices; i++) free(it->choices[i]);
    free(it->choices);
    free(it->text);
    memset(it, 0, sizeof *it);
}

void lb_task_free(lb_task *t) {
    if (!t) return;
    for (int64_t i = 0; i < t->n_items; i++) item_free(&t->items[i]);
    free(t->items);
    free(t);
}

static char *dup_cstr(const char *s) {
    size_t n = strlen(s);
    char *d = malloc(n + 1);
    if (d) memcpy(d, s, n + 1);
    return d;
}

/* One parsed line into *it. Returns LB_OK or an error naming name:line. */
static lb_status parse_line(const char *name, int64_t line, const char *s,
                            size_t n, lb_task_item *it) {
    memset(it, 0, sizeof *it);
    it->line = line;
    cJSON *root = cJSON_ParseWithLength(s, n);
    if (!root)
        return lb_set_error(LB_ERR_FORMAT, "%s:%lld: not valid JSON", name,
                            (long long)line);
    lb_status st = LB_OK;
    if (!cJSON_IsObject(root)) {
        st = lb_set_error(LB_ERR_FORMAT, "%s:%lld: a JSON object expected",
                          name, (long long)line);
        goto done;
    }
    const cJSON *text = cJSON_GetObjectItemCaseSensitive(root, "text");
    const cJSON *ctx = cJSON_GetObjectItemCaseSensitive(root, "context");
    const cJSON *ch = cJSON_GetObjectItemCaseSensitive(root, "choices");
    const cJSON *gold = cJSON_GetObjectItemCaseSensitive(root, "gold");
    const cJSON *fs = cJSON_GetObjectItemCaseSensitive(root, "fewshot");
    if (text && (ctx || ch || gold)) {
        st = lb_set_error(LB_ERR_FORMAT, "%s:%lld: both \"text\" (a rolling "
                          "document) and multiple-choice fields", name,
                          (long long)line);
        goto done;
    }
    if (fs && !cJSON_IsBool(fs)) {
        st = lb_set_error(LB_ERR_FORMAT, "%s:%lld: \"fewshot\" must be true "
                          "or false", name, (long long)line);
        goto done;
    }
    if (text) {
        if (!cJSON_IsString(text) || !text->valuestring[0]) {
            st = lb_set_error(LB_ERR_FORMAT, "%s:%lld: \"text\" must be a "
                              "non-empty string", name, (long long)line);
            goto done;
        }
        if (fs && cJSON_IsTrue(fs)) {
            st = lb_set_error(LB_ERR_FORMAT, "%s:%lld: a rolling document "
                              "cannot be a few-shot item", name,
                              (long long)line);
            goto done;
        }
        it->kind = LB_TASK_ROLLING;
        if (!(it->text = dup_cstr(text->valuestring))) goto nomem;
        goto done;
    }
    if (!ctx && !ch && !gold) {
        st = lb_set_error(LB_ERR_FORMAT, "%s:%lld: neither a multiple-choice "
                          "item (\"context\", \"choices\", \"gold\") nor a "
                          "document (\"text\")", name, (long long)line);
        goto done;
    }
    if (!ctx || !cJSON_IsString(ctx)) {
        st = lb_set_error(LB_ERR_FORMAT, "%s:%lld: \"context\" %s", name,
                          (long long)line,
                          ctx ? "must be a string" : "missing");
        goto done;
    }
    if (!ch || !cJSON_IsArray(ch)) {
        st = lb_set_error(LB_ERR_FORMAT, "%s:%lld: \"choices\" %s", name,
                          (long long)line,
                          ch ? "must be an array of strings" : "missing");
        goto done;
    }
    int nc = cJSON_GetArraySize(ch);
    if (nc < 2 || nc > LB_TASK_MAX_CHOICES) {
        st = lb_set_error(LB_ERR_FORMAT, "%s:%lld: %d choices (2..%d "
                          "expected)", name, (long long)line, nc,
                          LB_TASK_MAX_CHOICES);
        goto done;
    }
    if (!gold) {
        st = lb_set_error(LB_ERR_FORMAT, "%s:%lld: \"gold\" missing", name,
                          (long long)line);
        goto done;
    }
    double gv = cJSON_IsNumber(gold) ? gold->valuedouble : -1.5;
    /* range first: converting a double outside int64's range is undefined
     * (fuzz_task found 1.8e59) */
    if (!cJSON_IsNumber(gold) || !(gv > -1e15 && gv < 1e15) ||
        gv != (double)(int64_t)gv) {
        st = lb_set_error(LB_ERR_FORMAT, "%s:%lld: \"gold\" must be an "
                          "integer index into \"choices\"", name,
                          (long long)line);
        goto done;
    }
    if (gv < 0 || gv >= nc) {
        st = lb_set_error(LB_ERR_FORMAT, "%s:%lld: \"gold\" %.0f outside the "
                          "%d choices (0..%d)", name, (long long)line, gv, nc,
                          nc - 1);
        goto done;
    }
    it->kind = LB_TASK_CHOICE;
    it->gold = (int32_t)gv;
    it->fewshot = fs && cJSON_IsTrue(fs);
    if (!(it->context = dup_cstr(ctx->valuestring))) goto nomem;
    if (!(it->choices = calloc((size_t)nc, sizeof(char *)))) goto nomem;
    it->n_choices = nc;
    for (int i = 0; i < nc; i++) {
        const cJSON *c = cJSON_GetArrayItem(ch, i);
        if (!cJSON_IsString(c)) {
            st = lb_set_error(LB_ERR_FORMAT, "%s:%lld: choice %d is not a "
                              "string", name, (long long)line, i);
            goto done;
        }
        if (!c->valuestring[0]) {
            st = lb_set_error(LB_ERR_FORMAT, "%s:%lld: choice %d is empty",
                              name, (long long)line, i);
            goto done;
        }
        if (!(it->choices[i] = dup_cstr(c->valuestring))) goto nomem;
    }
    goto done;
nomem:
    st = lb_set_error(LB_ERR_NOMEM, "%s:%lld: out of memory", name,
                      (long long)line);
done:
    cJSON_Delete(root);
    if (st != LB_OK) item_free(it);
    return st;
}

lb_status lb_task_parse(const char *data, size_t len, const char *name,
                        lb_task **out) {
    if (!out) return lb_set_error(LB_ERR_INVALID_ARG, "task: NULL output");
    *out = NULL;
    if (!data && len) return lb_set_error(LB_ERR_INVALID_ARG, "task: NULL data");
    if (!name) name = "task";
    lb_task *t = calloc(1, sizeof *t);
    if (!t) return lb_set_error(LB_ERR_NOMEM, "%s: out of memory", name);
    size_t cap = 0;
    int64_t line = 0;
    lb_status st = LB_OK;
    for (size_t pos = 0; pos < len && st == LB_OK;) {
        const char *s = data + pos;
        const char *nl = memchr(s, '\n', len - pos);
        size_t n = nl ? (size_t)(nl - s) : len - pos;
        pos += n + (nl ? 1 : 0);
        line++;
        size_t m = n;
        if (m && s[m - 1] == '\r') m--;
        bool blank = true;
        for (size_t i = 0; i < m && blank; i++)
            blank = s[i] == ' ' || s[i] == '\t';
        if (blank) continue;
        if (memchr(s, '\0', m)) {
            st = lb_set_error(LB_ERR_FORMAT, "%s:%lld: NUL byte in the line",
                              name, (long long)line);
            break;
        }
        if ((size_t)t->n_items == cap) {
            size_t nc = cap ? cap * 2 : 64;
            lb_task_item *ni = realloc(t->items, nc * sizeof *ni);
            if (!ni) {
                st = lb_set_error(LB_ERR_NOMEM, "%s: out of memory", name);
                break;
            }
            t->items = ni;
            cap = nc;
        }
        lb_task_item *it = &t->items[t->n_items];
        st = parse_line(name, line, s, m, it);
        if (st != LB_OK) break;
        t->n_items++;
        if (it->kind == LB_TASK_ROLLING) t->n_rolling++;
        else if (it->fewshot) t->n_fewshot++;
        else t->n_choice++;
    }
    if (st == LB_OK && t->n_choice + t->n_rolling == 0)
        st = lb_set_error(LB_ERR_FORMAT, "%s: no item to score (%lld lines%s)",
                          name, (long long)line,
                          t->n_fewshot ? ", only few-shot items" : "");
    if (st != LB_OK) {
        lb_task_free(t);
        return st;
    }
    *out = t;
    return LB_OK;
}

int64_t lb_utf8_length(const char *s, size_t len) {
    int64_t n = 0;
    for (size_t i = 0; i < len; i++)
        if (((unsigned char)s[i] & 0xC0) != 0x80) n++;
    return n;
}

/* Decode one UTF-8 code point at s[*i] (advancing *i); invalid bytes give
 * -1 and advance one byte. */
static int32_t next_cp(const unsigned char *s, size_t len, size_t *i) {
    unsigned c = s[*i];
    int need = c < 0x80 ? 0 : (c >> 5) == 6 ? 1 : (c >> 4) == 14 ? 2
               : (c >> 3) == 30 ? 3 : -1;
    if (need == 0) {
        (*i)++;
        return (int32_t)c;
    }
    if (need < 0 || *i + (size_t)need >= len) {
        (*i)++;
        return -1;
    }
    int32_t cp = (int32_t)(c & (0x3Fu >> need));
    for (int k = 1; k <= need; k++) {
        unsigned b = s[*i + (size_t)k];
        if ((b & 0xC0) != 0x80) {
            (*i)++;
            return -1;
        }
        cp = (cp << 6) | (int32_t)(b & 0x3F);
    }
    *i += (size_t)need + 1;
    return cp;
}

/* Python 3 str.isspace / re's \s for str patterns. */
static bool py_space(int32_t c) {
    if (c >= 0x09 && c <= 0x0D) return true;
    if (c >= 0x1C && c <= 0x20) return true;
    switch (c) {
    case 0x85: case 0xA0: case 0x1680: case 0x2028: case 0x2029:
    case 0x202F: case 0x205F: case 0x3000:
        return true;
    }
    return c >= 0x2000 && c <= 0x200A;
}

int64_t lb_count_words(const char *s, size_t len) {
    int64_t runs = 0;
    bool in = false;
    const unsigned char *u = (const unsigned char *)s;
    for (size_t i = 0; i < len;) {
        bool sp = py_space(next_cp(u, len, &i));
        if (sp && !in) runs++;
        in = sp;
    }
    return runs + 1;
}
