/*
 * safetensors reader/writer: round trips (all dtypes, metadata, producers,
 * sharding) and one test per kind of bad input.
 */
#include "th.h"

#include "lowbit/file.h"
#include "lowbit/safetensors.h"

#include <dirent.h>
#include <sys/stat.h>

/* A safetensors image: u64 header length, header, data_len bytes (i&0xff). */
static uint8_t *make_image(const char *hdr, size_t data_len, size_t *size) {
    size_t h = strlen(hdr);
    *size = 8 + h + data_len;
    uint8_t *p = malloc(*size);
    uint64_t n = h;
    memcpy(p, &n, 8);
    memcpy(p + 8, hdr, h);
    for (size_t i = 0; i < data_len; i++) p[8 + h + i] = (uint8_t)i;
    return p;
}

/* Parse hdr+data from memory expecting status want; the error message must
 * contain `needle` (if given). */
static void expect_parse(const char *hdr, size_t data_len, lb_status want,
                         const char *needle) {
    size_t n;
    uint8_t *img = make_image(hdr, data_len, &n);
    lb_safetensors *st = NULL;
    TH_CHECK_FAILS(lb_st_parse(img, n, "bad.safetensors", &st), want);
    TH_CHECK(st == NULL);
    TH_CHECK_MSG(strstr(lb_last_error(), "bad.safetensors") != NULL,
                 "message lacks the file: %s", lb_last_error());
    if (needle)
        TH_CHECK_MSG(strstr(lb_last_error(), needle) != NULL,
                     "message lacks '%s': %s", needle, lb_last_error());
    free(img);
}

static void write_bytes(const char *path, const void *p, size_t n) {
    FILE *f = fopen(path, "wb");
    TH_CHECK(f != NULL);
    if (!f) return;
    TH_CHECK(fwrite(p, 1, n, f) == n);
    fclose(f);
}

static void test_parse_minimal(void) {
    /* hand-written file: two F32 tensors and metadata */
    const char *hdr = "{\"__metadata__\":{\"format\":\"pt\"},"
                      "\"b\":{\"dtype\":\"F32\",\"shape\":[2],"
                      "\"data_offsets\":[8,16]},"
                      "\"a\":{\"dtype\":\"F32\",\"shape\":[1,2],"
                      "\"data_offsets\":[0,8]}}   ";
    size_t n;
    uint8_t *img = make_image(hdr, 16, &n);
    lb_safetensors *st = NULL;
    TH_CHECK_OK(lb_st_parse(img, n, NULL, &st));
    TH_CHECK_INT(lb_st_count(st), 2);
    const lb_tensor *a = lb_st_find(st, "a"), *b = lb_st_find(st, "b");
    TH_CHECK(a && b);
    if (a && b) {
        TH_CHECK_STR(lb_st_tensor_at(st, 0)->name, "a"); /* name order */
        TH_CHECK_INT(a->n_dims, 2);
        TH_CHECK_INT(a->shape[1], 2);
        TH_CHECK_INT(a->type, LB_TYPE_F32);
        TH_CHECK(a->data == img + 8 + strlen(hdr));
        TH_CHECK(b->data == img + 8 + strlen(hdr) + 8);
        TH_CHECK_INT(b->nbytes, 8);
        TH_CHECK_STR(lb_st_tensor_file(st, b), "<memory>");
    }
    TH_CHECK(lb_st_find(st, "c") == NULL);
    TH_CHECK_STR(lb_st_metadata(st, "format"), "pt");
    TH_CHECK(lb_st_metadata(st, "nope") == NULL);
    TH_CHECK_INT(lb_st_metadata_count(st), 1);
    lb_st_close(st);
    free(img);
}

