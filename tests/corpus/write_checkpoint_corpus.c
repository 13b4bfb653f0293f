/* tests/corpus/write_checkpoint_corpus.c: writes the committed checkpoint corpus, a good file
 * and the damaged files made from it, into $TG_CORPUS_DIR:
 *
 *   TG_CORPUS_DIR=tests/data/checkpoints build/tests/write_checkpoint_corpus
 *
 * Not part of the test run: the corpus is kept as written, so that files from this version of
 * the format keep being refused (or, the good one, loaded) by every later version. The kinds
 * of damage: truncations; single flipped bytes over the length, the header and the data, left
 * unsealed as a disk would leave them; one-digit edits of the metadata and swapped tensor
 * offsets, also unsealed; header edits sealed again, so that the checks behind the checksum
 * see them; and files that are not checkpoints at all. */
#include "checkpoint_corpus.h"
#include "checkpoint_files.h"

#include <sys/stat.h>

static const char *out_dir;

static void write_file(const char *name, const void *bytes, size_t size)
{
    char path[512];
    snprintf(path, sizeof path, "%s/%s.safetensors", out_dir, name);
    cf_write(path, bytes, size);
}

static cf_blob copy(cf_blob b)
{
    cf_blob c = {malloc(b.size + 1), b.size};
    memcpy(c.bytes, b.bytes, b.size);
    return c;
}

/* The good file: the model's values by formula, one AdamW step, then saved. */
static cf_blob write_good(void)
{
    tg_optim *optim;
    tg_params *params = fuzz_model_build(&optim);
    cr_assert(params, "%s", tg_last_error());
    for (size_t i = 0; i < tg_params_count(params); i++) {
        tg_tensor *p = tg_params_get(params, i);
        for (int64_t j = 0; j < tg_numel(p); j++) {
            tg_set_flat(p, j, corpus_value(i, j));
            tg_set_flat(p->grad, j, corpus_grad(i, j));
        }
    }
    cr_assert_eq(tg_optim_step(optim, 1), TG_OK, "%s", tg_last_error());
    for (size_t i = 0; i < tg_params_count(params); i++) {
        tg_tensor *p = tg_params_get(params, i);
        for (int64_t j = 0; j < tg_numel(p); j++) tg_set_flat(p, j, corpus_value(i, j));
    }
    char path[512];
    snprintf(path, sizeof path, "%s/good.safetensors", out_dir);
    tg_checkpoint_info info = {.step = CORPUS_STEP, .rng = {{1, 2, 3, 4}}, .config = (char *)CORPUS_CONFIG};
    cr_assert_eq(tg_checkpoint_save(path, params, optim, &info), TG_OK, "%s", tg_last_error());
    tg_optim_free(optim);
    tg_params_free(params);
    return cf_read(path);
}

static void truncations(cf_blob good)
{
    const size_t header_end = 8 + (size_t)cf_header_length(good);
    const size_t cuts[] = {0,
                           1,
                           7,
                           8,
                           9,
                           16,
                           header_end / 2,
                           header_end - 1,
                           header_end,
                           header_end + 1,
                           header_end + (good.size - header_end) / 2,
                           good.size - 4,
                           good.size - 1};
    for (size_t i = 0; i < sizeof cuts / sizeof cuts[0]; i++) {
        char name[64];
        snprintf(name, sizeof name, "truncated-to-%zu", cuts[i]);
        write_file(name, good.bytes, cuts[i]);
    }
}

static void flip_at(cf_blob good, size_t at, const char *where)
{
    cf_blob b = copy(good);
    b.bytes[at] ^= 0x5a;
    char name[64];
    snprintf(name, sizeof name, "flipped-%s-%zu", where, at);
    write_file(name, b.bytes, b.size);
    free(b.bytes);
}

static void flips(cf_blob good)
{
    const size_t header_end = 8 + (size_t)cf_header_length(good);
    for (size_t at = 0; at < 8; at++) flip_at(good, at, "length");
    for (size_t k = 0; k < 40; k++) flip_at(good, 8 + k * (header_end - 8) / 40, "header");
    for (size_t k = 0; k < 10; k++) flip_at(good, header_end + k * (good.size - header_end) / 10, "data");
    flip_at(good, good.size - 1, "data");
}

