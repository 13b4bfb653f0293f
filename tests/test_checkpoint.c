/* Checkpoints: a round trip restores parameters, optimizer state (AdamW, momentum SGD,
 * the master of a bf16 store), step, generator and config; the file's names, metadata
 * and bytes read independently; a save killed halfway leaves the previous checkpoint
 * whole, and so does every one of a hundred saves killed at random moments; damaged and mismatched files are refused with a message naming the file and the
 * problem, changing nothing; training resumed from a checkpoint repeats an uninterrupted
 * run bit for bit; bad save requests. */
#define _POSIX_C_SOURCE 200809L /* mkdtemp, fork, kill */
#include "checkpoint_files.h"
#include "optim_cases.h"

#include "examples/shift_task.h"
#include "io/internal.h"
#include "optim/internal.h"

#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* ---- scratch directories ---------------------------------------------------------------- */

typedef struct {
    char dir[64];
    char path[128]; /* dir/model.safetensors */
} scratch;

static scratch scratch_new(void)
{
    scratch s;
    snprintf(s.dir, sizeof s.dir, "/tmp/tg_checkpoint_XXXXXX");
    cr_assert(mkdtemp(s.dir), "mkdtemp failed");
    snprintf(s.path, sizeof s.path, "%s/model.safetensors", s.dir);
    return s;
}

/* A file in the scratch directory. */
static const char *scratch_file(const scratch *s, const char *name)
{
    static char path[384];
    snprintf(path, sizeof path, "%s/%s", s->dir, name);
    return path;
}

static void scratch_remove(const scratch *s)
{
    DIR *dir = opendir(s->dir);
    struct dirent *e;
    while (dir && (e = readdir(dir)))
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) unlink(scratch_file(s, e->d_name));
    if (dir) closedir(dir);
    rmdir(s->dir);
}

/* The names in the directory that start with prefix. */
static int count_files(const scratch *s, const char *prefix)
{
    DIR *dir = opendir(s->dir);
    struct dirent *e;
    int n = 0;
    while (dir && (e = readdir(dir))) n += !strncmp(e->d_name, prefix, strlen(prefix));
    if (dir) closedir(dir);
    return n;
}

/* ---- models: a store, an optimizer that has taken some steps ----------------------------------- */

typedef struct {
    tg_params *params;
    tg_optim *optim;
} model;

static void step_randomly(model *m, int steps)
{
    int64_t n = tg_params_numel(m->params);
    for (int s = 0; s < steps; s++) {
        double *grad = oc_random(n, 1.0, true);
        oc_put(m->params, grad, true);
        cr_assert_eq(tg_optim_step(m->optim, 1), TG_OK, "%s", tg_last_error());
        free(grad);
    }
}

static model model_new(tg_dtype dtype, tg_optim_config config, int steps)
{
    model m = {oc_store(dtype, TG_DEVICE_CPU), NULL};
    m.optim = tg_optim_create(m.params, &config);
    cr_assert(m.optim, "%s", tg_last_error());
    step_randomly(&m, steps);
    return m;
}

static void model_free(model *m)
{
    tg_optim_free(m->optim);
    tg_params_free(m->params);
}

/* Every byte of the model: parameters, then each optimizer buffer, then the step count. */
typedef struct {
    unsigned char *bytes;
    size_t size;
} snapshot;

static snapshot snapshot_take(const model *m)
{
    size_t n = (size_t)tg_params_numel(m->params), esize = tg_dtype_size(tg_params_get(m->params, 0)->dtype);
    tg_optim_buffer buffers[TG_OPTIM_MAX_BUFFERS];
    int nb = m->optim ? tg_optim_buffers(m->optim, buffers) : 0;
    size_t size = n * esize + sizeof(int64_t);
    for (int b = 0; b < nb; b++) size += n * tg_dtype_size(buffers[b].dtype);
    snapshot s = {malloc(size), size};
    unsigned char *at = s.bytes;
    memcpy(at, tg_params_data(m->params), n * esize), at += n * esize;
    for (int b = 0; b < nb; b++) {
        memcpy(at, buffers[b].data, n * tg_dtype_size(buffers[b].dtype));
        at += n * tg_dtype_size(buffers[b].dtype);
    }
    int64_t step = tg_optim_step_count(m->optim);
    memcpy(at, &step, sizeof step);
    return s;
}

/* Asserts that m holds every byte `before` held (a refused load changed nothing). */
static void assert_unchanged(const model *m, const snapshot *before, const char *what)
{
    snapshot now = snapshot_take(m);
    cr_assert(now.size == before->size && memcmp(now.bytes, before->bytes, before->size) == 0, "%s changed the model",
              what);
    free(now.bytes);
}

static void assert_same_model(const char *what, const model *a, const model *b)
{
    snapshot sa = snapshot_take(a), sb = snapshot_take(b);
    cr_assert_eq(sa.size, sb.size, "%s: the models differ in size", what);
    cr_assert(memcmp(sa.bytes, sb.bytes, sa.size) == 0, "%s: the models differ", what);
    free(sa.bytes), free(sb.bytes);
}

static const char *const CONFIG =
    "{\"model\": {\"dim\": 8, \"name\": \"tiny \\\"quoted\\\" ünïcode\\n\"}, \"lr\": 0.001}";

static tg_checkpoint_info random_info(void)
{
    tg_checkpoint_info info = {.step = tt_randint(0, 1000000), .config = (char *)CONFIG};
    tg_rng_seed(&info.rng, (uint64_t)tt_randint(0, 1 << 30));
    return info;
}

/* ---- round trips ---------------------------------------------------------------------------------- */

static void round_trip(tg_dtype dtype, tg_optim_config config)
{
    scratch s = scratch_new();
    model a = model_new(dtype, config, (int)tt_randint(1, 4)), b = model_new(dtype, config, 1);
    tg_checkpoint_info info = random_info(), loaded = {0};
    cr_assert_eq(tg_checkpoint_save(s.path, a.params, a.optim, &info), TG_OK, "%s", tg_last_error());
    cr_assert_eq(tg_checkpoint_load(s.path, b.params, b.optim, &loaded), TG_OK, "%s", tg_last_error());
    assert_same_model(tg_dtype_name(dtype), &a, &b);
    cr_assert_eq(loaded.step, info.step);
    cr_assert(memcmp(&loaded.rng, &info.rng, sizeof info.rng) == 0, "the generator's state differs");
    cr_assert_str_eq(loaded.config, CONFIG);
    /* Both continue alike: the state that matters for the next step came back. */
    tg_params_zero_grad(a.params), tg_params_zero_grad(b.params);
    uint64_t seed = (uint64_t)tt_randint(0, 1 << 30);
    tg_rng_seed(tt_rng(), seed);
    step_randomly(&a, 2);
    tg_rng_seed(tt_rng(), seed);
    step_randomly(&b, 2);
    assert_same_model("after two more steps", &a, &b);
    tg_checkpoint_info_clear(&loaded);
    cr_assert_null(loaded.config);
    model_free(&a), model_free(&b);
    scratch_remove(&s);
}

