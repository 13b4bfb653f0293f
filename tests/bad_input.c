/* tests/bad_input.c: the harness of the bad-input matrix (see bad_input.h). */
#define _GNU_SOURCE /* mkdtemp */
#include "bad_input.h"

#include "core/internal.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define BI_MAX_CASES 1024

static bi_case cases[BI_MAX_CASES];
static size_t n_cases;

bi_case *bi_register(const char *function, const char *argument, const char *what, bi_case_fn run)
{
    if (n_cases == BI_MAX_CASES) {
        fprintf(stderr, "bad_input: more than %d cases; raise BI_MAX_CASES\n", BI_MAX_CASES);
        abort();
    }
    bi_case *c = &cases[n_cases++];
    *c = (bi_case){.function = function, .argument = argument, .run = run};
    snprintf(c->what, sizeof c->what, "%s", what);
    return c;
}

size_t bi_case_count(void) { return n_cases; }

void bi_free_params(struct criterion_test_params *params) { cr_free(params->params); }

/* ---- snapshots ---------------------------------------------------------------------------- */

struct bi_snapshot {
    size_t nodes, bytes, n_params, n_model_params, model_bytes;
    bool grad_enabled;
    tg_rng rng;
    int64_t optim_steps;
    unsigned char *data, *grad, *model_data; /* copies of the stores' buffers */
};

static void snapshot_free(struct bi_snapshot *s)
{
    if (!s) return;
    free(s->data);
    free(s->grad);
    free(s->model_data);
    free(s);
}

/* ---- the fixture ------------------------------------------------------------------------ */

static const char corpus[] = "hello, world. the quick brown fox jumps over the lazy dog. é!\n";

void bi_fixture_init(bi_fixture *f, uint64_t seed, bool with_files)
{
    memset(f, 0, sizeof *f);
    f->seed = seed;
    tg_rng_seed(&f->rng, seed);
    tg_rng_seed(&f->data_rng, seed ^ 0x9e3779b97f4a7c15u);
    f->tape = tg_tape_create();
    f->params = tg_params_create(TG_DEVICE_CPU);
    cr_assert(f->tape && f->params, "fixture: %s", tg_last_error());
    f->weight = tg_params_add(f->params, "layer.weight", TG_F32, 2, (int64_t[]){4, 3});
    f->bias = tg_params_add(f->params, "layer.bias", TG_F32, 1, (int64_t[]){3});
    cr_assert(f->weight && f->bias, "fixture: %s", tg_last_error());
    tg_fill_normal(f->weight, &f->data_rng, 0.0, 0.5);
    tg_fill_normal(f->bias, &f->data_rng, 0.0, 0.5);
    tg_optim_config config = tg_adamw_config(1e-2);
    config.max_grad_norm = 1.0;
    f->optim = tg_optim_create(f->params, &config);
    cr_assert(f->optim, "fixture: %s", tg_last_error());

    /* One step, so that the optimizer has moments and a step count to lose. */
    for (int step = 0; step < 2; step++) {
        f->x = bi_randn(f, TG_F32, 2, (int64_t[]){2, 4});
        tg_tensor *y = tg_add(f->tape, tg_matmul(f->tape, f->x, f->weight, false, false), f->bias);
        f->loss = tg_sum_all(f->tape, tg_tanh(f->tape, y));
        cr_assert(f->loss, "fixture: %s", tg_last_error());
        if (step == 1) break; /* the second forward stays recorded for the cases */
        cr_assert_eq(tg_backward(f->tape, f->loss), TG_OK, "fixture: %s", tg_last_error());
        cr_assert_eq(tg_optim_step(f->optim, 1), TG_OK, "fixture: %s", tg_last_error());
        tg_params_zero_grad(f->params);
        tg_tape_reset(f->tape);
    }

    f->text = tg_text_from_memory(corpus, sizeof corpus - 1, NULL);
    cr_assert(f->text, "fixture: %s", tg_last_error());
    if (!with_files) return;
    snprintf(f->dir, sizeof f->dir, "/tmp/tg_bad_input_XXXXXX");
    cr_assert(mkdtemp(f->dir), "fixture: mkdtemp failed");
    snprintf(f->checkpoint, sizeof f->checkpoint, "%s/good.safetensors", f->dir);
    tg_checkpoint_info info = {.step = 1, .config = "{\"fixture\": true}"};
    cr_assert_eq(tg_checkpoint_save(f->checkpoint, f->params, f->optim, &info), TG_OK, "fixture: %s", tg_last_error());
}