static void test_round_trip_all_dtypes(void) {
    static const lb_type types[] = {LB_TYPE_F64, LB_TYPE_F32, LB_TYPE_F16,
                                    LB_TYPE_BF16, LB_TYPE_I64, LB_TYPE_I32,
                                    LB_TYPE_I16, LB_TYPE_I8,  LB_TYPE_U8,
                                    LB_TYPE_BOOL};
    const size_t nt = sizeof types / sizeof *types;
    uint8_t buf[10][3 * 5 * 8];
    lb_st_writer *w = NULL;
    TH_CHECK_OK(lb_st_writer_create(&w));
    TH_CHECK_OK(lb_st_writer_set_metadata(w, "format", "pt"));
    TH_CHECK_OK(lb_st_writer_set_metadata(w, "note", "quote \" and \\ and \n"));
    TH_CHECK_OK(lb_st_writer_set_metadata(w, "format", "lowbit")); /* replace */
    for (size_t i = 0; i < nt; i++) {
        for (size_t j = 0; j < sizeof buf[i]; j++)
            buf[i][j] = (uint8_t)(j * 7 + i);
        if (types[i] == LB_TYPE_BOOL)
            for (size_t j = 0; j < sizeof buf[i]; j++) buf[i][j] &= 1;
        char name[32];
        snprintf(name, sizeof name, "t.%s", lb_st_dtype_name(types[i]));
        int64_t shape[2] = {3, 5};
        TH_CHECK_OK(lb_st_writer_add(w, name, types[i], 2, shape, buf[i]));
    }
    float scalar = 2.5f;
    TH_CHECK_OK(lb_st_writer_add(w, "scalar", LB_TYPE_F32, 0, NULL, &scalar));
    int64_t zshape[2] = {0, 4};
    TH_CHECK_OK(lb_st_writer_add(w, "empty", LB_TYPE_F32, 2, zshape, NULL));
    /* writer argument errors */
    int64_t sh1[1] = {1};
    TH_CHECK_FAILS(lb_st_writer_add(w, "scalar", LB_TYPE_F32, 1, sh1, &scalar),
                   LB_ERR_INVALID_ARG);
    TH_CHECK_FAILS(lb_st_writer_add(w, "q", LB_TYPE_Q4_0, 1, sh1, &scalar),
                   LB_ERR_INVALID_ARG);
    TH_CHECK_FAILS(lb_st_writer_add(w, "__metadata__", LB_TYPE_F32, 1, sh1,
                                    &scalar),
                   LB_ERR_INVALID_ARG);

    char p1[600], p2[600];
    snprintf(p1, sizeof p1, "%s/rt1.safetensors", th_tmpdir());
    snprintf(p2, sizeof p2, "%s/rt2.safetensors", th_tmpdir());
    TH_CHECK_OK(lb_st_writer_write_file(w, p1));
    TH_CHECK_OK(lb_st_writer_write_file(w, p2));
    lb_st_writer_free(w);
    /* deterministic bytes */
    size_t n1 = 0, n2 = 0;
    uint8_t *f1 = th_read_bin(p1, &n1), *f2 = th_read_bin(p2, &n2);
    TH_CHECK(f1 && f2 && n1 == n2 && memcmp(f1, f2, n1) == 0);
    /* data area 8-byte aligned, header padded with spaces */
    uint64_t hl = 0;
    if (f1) memcpy(&hl, f1, 8);
    TH_CHECK_INT((8 + hl) % 8, 0);
    TH_CHECK(f1 && f1[8] == '{');
    free(f1);
    free(f2);

    lb_safetensors *st = NULL;
    TH_CHECK_OK(lb_st_open(p1, &st));
    TH_CHECK_INT(lb_st_count(st), nt + 2);
    TH_CHECK_INT(lb_st_shard_count(st), 1);
    for (size_t i = 0; st && i < nt; i++) {
        char name[32];
        snprintf(name, sizeof name, "t.%s", lb_st_dtype_name(types[i]));
        const lb_tensor *t = lb_st_find(st, name);
        TH_CHECK_MSG(t != NULL, "%s missing", name);
        if (!t) continue;
        size_t esz = (size_t)lb_type_get_traits(types[i])->type_size;
        TH_CHECK_INT(t->type, types[i]);
        TH_CHECK_INT(t->n_dims, 2);
        TH_CHECK_INT(t->shape[0], 3);
        TH_CHECK_INT(t->shape[1], 5);
        TH_CHECK_INT(t->nbytes, 15 * esz);
        TH_CHECK(memcmp(t->data, buf[i], 15 * esz) == 0);
        TH_CHECK_STR(lb_st_tensor_file(st, t), p1);
    }
    const lb_tensor *s = lb_st_find(st, "scalar");
    TH_CHECK(s && s->n_dims == 0 && s->nbytes == 4 &&
             memcmp(s->data, &scalar, 4) == 0);
    const lb_tensor *e = lb_st_find(st, "empty");
    TH_CHECK(e && e->nbytes == 0 && e->shape[0] == 0 && e->shape[1] == 4);
    TH_CHECK_STR(lb_st_metadata(st, "format"), "lowbit");
    TH_CHECK_STR(lb_st_metadata(st, "note"), "quote \" and \\ and \n");
    lb_st_close(st);
}