Test(checkpoint, round_trip_adamw_f32) { round_trip(TG_F32, tg_adamw_config(0.01)); }

Test(checkpoint, round_trip_adamw_bf16_with_master) { round_trip(TG_BF16, tg_adamw_config(0.01)); }

Test(checkpoint, round_trip_momentum_sgd_f64) { round_trip(TG_F64, tg_sgd_config(0.1, 0.9)); }

Test(checkpoint, parameters_alone_load_without_the_optimizer)
{
    scratch s = scratch_new();
    model a = model_new(TG_F32, tg_adamw_config(0.01), 2);
    tg_params *fresh = oc_store(TG_F32, TG_DEVICE_CPU);
    cr_assert_eq(tg_checkpoint_save(s.path, a.params, a.optim, NULL), TG_OK, "%s", tg_last_error());
    cr_assert_eq(tg_checkpoint_load(s.path, fresh, NULL, NULL), TG_OK, "%s", tg_last_error());
    size_t bytes = (size_t)tg_params_numel(fresh) * 4;
    cr_assert(memcmp(tg_params_data(fresh), tg_params_data(a.params), bytes) == 0);
    /* A file saved without an optimizer loads the same way, and has step 0. */
    cr_assert_eq(tg_checkpoint_save(s.path, a.params, NULL, NULL), TG_OK, "%s", tg_last_error());
    tg_checkpoint_info info;
    cr_assert_eq(tg_checkpoint_read_info(s.path, &info), TG_OK, "%s", tg_last_error());
    cr_assert_eq(info.step, 0);
    cr_assert_str_eq(info.config, "{}");
    tg_checkpoint_info_clear(&info);
    tg_params_free(fresh);
    model_free(&a);
    scratch_remove(&s);
}

/* The file read without the library's reader: names, dtypes, shapes, bytes, metadata, the
 * CRC-32 and the layout rules (header padded to 8, each tensor aligned to its element). */
Test(checkpoint, file_layout_read_independently)
{
    scratch s = scratch_new();
    model a = model_new(TG_BF16, tg_adamw_config(0.01), 2);
    tg_checkpoint_info info = random_info();
    cr_assert_eq(tg_checkpoint_save(s.path, a.params, a.optim, &info), TG_OK, "%s", tg_last_error());
    cf_blob file = cf_read(s.path);
    cr_assert_eq(cf_header_length(file) % 8, 0, "the data section starts at a multiple of 8");
    cf_file f = cf_split(file);
    cr_assert_eq(f.count, (int)(4 * OC_COUNT), "parameters + exp_avg + exp_avg_sq + master");
    tg_optim_buffer buffers[TG_OPTIM_MAX_BUFFERS];
    cr_assert_eq(tg_optim_buffers(a.optim, buffers), 3);
    for (size_t i = 0; i < OC_COUNT; i++) {
        tg_tensor *p = tg_params_find(a.params, oc_model[i].name);
        const char *prefixes[4] = {"", "optim.exp_avg.", "optim.exp_avg_sq.", "optim.master."};
        for (int k = 0; k < 4; k++) {
            char name[160];
            snprintf(name, sizeof name, "%s%s", prefixes[k], oc_model[i].name);
            int at = cf_find(&f, name);
            cr_assert_geq(at, 0, "no tensor %s in the file", name);
            const cJSON *entry = f.tensors[at].entry;
            cr_assert_str_eq(cJSON_GetObjectItem(entry, "dtype")->valuestring, k == 0 ? "BF16" : "F32");
            const cJSON *shape = cJSON_GetObjectItem(entry, "shape");
            cr_assert_eq(cJSON_GetArraySize(shape), oc_model[i].ndim);
            for (int d = 0; d < oc_model[i].ndim; d++)
                cr_assert_eq((int64_t)cJSON_GetArrayItem(shape, d)->valuedouble, oc_model[i].shape[d]);
            const unsigned char *want =
                k == 0 ? (const unsigned char *)tg_data(p) : (const unsigned char *)buffers[k - 1].data + p->offset * 4;
            cr_assert_eq(f.tensors[at].size, (size_t)tg_numel(p) * (k == 0 ? 2 : 4));
            cr_assert(memcmp(f.tensors[at].bytes, want, f.tensors[at].size) == 0, "%s: bytes differ", name);
            double begin = cJSON_GetArrayItem(cJSON_GetObjectItem(entry, "data_offsets"), 0)->valuedouble;
            cr_assert_eq((int64_t)begin % (k == 0 ? 2 : 4), 0, "%s is not aligned", name);
        }
    }
    const char *expect[][2] = {{"format", "tapegrad.checkpoint"},
                               {"format_version", "2"},
                               {"optimizer", "adamw"},
                               {"optimizer_step", "2"},
                               {"config", CONFIG}};
    for (size_t k = 0; k < sizeof expect / sizeof *expect; k++)
        cr_assert_str_eq(cJSON_GetObjectItem(f.metadata, expect[k][0])->valuestring, expect[k][1], "%s", expect[k][0]);
    char step[32], rng[80], crc[16];
    const size_t crc_at = cf_file_crc_at(file);
    cr_assert(crc_at, "one \"file_crc32\" entry of 8 characters in the header");
    snprintf(step, sizeof step, "%lld", (long long)info.step);
    snprintf(rng, sizeof rng, "%016llx %016llx %016llx %016llx", (unsigned long long)info.rng.s[0],
             (unsigned long long)info.rng.s[1], (unsigned long long)info.rng.s[2], (unsigned long long)info.rng.s[3]);
    snprintf(crc, sizeof crc, "%08x", cf_file_crc(file, crc_at));
    cr_assert_str_eq(cJSON_GetObjectItem(f.metadata, "step")->valuestring, step);
    cr_assert_str_eq(cJSON_GetObjectItem(f.metadata, "rng")->valuestring, rng);
    cr_assert_str_eq(cJSON_GetObjectItem(f.metadata, "file_crc32")->valuestring, crc);
    cf_free(&f);
    free(file.bytes);
    model_free(&a);
    scratch_remove(&s);
}

/* ---- atomic saving ----------------------------------------------------------------------------------- */

static int hook_fd = -1;

/* Halfway through the data: tell the parent, then wait to be killed. */
static void stop_halfway(const char *temp_path, uint64_t written, uint64_t total)
{
    (void)temp_path;
    if (written < total / 2 || hook_fd < 0) return;
    if (write(hook_fd, "x", 1) != 1) _exit(3);
    hook_fd = -1;
    for (;;) pause();
}

