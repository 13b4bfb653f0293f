/* tests/test_checkpoint_corpus.c: the committed corpus of damaged checkpoints
 * (tests/data/checkpoints, written by tests/corpus/write_checkpoint_corpus.c). The good file
 * loads, with the values and metadata it was written with; every other file is refused, by
 * path and from memory, with a message that says nothing was changed, and the model, the
 * optimizer and the info are left as they were. So are the files that are not files: a FIFO
 * (without blocking), a directory and /dev/zero. */
#define _POSIX_C_SOURCE 200809L /* mkdtemp, mkfifo */
#include "corpus/checkpoint_corpus.h"
#include "checkpoint_files.h"

#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

typedef struct {
    tg_params *params;
    tg_optim *optim;
} model;

/* The corpus model, every value set to a mark that no file holds. */
static model marked_model(void)
{
    model m;
    m.params = fuzz_model_build(&m.optim);
    cr_assert(m.params, "%s", tg_last_error());
    float *data = tg_params_data(m.params);
    for (int64_t i = 0; i < tg_params_numel(m.params); i++) data[i] = -7.5f;
    return m;
}

static void model_free(model *m)
{
    tg_optim_free(m->optim);
    tg_params_free(m->params);
}

/* The model's parameters and optimizer state, as a checkpoint in memory holds them. */
static cf_blob state_of(const model *m, const char *dir)
{
    char path[512];
    snprintf(path, sizeof path, "%s/state.safetensors", dir);
    cr_assert_eq(tg_checkpoint_save(path, m->params, m->optim, NULL), TG_OK, "%s", tg_last_error());
    cf_blob b = cf_read(path);
    unlink(path);
    return b;
}

static void assert_refused(const char *what, tg_status status, const model *m, const cf_blob *before, const char *dir,
                           const tg_checkpoint_info *info)
{
    cr_assert_eq(status, TG_ERR_INVALID, "%s: not refused (status %d)", what, status);
    cr_assert(strstr(tg_last_error(), "tg_checkpoint_load"), "%s: %s", what, tg_last_error());
    cf_blob now = state_of(m, dir);
    cr_assert(now.size == before->size && !memcmp(now.bytes, before->bytes, now.size), "%s: the model changed", what);
    cr_assert(info->step == -3 && !strcmp(info->config, "untouched"), "%s: the info changed", what);
    free(now.bytes);
}

Test(checkpoint_corpus, the_good_file_loads_with_its_values)
{
    model m = marked_model();
    tg_checkpoint_info info = {0};
    cr_assert_eq(tg_checkpoint_load(CORPUS_DIR "/good.safetensors", m.params, m.optim, &info), TG_OK, "%s",
                 tg_last_error());
    for (size_t i = 0; i < tg_params_count(m.params); i++) {
        const tg_tensor *p = tg_params_get(m.params, i);
        for (int64_t j = 0; j < tg_numel(p); j++)
            cr_assert_eq(tg_get_flat(p, j), corpus_value(i, j), "%s[%lld]", p->name, (long long)j);
    }
    cr_assert_eq(info.step, CORPUS_STEP);
    cr_assert_eq(tg_optim_step_count(m.optim), 1);
    cr_assert_str_eq(info.config, CORPUS_CONFIG);
    cr_assert(info.rng.s[0] == 1 && info.rng.s[1] == 2 && info.rng.s[2] == 3 && info.rng.s[3] == 4);
    tg_checkpoint_info_clear(&info);
    model_free(&m);
}

Test(checkpoint_corpus, every_damaged_file_is_refused_and_changes_nothing, .timeout = 120)
{
    char dir[] = "/tmp/tg_corpus_XXXXXX";
    cr_assert(mkdtemp(dir));
    model m = marked_model();
    cf_blob before = state_of(&m, dir);
    DIR *listing = opendir(CORPUS_DIR);
    cr_assert(listing, "no corpus at %s", CORPUS_DIR);
    int refused = 0;
    for (struct dirent *e; (e = readdir(listing));) {
        if (!strstr(e->d_name, ".safetensors") || !strcmp(e->d_name, "good.safetensors")) continue;
        char path[1024];
        snprintf(path, sizeof path, "%s/%s", CORPUS_DIR, e->d_name);
        tg_checkpoint_info info = {.step = -3, .config = (char *)"untouched"};
        assert_refused(e->d_name, tg_checkpoint_load(path, m.params, m.optim, &info), &m, &before, dir, &info);
        cr_assert(strstr(tg_last_error(), path) && strstr(tg_last_error(), "nothing was changed"), "%s: %s", e->d_name,
                  tg_last_error());
        cf_blob file = cf_read(path);
        assert_refused(e->d_name, tg_checkpoint_load_buffer(file.bytes, file.size, e->d_name, m.params, m.optim, &info),
                       &m, &before, dir, &info);
        free(file.bytes);
        refused++;
    }
    closedir(listing);
    cr_assert_geq(refused, 80, "only %d damaged files in %s", refused, CORPUS_DIR);
    cr_log_info("%d damaged files refused", refused);

    /* Files that are not regular files. */
    char fifo[600];
    snprintf(fifo, sizeof fifo, "%s/fifo.safetensors", dir);
    cr_assert_eq(mkfifo(fifo, 0600), 0);
    const char *specials[] = {fifo, dir, "/dev/zero"};
    for (size_t i = 0; i < sizeof specials / sizeof specials[0]; i++) {
        tg_checkpoint_info info = {.step = -3, .config = (char *)"untouched"};
        assert_refused(specials[i], tg_checkpoint_load(specials[i], m.params, m.optim, &info), &m, &before, dir, &info);
        cr_assert(strstr(tg_last_error(), "not a regular file"), "%s: %s", specials[i], tg_last_error());
        cr_assert_eq(tg_checkpoint_read_info(specials[i], &info), TG_ERR_INVALID, "%s", specials[i]);
    }
    unlink(fifo);
    rmdir(dir);
    free(before.bytes);
    model_free(&m);
}