/* Producer: writes floats i * scale in chunks of 3 elements. */
typedef struct prod {
    float scale;
    int64_t n;
    int fail_mode; /* 0 ok, 1 return error, 2 write too little, 3 too much */
    int calls;
} prod;

static lb_status produce(void *user, const char *name, lb_st_sink *sink,
                         size_t nbytes) {
    prod *p = user;
    p->calls++;
    if (p->fail_mode == 1)
        return lb_set_error(LB_ERR_CANCELLED, "producer for %s stops", name);
    if (nbytes != (size_t)p->n * 4)
        return lb_set_error(LB_ERR_INTERNAL, "wrong nbytes");
    int64_t n = p->fail_mode == 2 ? p->n - 1 : p->n + (p->fail_mode == 3);
    for (int64_t i = 0; i < n; i += 3) {
        float chunk[3];
        int64_t k = n - i < 3 ? n - i : 3;
        for (int64_t j = 0; j < k; j++) chunk[j] = (float)(i + j) * p->scale;
        lb_status st = lb_st_sink_write(sink, chunk, (size_t)k * 4);
        if (st != LB_OK) return st;
    }
    return LB_OK;
}

static int count_dir_entries(const char *dir) {
    DIR *d = opendir(dir);
    int n = 0;
    if (!d) return -1;
    for (struct dirent *e; (e = readdir(d));)
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) n++;
    closedir(d);
    return n;
}

static void test_producer_and_sharding(void) {
    char dir[600];
    snprintf(dir, sizeof dir, "%s/sharded", th_tmpdir());
    mkdir(dir, 0755);
    prod pr[6];
    lb_st_writer *w = NULL;
    TH_CHECK_OK(lb_st_writer_create(&w));
    TH_CHECK_OK(lb_st_writer_set_metadata(w, "format", "pt"));
    for (int i = 0; i < 6; i++) {
        pr[i] = (prod){(float)(i + 1), 10 + i, 0, 0};
        char name[32];
        snprintf(name, sizeof name, "layer.%d.w", i);
        int64_t sh[1] = {pr[i].n};
        TH_CHECK_OK(lb_st_writer_add_fn(w, name, LB_TYPE_F32, 1, sh, produce,
                                        &pr[i]));
    }
    /* 40,44,...,60 bytes; 120-byte shards -> 2 tensors per shard = 3 shards */
    int nsh = 0;
    TH_CHECK_OK(lb_st_writer_write_dir(w, dir, 120, &nsh));
    TH_CHECK_INT(nsh, 3);
    for (int i = 0; i < 6; i++) TH_CHECK_INT(pr[i].calls, 1);
    char p[700];
    snprintf(p, sizeof p, "%s/model-00002-of-00003.safetensors", dir);
    TH_CHECK(lb_is_file(p));
    TH_CHECK_INT(count_dir_entries(dir), 4); /* 3 shards + index, no temp */
    snprintf(p, sizeof p, "%s/model.safetensors.index.json", dir);
    size_t n = 0;
    char *idx = th_read_bin(p, &n);
    TH_CHECK(idx && strstr(idx, "\"total_size\": 300"));
    TH_CHECK(idx && strstr(idx, "\"layer.5.w\": "
                                "\"model-00003-of-00003.safetensors\""));
    free(idx);
    lb_safetensors *st = NULL;
    TH_CHECK_OK(lb_st_open(dir, &st));
    TH_CHECK_INT(lb_st_count(st), 6);
    TH_CHECK_INT(lb_st_shard_count(st), 3);
    TH_CHECK_STR(lb_st_metadata(st, "format"), "pt");
    for (int i = 0; st && i < 6; i++) {
        char name[32];
        snprintf(name, sizeof name, "layer.%d.w", i);
        const lb_tensor *t = lb_st_find(st, name);
        TH_CHECK(t && t->shape[0] == 10 + i);
        if (!t) continue;
        const float *f = t->data;
        for (int j = 0; j < 10 + i; j++)
            TH_CHECK_NEAR(f[j], (float)j * (float)(i + 1), 0);
        char want[64];
        snprintf(want, sizeof want, "model-%05d-of-00003.safetensors",
                 i / 2 + 1);
        TH_CHECK(strstr(lb_st_tensor_file(st, t), want) != NULL);
    }
    lb_st_close(st);
    /* opening the index file itself works too */
    TH_CHECK_OK(lb_st_open(p, &st));
    TH_CHECK_INT(lb_st_count(st), 6);
    lb_st_close(st);

    /* failures leave nothing behind: error in shard 2's producer */
    char dir2[600];
    snprintf(dir2, sizeof dir2, "%s/failed", th_tmpdir());
    mkdir(dir2, 0755);
    for (int mode = 1; mode <= 3; mode++) {
        pr[3].fail_mode = mode;
        lb_status want = mode == 1 ? LB_ERR_CANCELLED : LB_ERR_INVALID_ARG;
        TH_CHECK_FAILS(lb_st_writer_write_dir(w, dir2, 120, &nsh), want);
        TH_CHECK(strstr(lb_last_error(), "layer.3.w") != NULL);
        TH_CHECK_INT(count_dir_entries(dir2), 0);
        snprintf(p, sizeof p, "%s/one.safetensors", dir2);
        TH_CHECK_FAILS(lb_st_writer_write_file(w, p), want);
        TH_CHECK_INT(count_dir_entries(dir2), 0);
    }
    pr[3].fail_mode = 0;
    /* unsharded write_dir: one model.safetensors */
    TH_CHECK_OK(lb_st_writer_write_dir(w, dir2, 0, &nsh));
    TH_CHECK_INT(nsh, 1);
    TH_CHECK_INT(count_dir_entries(dir2), 1);
    snprintf(p, sizeof p, "%s/model.safetensors", dir2);
    TH_CHECK(lb_is_file(p));
    lb_st_writer_free(w);
}