Test(checkpoint, a_save_killed_halfway_leaves_the_previous_checkpoint)
{
    scratch s = scratch_new();
    tg_params *params = oc_store(TG_F32, TG_DEVICE_CPU);
    int64_t big = 3 << 20; /* 12 MiB of data: the writer works in 1 MiB pieces */
    tg_fill_normal(tg_params_add(params, "big.weight", TG_F32, 1, &big), tt_rng(), 0, 1);
    tg_optim_config config = tg_adamw_config(0.01);
    tg_optim *optim = tg_optim_create(params, &config);
    tg_checkpoint_info info = random_info();
    cr_assert_eq(tg_checkpoint_save(s.path, params, optim, &info), TG_OK, "%s", tg_last_error());
    cf_blob before = cf_read(s.path);
    for (size_t i = 0; i < tg_params_count(params); i++) tg_fill_normal(tg_params_get(params, i), tt_rng(), 0, 1);

    int pipe_fds[2];
    cr_assert_eq(pipe(pipe_fds), 0);
    pid_t child = fork();
    cr_assert_geq(child, 0, "fork failed");
    if (child == 0) { /* the writer: dies at SIGKILL halfway through */
        close(pipe_fds[0]);
        hook_fd = pipe_fds[1];
        tg_checkpoint_write_hook = stop_halfway;
        tg_checkpoint_save(s.path, params, optim, &info);
        _exit(2); /* the hook never fired: the parent sees no byte */
    }
    close(pipe_fds[1]);
    char byte;
    cr_assert_eq(read(pipe_fds[0], &byte, 1), 1, "the writer finished without pausing halfway");
    cr_assert_eq(kill(child, SIGKILL), 0);
    int status;
    cr_assert_eq(waitpid(child, &status, 0), child);
    cr_assert(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
    close(pipe_fds[0]);

    /* The half-written file exists, under its temporary name only. */
    cr_assert_eq(count_files(&s, ".model.safetensors.tmp."), 1, "the killed writer's temporary file is missing");
    cf_blob after = cf_read(s.path);
    cr_assert(after.size == before.size && memcmp(after.bytes, before.bytes, before.size) == 0,
              "the checkpoint changed under a save that did not finish");
    tg_params *fresh = oc_store(TG_F32, TG_DEVICE_CPU);
    tg_params_add(fresh, "big.weight", TG_F32, 1, &big);
    cr_assert_eq(tg_checkpoint_load(s.path, fresh, NULL, NULL), TG_OK, "%s", tg_last_error());
    /* And a save that does finish replaces it whole. */
    cr_assert_eq(tg_checkpoint_save(s.path, params, optim, &info), TG_OK, "%s", tg_last_error());
    cr_assert_eq(tg_checkpoint_load(s.path, fresh, NULL, NULL), TG_OK, "%s", tg_last_error());
    cr_assert(memcmp(tg_params_data(fresh), tg_params_data(params), (size_t)tg_params_numel(params) * 4) == 0);
    free(before.bytes), free(after.bytes);
    tg_params_free(fresh);
    tg_optim_free(optim);
    tg_params_free(params);
    scratch_remove(&s);
}

/* Keeps saving a or b (in turn) to path until it is killed. */
static _Noreturn void save_forever(const char *path, tg_params *a, tg_params *b)
{
    for (unsigned k = 0;; k++)
        if (tg_checkpoint_save(path, k % 2 ? b : a, NULL, NULL) != TG_OK) _exit(2);
}

/* Saves killed at random moments, a hundred times: after every kill the path holds a complete
 * checkpoint that loads and equals one of the two the writer alternated between. */
Test(checkpoint, every_save_killed_at_random_leaves_a_complete_checkpoint, .timeout = 240)
{
    scratch s = scratch_new();
    int64_t n = 1 << 19; /* 2 MiB of f32 per store */
    tg_params *a = tg_params_create(TG_DEVICE_CPU), *b = tg_params_create(TG_DEVICE_CPU);
    tg_fill_normal(tg_params_add(a, "w", TG_F32, 1, &n), tt_rng(), 0, 1);
    tg_fill_normal(tg_params_add(b, "w", TG_F32, 1, &n), tt_rng(), 0, 1);
    cr_assert_eq(tg_checkpoint_save(s.path, a, NULL, NULL), TG_OK, "%s", tg_last_error());
    struct timeval start, end; /* one save's time sets the range of the random delays */
    gettimeofday(&start, NULL);
    cr_assert_eq(tg_checkpoint_save(s.path, b, NULL, NULL), TG_OK, "%s", tg_last_error());
    gettimeofday(&end, NULL);
    const int64_t save_us = (end.tv_sec - start.tv_sec) * 1000000 + (end.tv_usec - start.tv_usec) + 1;
    tg_params *loaded = tg_params_create(TG_DEVICE_CPU);
    tg_params_add(loaded, "w", TG_F32, 1, &n);
    const size_t bytes = (size_t)n * 4;
    int kills = 0, matched_a = 0;
    for (int round = 0; round < 100; round++) {
        pid_t child = fork();
        cr_assert_geq(child, 0, "fork failed");
        if (child == 0) save_forever(s.path, a, b);
        const int64_t delay_us = tt_randint(0, 3 * save_us);
        nanosleep(&(struct timespec){delay_us / 1000000, delay_us % 1000000 * 1000}, NULL);
        cr_assert_eq(kill(child, SIGKILL), 0);
        int status;
        cr_assert_eq(waitpid(child, &status, 0), child);
        cr_assert(WIFSIGNALED(status), "round %d: the writer stopped by itself (status %d)", round, status);
        kills++;
        cr_assert_eq(tg_checkpoint_load(s.path, loaded, NULL, NULL), TG_OK, "round %d: %s", round, tg_last_error());
        bool is_a = !memcmp(tg_params_data(loaded), tg_params_data(a), bytes);
        cr_assert(is_a || !memcmp(tg_params_data(loaded), tg_params_data(b), bytes),
                  "round %d: the file loads but holds neither checkpoint", round);
        matched_a += is_a;
    }
    cr_log_info("%d saves killed (one save takes %lld us); the file held a %d times, b %d times", kills,
                (long long)save_us, matched_a, kills - matched_a);
    tg_params_free(a), tg_params_free(b), tg_params_free(loaded);
    scratch_remove(&s);
}

/* ---- damaged and mismatched files ---------------------------------------------------------------------- */

static cJSON *entry_of(cJSON *root, const char *name)
{
    cJSON *e = cJSON_GetObjectItem(root, name);
    cr_assert(e, "no entry %s", name);
    return e;
}

static void set_string(cJSON *object, const char *key, const char *value)
{
    cJSON_ReplaceItemInObject(object, key, cJSON_CreateString(value));
}

static void set_shape(cJSON *root, const char *name, int64_t a, int64_t b)
{
    double dims[2] = {(double)a, (double)b};
    cJSON_ReplaceItemInObject(entry_of(root, name), "shape", cJSON_CreateDoubleArray(dims, 2));
}

/* Moves a tensor's data_offsets by delta bytes (the one with the largest end when name is NULL). */
static void shift_offsets(cJSON *root, const char *name, double delta)
{
    cJSON *target = name ? entry_of(root, name) : NULL, *item;
    double best = -1;
    cJSON_ArrayForEach(item, root)
    {
        cJSON *offsets = cJSON_GetObjectItem(item, "data_offsets");
        if (!name && offsets && cJSON_GetArrayItem(offsets, 1)->valuedouble > best) {
            best = cJSON_GetArrayItem(offsets, 1)->valuedouble;
            target = item;
        }
    }
    cJSON *offsets = cJSON_GetObjectItem(target, "data_offsets");
    double moved[2] = {cJSON_GetArrayItem(offsets, 0)->valuedouble + delta,
                       cJSON_GetArrayItem(offsets, 1)->valuedouble + delta};
    cJSON_ReplaceItemInObject(target, "data_offsets", cJSON_CreateDoubleArray(moved, 2));
}

#define HEAD "lm_head.weight"
#define IN_PROJ "backbone.layers.0.mixer.in_proj.weight"

static void edit_unknown_dtype(cJSON *root) { set_string(entry_of(root, HEAD), "dtype", "F33"); }
static void edit_other_dtype(cJSON *root) { set_string(entry_of(root, HEAD), "dtype", "I32"); }
static void edit_swapped_shape(cJSON *root) { set_shape(root, IN_PROJ, 32, 8); }
static void edit_shape_size(cJSON *root) { set_shape(root, IN_PROJ, 8, 33); }
static void edit_overlap(cJSON *root) { shift_offsets(root, HEAD, -4); }
static void edit_past_the_end(cJSON *root) { shift_offsets(root, NULL, 4); }
static void edit_offsets_text(cJSON *root)
{
    cJSON *offsets = cJSON_CreateArray();
    cJSON_AddItemToArray(offsets, cJSON_CreateString("0"));
    cJSON_AddItemToArray(offsets, cJSON_CreateNumber(4));
    cJSON_ReplaceItemInObject(entry_of(root, HEAD), "data_offsets", offsets);
}
static void edit_negative_offset(cJSON *root)
{
    double offsets[2] = {-8, 4};
    cJSON_ReplaceItemInObject(entry_of(root, HEAD), "data_offsets", cJSON_CreateDoubleArray(offsets, 2));
}
static void edit_fractional_shape(cJSON *root)
{
    double dims[2] = {8, 12.5};
    cJSON_ReplaceItemInObject(entry_of(root, HEAD), "shape", cJSON_CreateDoubleArray(dims, 2));
}
static void edit_duplicate(cJSON *root)
{
    cJSON_AddItemToObject(root, HEAD, cJSON_Duplicate(entry_of(root, HEAD), true));
}
static void edit_metadata_number(cJSON *root)
{
    cJSON_ReplaceItemInObject(entry_of(root, "__metadata__"), "step", cJSON_CreateNumber(3));
}
static void edit_no_format(cJSON *root) { cJSON_DeleteItemFromObject(entry_of(root, "__metadata__"), "format"); }
static void edit_version(cJSON *root) { set_string(entry_of(root, "__metadata__"), "format_version", "3"); }
static void edit_rng(cJSON *root) { set_string(entry_of(root, "__metadata__"), "rng", "0123 4567"); }
static void edit_config(cJSON *root) { set_string(entry_of(root, "__metadata__"), "config", "{\"lr\": "); }
static void edit_step(cJSON *root) { set_string(entry_of(root, "__metadata__"), "step", "-5"); }
static void edit_huge_step(cJSON *root) { set_string(entry_of(root, "__metadata__"), "step", "9007199254740993"); }
static void edit_huge_optim_step(cJSON *root)
{
    set_string(entry_of(root, "__metadata__"), "optimizer_step", "9223372036854775807");
}
static void edit_crc_text(cJSON *root) { set_string(entry_of(root, "__metadata__"), "file_crc32", "xyz"); }
static void edit_entry_kind(cJSON *root) { cJSON_ReplaceItemInObject(root, HEAD, cJSON_CreateNumber(1)); }

typedef struct {
    const char *what;
    cf_blob file;
    const char *words[3]; /* the message must contain each */
} bad_case;

static cf_blob copy_of(cf_blob b, size_t size)
{
    cf_blob c = {malloc(size + 8), size};
    memcpy(c.bytes, b.bytes, size < b.size ? size : b.size);
    if (size > b.size) memset(c.bytes + b.size, 0, size - b.size);
    return c;
}

static cf_blob with_length(cf_blob b, uint64_t length)
{
    cf_blob c = copy_of(b, b.size);
    memcpy(c.bytes, &length, 8);
    return c;
}

static cf_blob with_header_text(cf_blob b, const char *text)
{
    size_t start = 8 + (size_t)cf_header_length(b), n = strlen(text), padded = (n + 7) / 8 * 8;
    cf_blob c = {malloc(8 + padded + b.size - start), 8 + padded + b.size - start};
    uint64_t length = padded;
    memcpy(c.bytes, &length, 8);
    memcpy(c.bytes + 8, text, n);
    memset(c.bytes + 8 + n, ' ', padded - n);
    memcpy(c.bytes + 8 + padded, b.bytes + start, b.size - start);
    return c;
}

/* The header's own JSON text with `tail` appended (or its last character cut when tail is NULL). */
static cf_blob with_header_tail(cf_blob b, const char *tail)
{
    cJSON *root = cf_header(b);
    char *json = cJSON_PrintUnformatted(root), *text = malloc(strlen(json) + 16);
    strcpy(text, json);
    if (tail)
        strcat(text, tail);
    else
        text[strlen(text) - 1] = '\0';
    cf_blob c = with_header_text(b, text);
    free(json), free(text);
    cJSON_Delete(root);
    return c;
}

static cf_blob without(cf_blob b, const char *name)
{
    cf_file f = cf_split(b);
    cf_drop(&f, name);
    cf_blob c = cf_join(&f);
    cf_free(&f);
    return c;
}

static cf_blob with_copy(cf_blob b, const char *from, const char *name)
{
    cf_file f = cf_split(b);
    cf_copy_as(&f, from, name);
    cf_blob c = cf_join(&f);
    cf_free(&f);
    return c;
}

static int bad_cases(cf_blob good, bad_case *cases)
{
    uint64_t header = cf_header_length(good), data = good.size - 8 - header;
    int n = 0;
    const size_t cuts[] = {
        0, 3, 8, 8 + (size_t)header / 2, 8 + (size_t)header, 8 + (size_t)(header + data / 2), good.size - 1};
    for (size_t i = 0; i < sizeof cuts / sizeof *cuts; i++)
        cases[n++] = (bad_case){"truncated", copy_of(good, cuts[i]), {"truncated"}};
    cases[n++] = (bad_case){"length too big", with_length(good, good.size - 7), {"header length", "truncated"}};
    cases[n++] = (bad_case){"length huge", with_length(good, UINT64_MAX - 3), {"header length"}};
    cases[n++] = (bad_case){"trailing bytes", copy_of(good, good.size + 8), {"belong to no tensor"}};
    cases[n++] = (bad_case){"bad JSON", with_header_tail(good, NULL), {"not valid JSON"}};
    cases[n++] = (bad_case){"JSON then junk", with_header_tail(good, " x"), {"after its JSON"}};
    cases[n++] = (bad_case){"not an object", with_header_text(good, "[1, 2]"), {"'{'"}};
    cases[n++] = (bad_case){"unknown dtype", cf_edit_header(good, edit_unknown_dtype), {HEAD, "F33"}};
    cases[n++] = (bad_case){"other dtype", cf_edit_header(good, edit_other_dtype), {HEAD, "I32", "F32"}};
    cases[n++] = (bad_case){"swapped shape", cf_edit_header(good, edit_swapped_shape), {IN_PROJ, "[32, 8]", "[8, 32]"}};
    cases[n++] = (bad_case){"shape vs size", cf_edit_header(good, edit_shape_size), {IN_PROJ, "bytes"}};
    cases[n++] = (bad_case){"fractional shape", cf_edit_header(good, edit_fractional_shape), {HEAD, "shape"}};
    cases[n++] = (bad_case){"overlap", cf_edit_header(good, edit_overlap), {HEAD, "overlap"}};
    cases[n++] = (bad_case){"past the end", cf_edit_header(good, edit_past_the_end), {"outside"}};
    cases[n++] = (bad_case){"offsets as text", cf_edit_header(good, edit_offsets_text), {HEAD, "data_offsets"}};
    cases[n++] = (bad_case){"negative offset", cf_edit_header(good, edit_negative_offset), {HEAD, "data_offsets"}};
    cases[n++] = (bad_case){"entry not an object", cf_edit_header(good, edit_entry_kind), {HEAD, "object"}};
    cases[n++] = (bad_case){"duplicate name", cf_edit_header(good, edit_duplicate), {HEAD, "more than once"}};
    cases[n++] = (bad_case){"metadata number", cf_edit_header(good, edit_metadata_number), {"step", "not a string"}};
    cases[n++] = (bad_case){"no format", cf_edit_header(good, edit_no_format), {"not a tapegrad checkpoint"}};
    cases[n++] = (bad_case){"newer version", cf_edit_header(good, edit_version), {"version 3"}};
    cases[n++] = (bad_case){"bad rng", cf_edit_header(good, edit_rng), {"rng"}};
    cases[n++] = (bad_case){"bad config", cf_edit_header(good, edit_config), {"config", "JSON"}};
    cases[n++] = (bad_case){"negative step", cf_edit_header(good, edit_step), {"step"}};
    cases[n++] = (bad_case){"huge step", cf_edit_header(good, edit_huge_step), {"\"step\"", "2^53"}};
    cases[n++] =
        (bad_case){"huge optimizer step", cf_edit_header(good, edit_huge_optim_step), {"optimizer_step", "2^53"}};
    cases[n++] = (bad_case){"bad checksum text", cf_edit_header(good, edit_crc_text), {"file_crc32"}};
    cf_blob flipped = copy_of(good, good.size);
    flipped.bytes[8 + header + (size_t)tt_randint(0, (int64_t)data - 1)] ^= (unsigned char)(1u << tt_randint(0, 7));
    cases[n++] = (bad_case){"a flipped bit", flipped, {"CRC-32", "corrupt"}};
    cases[n++] = (bad_case){"missing tensor", without(good, HEAD), {HEAD, "missing"}};
    cases[n++] = (bad_case){"missing state",
                            without(good, "optim.exp_avg_sq.backbone.layers.0.mixer.D"),
                            {"optim.exp_avg_sq.backbone.layers.0.mixer.D", "missing"}};
    cases[n++] =
        (bad_case){"extra tensor", with_copy(good, HEAD, "lm_head.bias"), {"lm_head.bias", "not in the model"}};
    cases[n++] = (bad_case){"extra state",
                            with_copy(good, "optim.exp_avg." HEAD, "optim.velocity." HEAD),
                            {"optim.velocity." HEAD, "optimizer's state"}};
    return n;
}

/* Any one byte of the file changed (every byte of the length and the header, with the
 * metadata and the CRC's own digits, and bytes all over the data) makes the loader refuse
 * the file: the CRC-32 covers the whole of it. */
Test(checkpoint, any_one_byte_changed_anywhere_is_refused)
{
    scratch s = scratch_new();
    model saved = model_new(TG_F32, tg_adamw_config(0.01), 2), target = model_new(TG_F32, tg_adamw_config(0.01), 3);
    tg_checkpoint_info info = {.step = 41, .rng = {{1, 2, 3, 4}}, .config = (char *)"{\"lr\": 0.01}"};
    cr_assert_eq(tg_checkpoint_save(s.path, saved.params, saved.optim, &info), TG_OK, "%s", tg_last_error());
    cf_blob good = cf_read(s.path);
    const size_t header_end = 8 + (size_t)cf_header_length(good);
    snapshot before = snapshot_take(&target);
    size_t positions = 0;
    for (size_t k = 0; k < header_end + 400; k++, positions++) {
        const size_t at = k < header_end ? k : (size_t)tt_randint((int64_t)header_end, (int64_t)good.size - 1);
        const unsigned char was = good.bytes[at];
        good.bytes[at] ^= (unsigned char)tt_randint(1, 255);
        tg_status status =
            tg_checkpoint_load_buffer(good.bytes, good.size, "edited", target.params, target.optim, NULL);
        good.bytes[at] = was;
        cr_assert_eq(status, TG_ERR_INVALID, "byte %zu of %zu changed: loaded (status %d)", at, good.size, status);
        cr_assert(strstr(tg_last_error(), "nothing was changed"), "byte %zu: %s", at, tg_last_error());
    }
    assert_unchanged(&target, &before, "a refused file");
    cr_log_info("%zu one-byte edits refused", positions);
    cr_assert_eq(tg_checkpoint_load_buffer(good.bytes, good.size, "good", target.params, target.optim, NULL), TG_OK,
                 "%s", tg_last_error());
    assert_same_model("the good file", &saved, &target);
    free(before.bytes), free(good.bytes);
    model_free(&saved), model_free(&target);
    scratch_remove(&s);
}

/* The file as the first format wrote it: version 1, a CRC-32 of the data only. */
static cf_blob as_version_1(cf_blob b)
{
    cf_file f = cf_split(b);
    cJSON_ReplaceItemInObject(f.metadata, "format_version", cJSON_CreateString("1"));
    cJSON_DeleteItemFromObject(f.metadata, "file_crc32");
    cJSON_AddStringToObject(f.metadata, "data_crc32", "00000000"); /* cf_join computes it */
    cf_blob old = cf_join(&f);
    cf_free(&f);
    return old;
}

/* A version 1 file (its CRC-32 over the data only, as the first format wrote it) still
 * loads, and its data is still checked. */
Test(checkpoint, version_1_files_still_load)
{
    scratch s = scratch_new();
    model saved = model_new(TG_F32, tg_adamw_config(0.01), 2), target = model_new(TG_F32, tg_adamw_config(0.01), 3);
    cr_assert_eq(tg_checkpoint_save(s.path, saved.params, saved.optim, NULL), TG_OK, "%s", tg_last_error());
    cf_blob good = cf_read(s.path);
    cf_blob old = as_version_1(good);
    cr_assert_eq(cf_file_crc_at(old), 0, "no whole-file CRC in a version 1 file");
    snapshot before = snapshot_take(&target);
    old.bytes[old.size - 1 - (size_t)tt_randint(0, 63)] ^= 0x10;
    cr_assert_eq(tg_checkpoint_load_buffer(old.bytes, old.size, "v1", target.params, target.optim, NULL),
                 TG_ERR_INVALID);
    cr_assert(strstr(tg_last_error(), "data's CRC-32"), "%s", tg_last_error());
    assert_unchanged(&target, &before, "a refused file");
    free(old.bytes);
    old = as_version_1(good);
    cr_assert_eq(tg_checkpoint_load_buffer(old.bytes, old.size, "v1", target.params, target.optim, NULL), TG_OK, "%s",
                 tg_last_error());
    assert_same_model("the version 1 file", &saved, &target);
    free(before.bytes), free(old.bytes), free(good.bytes);
    model_free(&saved), model_free(&target);
    scratch_remove(&s);
}

/* A name no file can hold ("__metadata__", a control character, bytes that are not UTF-8,
 * the optimizer's "optim." prefix) never enters a store, so no save can meet it: the store
 * refuses it with the same rule the loader applies. */
Test(checkpoint, a_name_no_file_can_hold_never_enters_a_store)
{
    const char *names[][2] = {{"__metadata__", "metadata"},
                              {"a\x01"
                               "b",
                               "control character"},
                              {"caf\xe9", "UTF-8"},
                              {"\xc3", "UTF-8"},
                              {"optim.exp_avg.w", "optim."},
                              {"", "empty"}};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        tg_params *params = tg_params_create(TG_DEVICE_CPU);
        cr_assert(tg_params_add(params, "fine", TG_F32, 1, (int64_t[]){4}), "%s", tg_last_error());
        cr_assert_null(tg_params_add(params, names[i][0], TG_F32, 1, (int64_t[]){3}), "name %zu was added", i);
        cr_assert(strstr(tg_last_error(), "tg_params_add") && strstr(tg_last_error(), names[i][1]), "%s",
                  tg_last_error());
        cr_assert_eq(tg_params_count(params), 1);
        tg_params_free(params);
    }
}