/* Replaces the first `from` after the header's start with `to` (same length), unsealed. */
static void text_edit(cf_blob good, const char *from, const char *to, const char *name)
{
    cf_blob b = copy(good);
    const size_t header_end = 8 + (size_t)cf_header_length(good), n = strlen(from);
    cr_assert_eq(strlen(to), n);
    for (size_t i = 8; i + n <= header_end; i++)
        if (!memcmp(b.bytes + i, from, n)) {
            memcpy(b.bytes + i, to, n);
            write_file(name, b.bytes, b.size);
            free(b.bytes);
            return;
        }
    cr_assert_fail("no '%s' in the good file's header", from);
}

/* Swaps the data_offsets of two tensors of one size, unsealed: the loader of the first format
 * read such a file as valid, with the two tensors' values exchanged. */
static void swapped_offsets(cf_blob good)
{
    cJSON *root = cf_header(good);
    cJSON *a = cJSON_GetObjectItem(cJSON_GetObjectItem(root, "optim.exp_avg.layers.0.mixer.D"), "data_offsets");
    cJSON *b = cJSON_GetObjectItem(cJSON_GetObjectItem(root, "optim.exp_avg_sq.layers.0.mixer.D"), "data_offsets");
    cr_assert(a && b, "the good file lacks the two state tensors of D");
    char *a_text = cJSON_PrintUnformatted(a), *b_text = cJSON_PrintUnformatted(b);
    cr_assert_eq(strlen(a_text), strlen(b_text), "offsets of unequal length: %s %s", a_text, b_text);
    /* Both texts occur once in the header: exchange them in place. */
    cf_blob c = copy(good);
    const size_t header_end = 8 + (size_t)cf_header_length(good), n = strlen(a_text);
    unsigned char *at_a = NULL, *at_b = NULL;
    for (size_t i = 8; i + n <= header_end; i++) {
        if (!memcmp(c.bytes + i, a_text, n)) at_a = c.bytes + i;
        if (!memcmp(c.bytes + i, b_text, n)) at_b = c.bytes + i;
    }
    cr_assert(at_a && at_b);
    memcpy(at_a, b_text, n);
    memcpy(at_b, a_text, n);
    write_file("swapped-offsets-unsealed", c.bytes, c.size);
    free(c.bytes), free(a_text), free(b_text);
    cJSON_Delete(root);
}

/* ---- header edits sealed again ------------------------------------------------------------ */

static cJSON *metadata(cJSON *root) { return cJSON_GetObjectItem(root, "__metadata__"); }
static void set_meta(cJSON *root, const char *key, const char *value)
{
    cJSON_ReplaceItemInObject(metadata(root), key, cJSON_CreateString(value));
}
static void negative_step(cJSON *root) { set_meta(root, "step", "-1"); }
static void huge_step(cJSON *root) { set_meta(root, "step", "9007199254740993"); }
static void huge_optimizer_step(cJSON *root) { set_meta(root, "optimizer_step", "9223372036854775807"); }
static void short_rng(cJSON *root) { set_meta(root, "rng", "1 2 3"); }
static void newer_version(cJSON *root) { set_meta(root, "format_version", "3"); }
static void other_format(cJSON *root) { set_meta(root, "format", "someone-else"); }
static void config_not_json(cJSON *root) { set_meta(root, "config", "{corpus"); }
static void other_optimizer(cJSON *root) { set_meta(root, "optimizer", "sgd"); }
static void no_metadata(cJSON *root) { cJSON_DeleteItemFromObject(root, "__metadata__"); }
static cJSON *entry(cJSON *root) { return cJSON_GetObjectItem(root, "head.bias"); }
static void other_dtype(cJSON *root) { cJSON_ReplaceItemInObject(entry(root), "dtype", cJSON_CreateString("I32")); }
static void unknown_dtype(cJSON *root) { cJSON_ReplaceItemInObject(entry(root), "dtype", cJSON_CreateString("F33")); }
static void other_shape(cJSON *root)
{
    cJSON_ReplaceItemInObject(entry(root), "shape", cJSON_CreateIntArray((const int[]){1, 3}, 2));
}
static void overlapping(cJSON *root)
{
    cJSON *offsets = cJSON_GetObjectItem(entry(root), "data_offsets");
    cJSON_ReplaceItemInArray(offsets, 0, cJSON_CreateNumber(0));
    cJSON_ReplaceItemInArray(offsets, 1, cJSON_CreateNumber(12));
}
static void past_the_end(cJSON *root)
{
    cJSON *offsets = cJSON_GetObjectItem(entry(root), "data_offsets");
    cJSON_ReplaceItemInArray(offsets, 1, cJSON_CreateNumber(1e9));
}
static void missing_tensor(cJSON *root) { cJSON_DeleteItemFromObject(root, "head.bias"); }
static void extra_tensor(cJSON *root)
{
    cJSON_AddItemToObject(root, "head.weight", cJSON_Duplicate(entry(root), true));
}