static void test_bad_headers(void) {
    /* truncated: fewer than 8 bytes */
    lb_safetensors *st = NULL;
    TH_CHECK_FAILS(lb_st_parse("abc", 3, "bad.safetensors", &st),
                   LB_ERR_FORMAT);
    TH_CHECK(strstr(lb_last_error(), "truncated"));
    /* header length beyond the file */
    {
        uint8_t img[16] = {0};
        uint64_t n = 1000;
        memcpy(img, &n, 8);
        TH_CHECK_FAILS(lb_st_parse(img, sizeof img, "bad.safetensors", &st),
                       LB_ERR_FORMAT);
        TH_CHECK(strstr(lb_last_error(), "beyond the file"));
        n = UINT64_MAX; /* absurd: must not wrap around */
        memcpy(img, &n, 8);
        TH_CHECK_FAILS(lb_st_parse(img, sizeof img, "bad.safetensors", &st),
                       LB_ERR_FORMAT);
    }
    expect_parse("{\"a\": {\"dtype\": \"F32\", \"sha", 0, LB_ERR_FORMAT,
                 "not valid JSON");
    expect_parse("not json at all", 0, LB_ERR_FORMAT, "JSON");
    expect_parse("[1, 2, 3]", 0, LB_ERR_FORMAT, "not a JSON object");
    expect_parse("{} trailing", 0, LB_ERR_FORMAT, "trailing");
    /* out-of-range offsets */
    expect_parse("{\"w\":{\"dtype\":\"F32\",\"shape\":[4],"
                 "\"data_offsets\":[0,16]}}",
                 8, LB_ERR_FORMAT, "'w'");
    expect_parse("{\"w\":{\"dtype\":\"F32\",\"shape\":[1],"
                 "\"data_offsets\":[8,4]}}",
                 8, LB_ERR_FORMAT, "'w'");
    /* overlapping */
    expect_parse("{\"x\":{\"dtype\":\"F32\",\"shape\":[2],"
                 "\"data_offsets\":[0,8]},"
                 "\"y\":{\"dtype\":\"F32\",\"shape\":[2],"
                 "\"data_offsets\":[4,12]}}",
                 12, LB_ERR_FORMAT, "overlap");
    /* size mismatch dtype x shape vs offsets */
    expect_parse("{\"w\":{\"dtype\":\"F16\",\"shape\":[2,3],"
                 "\"data_offsets\":[0,8]}}",
                 8, LB_ERR_FORMAT, "'w'");
    /* shape product overflow */
    expect_parse("{\"w\":{\"dtype\":\"F32\",\"shape\":[4294967296,"
                 "4294967296],\"data_offsets\":[0,8]}}",
                 8, LB_ERR_FORMAT, "'w'");
    /* duplicate names */
    expect_parse("{\"w\":{\"dtype\":\"U8\",\"shape\":[1],"
                 "\"data_offsets\":[0,1]},"
                 "\"w\":{\"dtype\":\"U8\",\"shape\":[1],"
                 "\"data_offsets\":[1,2]}}",
                 2, LB_ERR_FORMAT, "duplicate tensor name 'w'");
    /* negative / non-integer numbers, too many dims, bad fields */
    expect_parse("{\"w\":{\"dtype\":\"U8\",\"shape\":[-1],"
                 "\"data_offsets\":[0,1]}}",
                 1, LB_ERR_FORMAT, "'w'");
    expect_parse("{\"w\":{\"dtype\":\"U8\",\"shape\":[1],"
                 "\"data_offsets\":[0,1.5]}}",
                 2, LB_ERR_FORMAT, "'w'");
    expect_parse("{\"w\":{\"dtype\":\"U8\",\"shape\":[1,1,1,1,1],"
                 "\"data_offsets\":[0,1]}}",
                 1, LB_ERR_FORMAT, "dims");
    expect_parse("{\"w\":{\"dtype\":\"U8\",\"shape\":\"1\","
                 "\"data_offsets\":[0,1]}}",
                 1, LB_ERR_FORMAT, "shape");
    expect_parse("{\"w\":{\"shape\":[1],\"data_offsets\":[0,1]}}", 1,
                 LB_ERR_FORMAT, "dtype");
    expect_parse("{\"w\":{\"dtype\":\"U8\",\"shape\":[1],"
                 "\"data_offsets\":[0]}}",
                 1, LB_ERR_FORMAT, "data_offsets");
    expect_parse("{\"w\":{\"dtype\":\"F8_E8M0\",\"shape\":[1],"
                 "\"data_offsets\":[0,1]}}",
                 1, LB_ERR_UNSUPPORTED, "F8_E8M0");
    expect_parse("{\"__metadata__\":{\"k\":1}}", 0, LB_ERR_FORMAT,
                 "__metadata__");
    expect_parse("{\"w\":[1,2]}", 0, LB_ERR_FORMAT, "'w'");

    /* the same through a real file: truncated data area */
    const char *hdr = "{\"w\":{\"dtype\":\"F32\",\"shape\":[4],"
                      "\"data_offsets\":[0,16]}}";
    size_t n;
    uint8_t *img = make_image(hdr, 16, &n);
    char p[600];
    snprintf(p, sizeof p, "%s/trunc.safetensors", th_tmpdir());
    write_bytes(p, img, n - 4);
    TH_CHECK_FAILS(lb_st_open(p, &st), LB_ERR_FORMAT);
    TH_CHECK(strstr(lb_last_error(), p) && strstr(lb_last_error(), "'w'"));
    write_bytes(p, img, n);
    TH_CHECK_OK(lb_st_open(p, &st));
    lb_st_close(st);
    free(img);
    snprintf(p, sizeof p, "%s/does-not-exist.safetensors", th_tmpdir());
    TH_CHECK_FAILS(lb_st_open(p, &st), LB_ERR_NOT_FOUND);
}