/* The header text with `from` replaced by `to` once, padded and sealed again. */
static cf_blob with_header_text_replaced(cf_blob b, const char *from, const char *to)
{
    const size_t length = (size_t)cf_header_length(b);
    char *text = malloc(length + strlen(to) + 1);
    memcpy(text, b.bytes + 8, length);
    text[length] = '\0';
    char *at = strstr(text, from);
    cr_assert(at, "no '%s' in the header", from);
    memmove(at + strlen(to), at + strlen(from), strlen(at + strlen(from)) + 1);
    memcpy(at, to, strlen(to));
    size_t n = strlen(text);
    while (n && text[n - 1] == ' ') n--;
    const size_t padded = (n + 7) / 8 * 8, data = b.size - 8 - length;
    cf_blob out = {malloc(8 + padded + data + 1), 8 + padded + data};
    const uint64_t new_length = padded;
    memcpy(out.bytes, &new_length, 8);
    memcpy(out.bytes + 8, text, n);
    memset(out.bytes + 8 + n, ' ', padded - n);
    memcpy(out.bytes + 8 + padded, b.bytes + 8 + length, data);
    free(text);
    cf_seal(out);
    return out;
}

/* Names in a file that no save could have written: an escaped NUL (which would read as a
 * shorter name, aliasing a real parameter) and bytes that are not UTF-8. */
