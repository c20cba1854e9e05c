/*
 * test_tokenizer_golden.h — helpers for the tokenizer tests: reading the
 * reference JSONL lines of ../shared/reference/tokenize. cJSON's valuestring
 * is NUL-terminated and loses the length of strings holding U+0000, so the
 * string fields are decoded here from the raw line.
 */
#ifndef LB_TEST_TOKENIZER_GOLDEN_H
#define LB_TEST_TOKENIZER_GOLDEN_H

#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef struct gs_str {
    char *p;
    size_t n;
} gs_str;

static int gs_hex4(const char *s, uint32_t *v) {
    *v = 0;
    for (int i = 0; i < 4; i++) {
        char c = s[i];
        int d = c >= '0' && c <= '9' ? c - '0'
                : c >= 'a' && c <= 'f' ? c - 'a' + 10
                : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
        if (d < 0) return -1;
        *v = *v * 16 + (uint32_t)d;
    }
    return 0;
}

static void gs_put_cp(char *o, size_t *n, uint32_t cp) {
    if (cp < 0x80) o[(*n)++] = (char)cp;
    else if (cp < 0x800) {
        o[(*n)++] = (char)(0xC0 | (cp >> 6));
        o[(*n)++] = (char)(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
        o[(*n)++] = (char)(0xE0 | (cp >> 12));
        o[(*n)++] = (char)(0x80 | ((cp >> 6) & 0x3F));
        o[(*n)++] = (char)(0x80 | (cp & 0x3F));
    } else {
        o[(*n)++] = (char)(0xF0 | (cp >> 18));
        o[(*n)++] = (char)(0x80 | ((cp >> 12) & 0x3F));
        o[(*n)++] = (char)(0x80 | ((cp >> 6) & 0x3F));
        o[(*n)++] = (char)(0x80 | (cp & 0x3F));
    }
}

/* Decode the JSON string literal at s (s[0] == '"'); returns a pointer after
 * the closing quote, or NULL. out->p is malloc'd. */
static const char *gs_decode_string(const char *s, gs_str *out) {
    if (*s != '"') return NULL;
    s++;
    size_t cap = strlen(s) + 1, n = 0;
    char *o = malloc(cap + 4);
    if (!o) return NULL;
    while (*s && *s != '"') {
        if (*s != '\\') {
            o[n++] = *s++;
            continue;
        }
        s++;
        uint32_t cp;
        switch (*s) {
        case 'n': o[n++] = '\n'; s++; break;
        case 't': o[n++] = '\t'; s++; break;
        case 'r': o[n++] = '\r'; s++; break;
        case 'b': o[n++] = '\b'; s++; break;
        case 'f': o[n++] = '\f'; s++; break;
        case '/': o[n++] = '/'; s++; break;
        case '\\': o[n++] = '\\'; s++; break;
        case '"': o[n++] = '"'; s++; break;
        case 'u':
            if (gs_hex4(s + 1, &cp)) goto bad;
            s += 5;
            if (cp >= 0xD800 && cp < 0xDC00 && s[0] == '\\' && s[1] == 'u') {
                uint32_t lo;
                if (gs_hex4(s + 2, &lo)) goto bad;
                if (lo >= 0xDC00 && lo < 0xE000) {
                    cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
                    s += 6;
                }
            }
            gs_put_cp(o, &n, cp);
            break;
        default: goto bad;
        }
    }
    if (*s != '"') goto bad;
    o[n] = '\0';
    out->p = o;
    out->n = n;
    return s + 1;
bad:
    free(o);
    return NULL;
}

/* Skip one JSON value at s; returns the position after it. */
static const char *gs_skip_value(const char *s) {
    while (*s == ' ') s++;
    if (*s == '"') {
        s++;
        while (*s && *s != '"') s += (*s == '\\' && s[1]) ? 2 : 1;
        return *s ? s + 1 : s;
    }
    if (*s == '[' || *s == '{') {
        int depth = 0;
        do {
            if (*s == '"') {
                s = gs_skip_value(s);
                continue;
            }
            if (*s == '[' || *s == '{') depth++;
            if (*s == ']' || *s == '}') depth--;
            s++;
        } while (*s && depth > 0);
        return s;
    }
    while (*s && *s != ',' && *s != '}') s++;
    return s;
}

/* Find a top-level key of the one-line JSON object and decode its string
 * value. false if absent or not a string. */
static bool gs_get_string(const char *line, const char *key, gs_str *out) {
    const char *s = strchr(line, '{');
    if (!s) return false;
    s++;
    size_t kl = strlen(key);
    for (;;) {
        while (*s == ' ' || *s == ',') s++;
        if (*s != '"') return false;
        bool match = !strncmp(s + 1, key, kl) && s[1 + kl] == '"';
        s = gs_skip_value(s);
        while (*s == ' ' || *s == ':') s++;
        if (match) return gs_decode_string(s, out) != NULL;
        s = gs_skip_value(s);
    }
}

#endif