/* Write shard files a/b and an index into a fresh dir. */
static void make_index_dir(const char *dir, const char *index) {
    mkdir(dir, 0755);
    size_t n;
    char p[700];
    uint8_t *img = make_image("{\"x\":{\"dtype\":\"U8\",\"shape\":[2],"
                              "\"data_offsets\":[0,2]}}",
                              2, &n);
    snprintf(p, sizeof p, "%s/a.safetensors", dir);
    write_bytes(p, img, n);
    free(img);
    img = make_image("{\"y\":{\"dtype\":\"U8\",\"shape\":[2],"
                     "\"data_offsets\":[0,2]}}",
                     2, &n);
    snprintf(p, sizeof p, "%s/b.safetensors", dir);
    write_bytes(p, img, n);
    free(img);
    snprintf(p, sizeof p, "%s/model.safetensors.index.json", dir);
    write_bytes(p, index, strlen(index));
}

static void test_bad_index(void) {
    char dir[600];
    lb_safetensors *st = NULL;
    snprintf(dir, sizeof dir, "%s/idx-ok", th_tmpdir());
    make_index_dir(dir, "{\"metadata\":{},\"weight_map\":{\"x\":"
                        "\"a.safetensors\",\"y\":\"b.safetensors\"}}");
    TH_CHECK_OK(lb_st_open(dir, &st));
    TH_CHECK_INT(lb_st_count(st), 2);
    lb_st_close(st);

    snprintf(dir, sizeof dir, "%s/idx-missing", th_tmpdir());
    make_index_dir(dir, "{\"weight_map\":{\"x\":\"a.safetensors\","
                        "\"z\":\"c.safetensors\"}}");
    TH_CHECK_FAILS(lb_st_open(dir, &st), LB_ERR_NOT_FOUND);
    TH_CHECK(strstr(lb_last_error(), "c.safetensors"));

    snprintf(dir, sizeof dir, "%s/idx-wrong-shard", th_tmpdir());
    make_index_dir(dir, "{\"weight_map\":{\"x\":\"b.safetensors\","
                        "\"y\":\"b.safetensors\"}}");
    TH_CHECK_FAILS(lb_st_open(dir, &st), LB_ERR_FORMAT);
    TH_CHECK(strstr(lb_last_error(), "'x'") &&
             strstr(lb_last_error(), "b.safetensors"));

    snprintf(dir, sizeof dir, "%s/idx-absent-tensor", th_tmpdir());
    make_index_dir(dir, "{\"weight_map\":{\"x\":\"a.safetensors\","
                        "\"q\":\"a.safetensors\"}}");
    TH_CHECK_FAILS(lb_st_open(dir, &st), LB_ERR_FORMAT);
    TH_CHECK(strstr(lb_last_error(), "'q'"));

    snprintf(dir, sizeof dir, "%s/idx-escape", th_tmpdir());
    make_index_dir(dir, "{\"weight_map\":{\"x\":\"../a.safetensors\"}}");
    TH_CHECK_FAILS(lb_st_open(dir, &st), LB_ERR_FORMAT);

    snprintf(dir, sizeof dir, "%s/idx-no-map", th_tmpdir());
    make_index_dir(dir, "{\"metadata\":{}}");
    TH_CHECK_FAILS(lb_st_open(dir, &st), LB_ERR_FORMAT);
    TH_CHECK(strstr(lb_last_error(), "weight_map"));

    snprintf(dir, sizeof dir, "%s/idx-not-json", th_tmpdir());
    make_index_dir(dir, "{\"weight_map\": ");
    TH_CHECK_FAILS(lb_st_open(dir, &st), LB_ERR_FORMAT);

    /* the same tensor in two shards */
    snprintf(dir, sizeof dir, "%s/idx-dup", th_tmpdir());
    make_index_dir(dir, "{\"weight_map\":{\"x\":\"a.safetensors\","
                        "\"y\":\"c.safetensors\"}}");
    {
        size_t n;
        char p[700];
        uint8_t *img = make_image("{\"x\":{\"dtype\":\"U8\",\"shape\":[2],"
                                  "\"data_offsets\":[0,2]}}",
                                  2, &n);
        snprintf(p, sizeof p, "%s/c.safetensors", dir);
        write_bytes(p, img, n);
        free(img);
    }
    TH_CHECK_FAILS(lb_st_open(dir, &st), LB_ERR_FORMAT);
    TH_CHECK(strstr(lb_last_error(), "duplicate tensor name 'x'"));

    snprintf(dir, sizeof dir, "%s/empty-dir", th_tmpdir());
    mkdir(dir, 0755);
    TH_CHECK_FAILS(lb_st_open(dir, &st), LB_ERR_NOT_FOUND);
}