Test(checkpoint, names_no_save_could_write_are_refused_on_load)
{
    scratch s = scratch_new();
    model saved = model_new(TG_F32, tg_adamw_config(0.01), 2), target = model_new(TG_F32, tg_adamw_config(0.01), 3);
    cr_assert_eq(tg_checkpoint_save(s.path, saved.params, saved.optim, NULL), TG_OK, "%s", tg_last_error());
    cf_blob good = cf_read(s.path);
    const char *edits[][3] = {{"\"" HEAD "\"", "\"" HEAD "\\u0000x\"", "\\u0000"},
                              {"\"" HEAD "\"", "\"lm_head\xff\"", "UTF-8"},
                              {"\"" HEAD "\"", "\"lm_head\\u0001\"", "control character"}};
    snapshot before = snapshot_take(&target);
    for (size_t i = 0; i < sizeof edits / sizeof edits[0]; i++) {
        cf_blob bad = with_header_text_replaced(good, edits[i][0], edits[i][1]);
        cr_assert_eq(tg_checkpoint_load_buffer(bad.bytes, bad.size, "bad", target.params, target.optim, NULL),
                     TG_ERR_INVALID, "edit %zu loaded", i);
        cr_assert(strstr(tg_last_error(), edits[i][2]) && strstr(tg_last_error(), "nothing was changed"), "%s",
                  tg_last_error());
        free(bad.bytes);
    }
    assert_unchanged(&target, &before, "a refused file");
    free(before.bytes), free(good.bytes);
    model_free(&saved), model_free(&target);
    scratch_remove(&s);
}