static void sealed_edits(cf_blob good)
{
    static const struct {
        const char *name;
        void (*edit)(cJSON *root);
    } edits[] = {
        {"sealed-negative-step", negative_step},
        {"sealed-step-past-2^53", huge_step},
        {"sealed-huge-optimizer-step", huge_optimizer_step},
        {"sealed-short-rng", short_rng},
        {"sealed-newer-version", newer_version},
        {"sealed-other-format", other_format},
        {"sealed-config-not-json", config_not_json},
        {"sealed-other-optimizer", other_optimizer},
        {"sealed-no-metadata", no_metadata},
        {"sealed-other-dtype", other_dtype},
        {"sealed-unknown-dtype", unknown_dtype},
        {"sealed-other-shape", other_shape},
        {"sealed-overlapping-offsets", overlapping},
        {"sealed-offsets-past-the-end", past_the_end},
        {"sealed-missing-tensor", missing_tensor},
        {"sealed-extra-tensor", extra_tensor},
    };
    for (size_t i = 0; i < sizeof edits / sizeof edits[0]; i++) {
        cf_blob b = cf_edit_header(good, edits[i].edit);
        write_file(edits[i].name, b.bytes, b.size);
        free(b.bytes);
    }
}

static void not_checkpoints(void)
{
    static const char text[] = "step,loss\n1,2.5\n2,2.25\n";
    static const unsigned char png[] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n', 0, 0, 0, 13, 'I', 'H', 'D', 'R'};
    unsigned char zeros[1024] = {0}, ones[1024];
    memset(ones, 0xff, sizeof ones);
    write_file("empty", "", 0);
    write_file("text", text, sizeof text - 1);
    write_file("png-signature", png, sizeof png);
    write_file("zeros-8", zeros, 8);
    write_file("zeros-1024", zeros, sizeof zeros);
    write_file("ones-1024", ones, sizeof ones);
    static const char header_only[] = "\x02\x00\x00\x00\x00\x00\x00\x00{}";
    write_file("empty-header", header_only, sizeof header_only - 1);
}

Test(corpus, write)
{
    out_dir = getenv("TG_CORPUS_DIR");
    if (!out_dir) cr_skip("set TG_CORPUS_DIR to the directory to write the corpus into");
    mkdir(out_dir, 0755);
    cf_blob good = write_good();
    truncations(good);
    flips(good);
    text_edit(good, "\"step\":\"12\"", "\"step\":\"13\"", "step-digit-edited-unsealed");
    text_edit(good, "\"optimizer_step\":\"1\"", "\"optimizer_step\":\"7\"", "optimizer-step-digit-edited-unsealed");
    text_edit(good, "\"rng\":\"0000000000000001", "\"rng\":\"0000000000000009", "rng-digit-edited-unsealed");
    text_edit(good, "corpus\\\": 1", "corpus\\\": 2", "config-edited-unsealed");
    text_edit(good, "\"format_version\":\"2\"", "\"format_version\":\"1\"", "version-edited-unsealed");
    swapped_offsets(good);
    sealed_edits(good);
    not_checkpoints();
    free(good.bytes);
}