void bi_fixture_free(bi_fixture *f)
{
    tg_mamba_free(f->model);
    tg_params_free(f->model_params);
    tg_optim_free(f->optim);
    tg_params_free(f->params);
    tg_tape_free(f->tape);
    tg_text_free(f->text);
    snapshot_free(f->before);
    if (f->dir[0]) {
        char command[128];
        snprintf(command, sizeof command, "rm -rf '%s'", f->dir);
        cr_assert_eq(system(command), 0, "could not remove %s", f->dir);
    }
}

const char *bi_path(bi_fixture *f, const char *name)
{
    static char path[256];
    snprintf(path, sizeof path, "%s/%s", f->dir, name);
    return path;
}

static size_t store_bytes(tg_params *params)
{
    size_t bytes = 0;
    for (size_t i = 0; i < tg_params_count(params); i++) {
        tg_tensor *p = tg_params_get(params, i);
        bytes += (size_t)tg_numel(p) * tg_dtype_size(p->dtype);
    }
    return bytes;
}

static unsigned char *copy_of(const void *buffer, size_t bytes)
{
    unsigned char *copy = malloc(bytes ? bytes : 1);
    cr_assert(copy);
    if (bytes) memcpy(copy, buffer, bytes);
    return copy;
}

void bi_before(bi_fixture *f)
{
    snapshot_free(f->before);
    f->before = malloc(sizeof *f->before);
    cr_assert(f->before);
    struct bi_snapshot *s = f->before;
    size_t bytes = store_bytes(f->params);
    *s = (struct bi_snapshot){.nodes = tg_tape_node_count(f->tape),
                              .bytes = tg_tape_bytes_in_use(f->tape),
                              .n_params = tg_params_count(f->params),
                              .grad_enabled = tg_tape_grad_enabled(f->tape),
                              .rng = f->rng,
                              .optim_steps = tg_optim_step_count(f->optim),
                              .data = copy_of(tg_params_data(f->params), bytes),
                              .grad = copy_of(tg_params_grad(f->params), bytes)};
    if (f->model_params) {
        s->model_bytes = store_bytes(f->model_params);
        s->n_model_params = tg_params_count(f->model_params);
        s->model_data = copy_of(tg_params_data(f->model_params), s->model_bytes);
    }
    tg_clear_error();
}

/* ---- checks --------------------------------------------------------------------------------- */

static bool is_word_char(char ch) { return isalnum((unsigned char)ch) || ch == '_'; }

/* Whether `word` occurs in text with no identifier character glued to either end. */
static bool has_word(const char *text, const char *word)
{
    size_t n = strlen(word);
    for (const char *at = strstr(text, word); at; at = strstr(at + 1, word)) {
        bool starts = at == text || !is_word_char(at[-1]) || !is_word_char(word[0]);
        bool ends = !is_word_char(at[n]) || !is_word_char(word[n - 1]);
        if (starts && ends) return true;
    }
    return false;
}