/* A file name of 250 bytes (the temporary name beside it must still fit in 255) saves and
 * loads. */
Test(checkpoint, a_long_file_name_saves_and_loads)
{
    scratch s = scratch_new();
    model saved = model_new(TG_F32, tg_adamw_config(0.01), 2), target = model_new(TG_F32, tg_adamw_config(0.01), 3);
    char base[251];
    memset(base, 'n', 250);
    memcpy(base + 250 - 12, ".safetensors", 12);
    base[250] = '\0';
    const char *path = scratch_file(&s, base);
    cr_assert_eq(tg_checkpoint_save(path, saved.params, saved.optim, NULL), TG_OK, "%s", tg_last_error());
    cr_assert_eq(tg_checkpoint_load(path, target.params, target.optim, NULL), TG_OK, "%s", tg_last_error());
    assert_same_model("the long-named file", &saved, &target);
    model_free(&saved), model_free(&target);
    scratch_remove(&s);
}

/* An empty file named name in the scratch directory, last written `age` seconds ago. */
static void touch_aged(const scratch *s, const char *name, long age)
{
    const char *path = scratch_file(s, name);
    cf_write(path, "", 0);
    struct timeval times[2];
    gettimeofday(&times[0], NULL);
    times[0].tv_sec -= age;
    times[1] = times[0];
    cr_assert_eq(utimes(path, times), 0, "utimes: %s", strerror(errno));
}

/* A save removes the temporary files that killed saves of the same target left, once
 * nothing has written to them for an hour; a fresh one (a save still running) and files
 * that only look alike are left be. */
Test(checkpoint, a_save_removes_stale_temporary_files_of_its_target)
{
    scratch s = scratch_new();
    model saved = model_new(TG_F32, tg_adamw_config(0.01), 2);
    touch_aged(&s, ".model.safetensors.tmp.AAAAAA", 7200);
    touch_aged(&s, ".model.safetensors.tmp.BBBBBB", 60);
    touch_aged(&s, ".model.safetensors.tmp.CCCCCCC", 7200);
    touch_aged(&s, ".other.safetensors.tmp.DDDDDD", 7200);
    cr_assert_eq(tg_checkpoint_save(s.path, saved.params, saved.optim, NULL), TG_OK, "%s", tg_last_error());
    cr_assert(access(scratch_file(&s, ".model.safetensors.tmp.AAAAAA"), F_OK) != 0, "the stale file is still there");
    const char *kept[] = {".model.safetensors.tmp.BBBBBB", ".model.safetensors.tmp.CCCCCCC",
                          ".other.safetensors.tmp.DDDDDD", "model.safetensors"};
    for (size_t i = 0; i < sizeof kept / sizeof kept[0]; i++)
        cr_assert_eq(access(scratch_file(&s, kept[i]), F_OK), 0, "%s was removed", kept[i]);
    model_free(&saved);
    scratch_remove(&s);
}