static void test_real_checkpoint(void) {
    lb_safetensors *st = NULL;
    TH_CHECK_OK(lb_st_open(th_shared("models/random/qwen2-random/"
                                     "model.safetensors"),
                           &st));
    TH_CHECK_INT(lb_st_count(st), 27); /* random/meta.json "keys" */
    const lb_tensor *t = lb_st_find(st, "model.layers.0.self_attn.k_proj.bias");
    TH_CHECK(t && t->n_dims == 1 && t->shape[0] == 32 &&
             t->type == LB_TYPE_F32);
    TH_CHECK_STR(lb_st_metadata(st, "format"), "pt");
    lb_st_close(st);
    TH_CHECK_OK(lb_st_open(th_shared("models/random/"
                                     "llama-gqa-llama3rope-bf16-random"),
                           &st));
    TH_CHECK_INT(lb_st_count(st), 21);
    t = lb_st_find(st, "lm_head.weight");
    TH_CHECK(t && t->type == LB_TYPE_BF16 && t->shape[0] == 512 &&
             t->shape[1] == 128);
    lb_st_close(st);
}

int main(void) {
    TH_RUN(test_parse_minimal);
    TH_RUN(test_round_trip_all_dtypes);
    TH_RUN(test_producer_and_sharding);
    TH_RUN(test_bad_headers);
    TH_RUN(test_bad_index);
    TH_RUN(test_real_checkpoint);
    return th_report();
}