static void check_result(const bi_fixture *f, const bi_case *c)
{
    const char *label = c->function;
    switch (f->returns) {
    case BI_RETURNS_NULL: cr_assert_null(f->pointer, "%s (%s): should have returned NULL", label, c->what); break;
    case BI_RETURNS_STATUS:
        cr_assert_neq(f->status, TG_OK, "%s (%s): should have failed", label, c->what);
        cr_assert_eq(f->status, tg_last_status(), "%s (%s): returned '%s' but set its error as '%s'", label, c->what,
                     tg_status_name(f->status), tg_status_name(tg_last_status()));
        break;
    case BI_RETURNS_NAN:
        cr_assert(isnan(f->real), "%s (%s): should have returned NaN, got %g", label, c->what, f->real);
        break;
    case BI_RETURNS_VALUE:
        cr_assert_eq(f->integer, f->error_value, "%s (%s): should have returned %lld, got %lld", label, c->what,
                     (long long)f->error_value, (long long)f->integer);
        break;
    case BI_RETURNS_NOTHING: break;
    }
    const char *message = tg_last_error();
    size_t n = strlen(c->function);
    cr_assert(strncmp(message, c->function, n) == 0 && message[n] == ':',
              "%s (%s): the message should start with \"%s:\", got \"%s\"", label, c->what, c->function, message);
    const char *word = f->expect_word ? f->expect_word : c->argument;
    cr_assert(has_word(message + n + 1, word), "%s (%s): the message should name \"%s\", got \"%s\"", label, c->what,
              word, message);
}

static void check_unchanged(bi_fixture *f, const bi_case *c)
{
    const struct bi_snapshot *s = f->before;
    const char *label = c->function;
    cr_assert_eq(tg_tape_node_count(f->tape), s->nodes, "%s (%s): left nodes on the tape", label, c->what);
    cr_assert_eq(tg_tape_bytes_in_use(f->tape), s->bytes, "%s (%s): left memory on the tape", label, c->what);
    cr_assert_eq(tg_tape_grad_enabled(f->tape), s->grad_enabled, "%s (%s): switched recording", label, c->what);
    cr_assert_eq(tg_params_count(f->params), s->n_params, "%s (%s): changed the store", label, c->what);
    size_t bytes = store_bytes(f->params);
    cr_assert(memcmp(tg_params_data(f->params), s->data, bytes) == 0, "%s (%s): changed parameters", label, c->what);
    cr_assert(memcmp(tg_params_grad(f->params), s->grad, bytes) == 0, "%s (%s): changed gradients", label, c->what);
    cr_assert(memcmp(&f->rng, &s->rng, sizeof s->rng) == 0, "%s (%s): moved the generator", label, c->what);
    cr_assert_eq(tg_optim_step_count(f->optim), s->optim_steps, "%s (%s): changed the optimizer", label, c->what);
    if (s->model_data)
        cr_assert_eq(tg_params_count(f->model_params), s->n_model_params, "%s (%s): changed the model's store", label,
                     c->what);
    if (s->model_data)
        cr_assert(memcmp(tg_params_data(f->model_params), s->model_data, s->model_bytes) == 0,
                  "%s (%s): changed the model", label, c->what);
}

/* The backward of the recorded loss and one optimizer step. */
static void train_on(bi_fixture *f, const char *who)
{
    cr_assert_eq(tg_backward(f->tape, f->loss), TG_OK, "%s: backward after the case: %s", who, tg_last_error());
    cr_assert_eq(tg_optim_step(f->optim, 1), TG_OK, "%s: optimizer step after the case: %s", who, tg_last_error());
}

static void check_still_trains(bi_fixture *f, const bi_case *c)
{
    bi_fixture twin;
    bi_fixture_init(&twin, f->seed, false);
    size_t bytes = store_bytes(f->params);
    cr_assert_eq(bytes, store_bytes(twin.params));
    train_on(f, c->function);
    train_on(&twin, "twin");
    cr_assert(memcmp(tg_params_grad(f->params), tg_params_grad(twin.params), bytes) == 0,
              "%s (%s): the gradients after the case differ from an untouched twin's", c->function, c->what);
    cr_assert(memcmp(tg_params_data(f->params), tg_params_data(twin.params), bytes) == 0,
              "%s (%s): the optimizer step after the case differs from an untouched twin's", c->function, c->what);
    cr_assert(memcmp(&f->rng, &twin.rng, sizeof f->rng) == 0, "%s (%s): moved the generator", c->function, c->what);
    bi_fixture_free(&twin);
}