Test(checkpoint, bad_files_are_refused_and_change_nothing)
{
    scratch s = scratch_new();
    model saved = model_new(TG_F32, tg_adamw_config(0.01), 2), target = model_new(TG_F32, tg_adamw_config(0.01), 3);
    cr_assert_eq(tg_checkpoint_save(s.path, saved.params, saved.optim, NULL), TG_OK, "%s", tg_last_error());
    cf_blob good = cf_read(s.path);
    static bad_case cases[64];
    int n = bad_cases(good, cases);
    snapshot before = snapshot_take(&target);
    for (int i = 0; i < n; i++) {
        const char *path = scratch_file(&s, "bad.safetensors");
        cf_write(path, cases[i].file.bytes, cases[i].file.size);
        tg_checkpoint_info info = {.step = -7, .config = (char *)"untouched"};
        tg_clear_error();
        tg_status status = i % 2 ? tg_checkpoint_load(path, target.params, target.optim, &info)
                                 : tg_checkpoint_load_buffer(cases[i].file.bytes, cases[i].file.size, path,
                                                             target.params, target.optim, &info);
        const char *message = tg_last_error();
        cr_assert_eq(status, TG_ERR_INVALID, "%s: loaded (status %d)", cases[i].what, status);
        cr_assert(strstr(message, "tg_checkpoint_load") && strstr(message, path) &&
                      strstr(message, "nothing was changed"),
                  "%s: %s", cases[i].what, message);
        for (int w = 0; w < 3 && cases[i].words[w]; w++)
            cr_assert(strstr(message, cases[i].words[w]), "%s: no '%s' in: %s", cases[i].what, cases[i].words[w],
                      message);
        snapshot now = snapshot_take(&target);
        cr_assert(memcmp(now.bytes, before.bytes, before.size) == 0, "%s: the model changed", cases[i].what);
        cr_assert(info.step == -7 && !strcmp(info.config, "untouched"), "%s: the info changed", cases[i].what);
        free(now.bytes);
        free(cases[i].file.bytes);
    }
    cr_log_info("%d damaged or mismatched files refused", n);
    /* The undamaged file loads. */
    cr_assert_eq(tg_checkpoint_load(s.path, target.params, target.optim, NULL), TG_OK, "%s", tg_last_error());
    assert_same_model("the good file", &saved, &target);
    free(before.bytes), free(good.bytes);
    model_free(&saved), model_free(&target);
    scratch_remove(&s);
}

Test(checkpoint, the_wrong_optimizer_or_model_is_refused, .timeout = 60) /* a FIFO must not block it */
{
    scratch s = scratch_new();
    model adamw = model_new(TG_F32, tg_adamw_config(0.01), 1), sgd = model_new(TG_F32, tg_sgd_config(0.1, 0.9), 1);
    model f64 = model_new(TG_F64, tg_adamw_config(0.01), 1);
    cr_assert_eq(tg_checkpoint_save(s.path, adamw.params, adamw.optim, NULL), TG_OK, "%s", tg_last_error());
    snapshot before = snapshot_take(&sgd);
    cr_assert_eq(tg_checkpoint_load(s.path, sgd.params, sgd.optim, NULL), TG_ERR_INVALID);
    cr_assert(strstr(tg_last_error(), "adamw") && strstr(tg_last_error(), "sgd"), "%s", tg_last_error());
    cr_assert_eq(tg_checkpoint_load(s.path, f64.params, f64.optim, NULL), TG_ERR_INVALID);
    cr_assert(strstr(tg_last_error(), "F32 in the file but") && strstr(tg_last_error(), "F64 in the model"), "%s",
              tg_last_error());
    cr_assert_eq(tg_checkpoint_save(s.path, adamw.params, NULL, NULL), TG_OK);
    cr_assert_eq(tg_checkpoint_load(s.path, sgd.params, sgd.optim, NULL), TG_ERR_INVALID);
    cr_assert(strstr(tg_last_error(), "no optimizer state"), "%s", tg_last_error());
    snapshot after = snapshot_take(&sgd);
    cr_assert(memcmp(before.bytes, after.bytes, before.size) == 0);
    const char *missing = scratch_file(&s, "missing.safetensors");
    cr_assert_eq(tg_checkpoint_load(missing, sgd.params, NULL, NULL), TG_ERR_INVALID);
    cr_assert(strstr(tg_last_error(), missing) && strstr(tg_last_error(), "cannot open"), "%s", tg_last_error());
    cr_assert_eq(tg_checkpoint_load(s.dir, sgd.params, NULL, NULL), TG_ERR_INVALID);
    cr_assert(strstr(tg_last_error(), "not a regular file"), "%s", tg_last_error());
    /* a FIFO with no writer: refused at once, not waited on */
    const char *fifo = scratch_file(&s, "fifo");
    cr_assert_eq(mkfifo(fifo, 0600), 0, "mkfifo: %s", strerror(errno));
    cr_assert_eq(tg_checkpoint_load(fifo, sgd.params, NULL, NULL), TG_ERR_INVALID);
    cr_assert(strstr(tg_last_error(), "not a regular file"), "%s", tg_last_error());
    cr_assert_eq(tg_checkpoint_read_info(fifo, &(tg_checkpoint_info){0}), TG_ERR_INVALID);
    free(before.bytes), free(after.bytes);
    model_free(&adamw), model_free(&sgd), model_free(&f64);
    scratch_remove(&s);
}