void bi_run_case(size_t index)
{
    cr_assert_lt(index, n_cases);
    const bi_case *c = &cases[index];
    bi_fixture f;
    bi_fixture_init(&f, tt_seed() + index, true);
    c->run(&f, c);
    cr_assert(f.called, "%s (%s): the case made no call", c->function, c->what);
    check_result(&f, c);
    check_unchanged(&f, c);
    /* Graph capture cases must not leave a capture running. */
    cr_assert(!tg_graph_capturing(), "%s (%s): left a capture running", c->function, c->what);
    check_still_trains(&f, c);
    bi_fixture_free(&f);
}

/* ---- inputs ------------------------------------------------------------------------------- */

tg_tensor *bi_randn(bi_fixture *f, tg_dtype dtype, int ndim, const int64_t *shape)
{
    tg_tensor *t = tg_empty(f->tape, dtype, TG_DEVICE_CPU, ndim, shape);
    cr_assert(t, "bi_randn: %s", tg_last_error());
    cr_assert_eq(tg_fill_normal(t, &f->data_rng, 0.0, 1.0), TG_OK, "bi_randn: %s", tg_last_error());
    return t;
}

tg_tensor *bi_leaf(bi_fixture *f, tg_dtype dtype, int ndim, const int64_t *shape)
{
    tg_tensor *t = bi_randn(f, dtype, ndim, shape);
    cr_assert_eq(tg_set_requires_grad(t, true), TG_OK, "bi_leaf: %s", tg_last_error());
    return t;
}

tg_tensor *bi_ids(bi_fixture *f, int ndim, const int64_t *shape, int32_t bound)
{
    tg_tensor *t = tg_empty(f->tape, TG_I32, TG_DEVICE_CPU, ndim, shape);
    cr_assert(t, "bi_ids: %s", tg_last_error());
    int32_t *ids = tg_data(t);
    for (int64_t i = 0; i < tg_numel(t); i++) ids[i] = (int32_t)tg_rng_below(&f->data_rng, bound);
    return t;
}

tg_mamba *bi_model(bi_fixture *f)
{
    if (f->model) return f->model;
    f->model_params = tg_params_create(TG_DEVICE_CPU);
    tg_rng rng;
    tg_rng_seed(&rng, f->seed);
    tg_mamba_config config = {.vocab_size = 8, .d_model = 8, .n_layer = 1, .d_state = 4};
    f->model = tg_mamba_create(&config, f->model_params, &rng);
    cr_assert(f->model, "bi_model: %s", tg_last_error());
    return f->model;
}

static tg_tensor *struct_copy(bi_fixture *f, const tg_tensor *t)
{
    tg_tensor *copy = tg_tape_alloc(f->tape, sizeof *copy);
    cr_assert(copy);
    *copy = *t;
    copy->requires_grad = false;
    copy->grad = NULL;
    copy->producer = NULL;
    return copy;
}

tg_tensor *bi_fake_device(bi_fixture *f, const tg_tensor *t)
{
    tg_tensor *fake = struct_copy(f, t);
    fake->device = TG_DEVICE_CUDA;
    return fake;
}

tg_tensor *bi_released(bi_fixture *f, tg_tensor *t)
{
    tg_tensor *copy = tg_scale(f->tape, t, 1.0);
    cr_assert(copy, "bi_released: %s", tg_last_error());
    cr_assert_eq(tg_give_back(f->tape, 1, &copy), TG_OK, "bi_released: %s", tg_last_error());
    return copy;
}

tg_tensor *bi_no_storage(bi_fixture *f, const tg_tensor *t)
{
    tg_tensor *broken = struct_copy(f, t);
    broken->storage = NULL;
    return broken;
}

tg_tensor *bi_bad_rank(bi_fixture *f, const tg_tensor *t, int ndim)
{
    tg_tensor *broken = struct_copy(f, t);
    broken->ndim = ndim;
    return broken;
}