Test(checkpoint, bad_save_requests)
{
    scratch s = scratch_new();
    model a = model_new(TG_F32, tg_adamw_config(0.01), 1), b = model_new(TG_F32, tg_adamw_config(0.01), 1);
    cr_assert_eq(tg_checkpoint_save(NULL, a.params, NULL, NULL), TG_ERR_INVALID);
    cr_assert_eq(tg_checkpoint_save(s.path, NULL, NULL, NULL), TG_ERR_INVALID);
    cr_assert_eq(tg_checkpoint_save(s.path, a.params, b.optim, NULL), TG_ERR_INVALID);
    cr_assert(strstr(tg_last_error(), "another parameter store"), "%s", tg_last_error());
    tg_checkpoint_info info = {.config = (char *)"{\"unclosed\": "};
    cr_assert_eq(tg_checkpoint_save(s.path, a.params, a.optim, &info), TG_ERR_INVALID);
    cr_assert(strstr(tg_last_error(), "config") && strstr(tg_last_error(), s.path), "%s", tg_last_error());
    char nowhere[192];
    snprintf(nowhere, sizeof nowhere, "%s/no/such/dir/model.safetensors", s.dir);
    cr_assert_eq(tg_checkpoint_save(nowhere, a.params, a.optim, NULL), TG_ERR_INVALID);
    cr_assert(strstr(tg_last_error(), nowhere) && strstr(tg_last_error(), "temporary"), "%s", tg_last_error());
    cr_assert_eq(count_files(&s, ""), 2, "failed saves left files behind"); /* "." and ".." */
    tg_params *reserved = tg_params_create(TG_DEVICE_CPU);
    cr_assert_eq(tg_checkpoint_save(s.path, reserved, NULL, NULL), TG_ERR_INVALID);
    cr_assert(strstr(tg_last_error(), "no parameters"), "%s", tg_last_error());
    tg_params_add(a.params, "late.weight", TG_F32, 1, (int64_t[]){3});
    cr_assert_eq(tg_checkpoint_save(s.path, a.params, a.optim, NULL), TG_ERR_STATE);
    tg_params_free(reserved);
    model_free(&a), model_free(&b);
    scratch_remove(&s);
}

/* ---- resuming --------------------------------------------------------------------------------------------- */

enum { BATCH = 4, LENGTH = 16, VOCAB = 6, DIM = 8, KERNEL = 4, LAG = 2, HALF = 6 };

typedef struct {
    shift_model m;
    tg_optim *optim;
    tg_rng data;
    tg_tape *tape;
} trainer;

static void trainer_init(trainer *t, uint64_t init_seed, uint64_t data_seed)
{
    (void)shift_accuracy; /* the demo's; not needed here */
    cr_assert_eq(shift_model_init(&t->m, TG_F32, VOCAB, DIM, KERNEL, LAG, init_seed), TG_OK, "%s", tg_last_error());
    tg_optim_config config = tg_adamw_config(0.02);
    config.max_grad_norm = 0.5;
    config.schedule = (tg_schedule){TG_SCHEDULE_COSINE, 3, 2 * HALF, 0.1};
    t->optim = tg_optim_create(t->m.params, &config);
    cr_assert(t->optim, "%s", tg_last_error());
    int head = tg_optim_add_group(t->optim, (tg_optim_group){0.5, 0.05});
    cr_assert_eq(tg_optim_assign(t->optim, "head.*", head, NULL), TG_OK);
    tg_rng_seed(&t->data, data_seed);
    t->tape = tg_tape_create();
}

static void trainer_free(trainer *t)
{
    tg_tape_free(t->tape);
    tg_optim_free(t->optim);
    tg_params_free(t->m.params);
}

/* Steps [from, to): two micro-batches each, from the trainer's data generator. */
static void train(trainer *t, int from, int to, double *losses)
{
    int32_t tokens[BATCH * LENGTH], targets[BATCH * LENGTH];
    int64_t shape[2] = {BATCH, LENGTH};
    for (int step = from; step < to; step++) {
        losses[step] = 0;
        for (int micro = 0; micro < 2; micro++) {
            shift_batch(&t->data, &t->m, BATCH, LENGTH, tokens, targets);
            tg_tensor *ids = tg_from_data(t->tape, TG_I32, TG_DEVICE_CPU, 2, shape, tokens);
            tg_tensor *want = tg_from_data(t->tape, TG_I32, TG_DEVICE_CPU, 2, shape, targets);
            tg_tensor *loss = shift_model_loss(&t->m, t->tape, ids, want, NULL);
            cr_assert(loss && tg_backward(t->tape, loss) == TG_OK, "%s", tg_last_error());
            losses[step] += tg_item(loss);
            tg_tape_reset(t->tape);
        }
        cr_assert_eq(tg_optim_step(t->optim, 2), TG_OK, "%s", tg_last_error());
        tg_params_zero_grad(t->m.params);
    }
}

Test(checkpoint, resuming_repeats_an_uninterrupted_run_bit_for_bit)
{
    scratch s = scratch_new();
    uint64_t init_seed = tt_seed(), data_seed = tt_seed() + 1;
    double straight[2 * HALF], resumed[2 * HALF];
    trainer a;
    trainer_init(&a, init_seed, data_seed);
    train(&a, 0, 2 * HALF, straight);

    trainer b;
    trainer_init(&b, init_seed, data_seed);
    train(&b, 0, HALF, resumed);
    tg_checkpoint_info info = {.step = HALF, .rng = b.data, .config = (char *)"{\"task\": \"shift\"}"};
    cr_assert_eq(tg_checkpoint_save(s.path, b.m.params, b.optim, &info), TG_OK, "%s", tg_last_error());
    trainer_free(&b);

    trainer c; /* fresh objects, other initial values, another data seed: the file must set them all */
    trainer_init(&c, init_seed + 17, data_seed + 17);
    tg_checkpoint_info loaded;
    cr_assert_eq(tg_checkpoint_load(s.path, c.m.params, c.optim, &loaded), TG_OK, "%s", tg_last_error());
    c.data = loaded.rng;
    cr_assert_eq(loaded.step, HALF);
    cr_assert_eq(tg_optim_step_count(c.optim), HALF);
    train(&c, (int)loaded.step, 2 * HALF, resumed);
    for (int step = 0; step < 2 * HALF; step++)
        cr_assert(resumed[step] == straight[step], "step %d: loss %.17g resumed, %.17g straight", step, resumed[step],
                  straight[step]);
    cr_assert_neq(straight[2 * HALF - 1], straight[HALF], "the losses should move");
    size_t bytes = (size_t)tg_params_numel(a.m.params) * 4;
    cr_assert(memcmp(tg_params_data(a.m.params), tg_params_data(c.m.params), bytes) == 0, "final parameters differ");
    tg_checkpoint_info_clear(&loaded);
    trainer_free(&a), trainer_free(&c);
    scratch_remove(&s);
}

Test(checkpoint, read_info_without_a_model)
{
    scratch s = scratch_new();
    model a = model_new(TG_F32, tg_sgd_config(0.1, 0.5), 1);
    tg_checkpoint_info info = random_info(), got;
    cr_assert_eq(tg_checkpoint_save(s.path, a.params, a.optim, &info), TG_OK, "%s", tg_last_error());
    cr_assert_eq(tg_checkpoint_read_info(s.path, &got), TG_OK, "%s", tg_last_error());
    cr_assert_eq(got.step, info.step);
    cr_assert(memcmp(&got.rng, &info.rng, sizeof got.rng) == 0);
    cr_assert_str_eq(got.config, CONFIG);
    tg_checkpoint_info_clear(&got);
    cf_blob file = cf_read(s.path);
    cf_write(s.path, file.bytes, file.size - 1); /* a truncated file's layout is wrong, even unread */
    cr_assert_eq(tg_checkpoint_read_info(s.path, &got), TG_ERR_INVALID);
    cr_assert(strstr(tg_last_error(), "truncated") && strstr(tg_last_error(), s.path), "%s", tg_last_error());
    free(file.bytes);
    model_free(&a);
    scratch_remove(&s);
}
