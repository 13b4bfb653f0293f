/* tests/bad_input.h: the bad-input matrix, a table of wrong calls to the public API.
 *
 * Each case makes one wrong call inside a fixture that holds a recorded forward pass, a
 * parameter store with gradients, an optimizer with state, a generator and a text corpus.
 * The harness then asserts that the call failed cleanly:
 *   - it returned its documented error value (NULL, a status other than TG_OK, NaN, −1...);
 *   - tg_last_error() starts with "<function>:" and names the offending argument;
 *   - nothing changed: the tape holds the same nodes and bytes, the parameters and their
 *     gradients are the same bits, the generator has not moved;
 *   - the fixture still trains: its backward and an optimizer step give, bit for bit, what a
 *     twin fixture built from the same seed that saw no bad call gives.
 * Every case runs in its own process, so a crash fails that case alone.
 *
 *   BAD_INPUT(tg_add, "b", "a shape that does not broadcast")
 *   {
 *       tg_tensor *a = bi_randn(f, TG_F32, 2, (int64_t[]){2, 3});
 *       tg_tensor *b = bi_randn(f, TG_F32, 2, (int64_t[]){2, 4});
 *       BI_EXPECT_NULL(f, tg_add(f->tape, a, b));
 *   }
 *
 * The BI_EXPECT_* macro marks the call under test: the state is snapshotted just before it,
 * so a case may build its arguments (on the tape) first. */
#ifndef TAPEGRAD_TESTS_BAD_INPUT_H
#define TAPEGRAD_TESTS_BAD_INPUT_H

#include "test_util.h"

#include <criterion/parameterized.h>

#include <math.h>

typedef enum {
    BI_RETURNS_NULL,   /* a pointer, NULL on error */
    BI_RETURNS_STATUS, /* a tg_status other than TG_OK */
    BI_RETURNS_NAN,    /* a double, NaN on error */
    BI_RETURNS_VALUE,  /* an integer or bool equal to the documented error value */
    BI_RETURNS_NOTHING /* a void function: only the message tells */
} bi_returns;

typedef struct {
    uint64_t seed;
    tg_tape *tape;
    tg_params *params; /* "layer.weight" (4, 3) and "layer.bias" (3), f32 on the CPU */
    tg_tensor *weight, *bias;
    tg_optim *optim;         /* AdamW over params, one step taken */
    tg_tensor *x;            /* (2, 4), the input of the recorded forward */
    tg_tensor *loss;         /* sum_all(tanh(x · weight + bias)), recorded, no backward yet */
    tg_rng rng;              /* a generator the cases may pass to the API */
    tg_rng data_rng;         /* draws the cases' own inputs (bi_randn) */
    tg_text *text;           /* a small corpus ("hello, world" style), UTF-8 */
    char dir[64];            /* a temporary directory, removed at the end */
    char checkpoint[128];    /* a valid checkpoint of params and optim, in dir */
    tg_params *model_params; /* made by bi_model on first use */
    tg_mamba *model;

    /* The word the message must contain, when the body knows it better than the case's
     * argument (a file's path: messages name the file itself). */
    const char *expect_word;

    /* What the call under test gave back (set by the BI_EXPECT_* macros). */
    bool called;
    bi_returns returns;
    const void *pointer;
    tg_status status;
    double real;
    int64_t integer, error_value;
    struct bi_snapshot *before;
} bi_fixture;

typedef struct bi_case bi_case;
typedef void (*bi_case_fn)(bi_fixture *f, const bi_case *c);

struct bi_case {
    const char *function; /* the public function called wrongly */
    const char *argument; /* the word its message must contain */
    char what[96];        /* the wrong input, for failure messages */
    bi_case_fn run;
    const void *data; /* for generated cases: what to call and how to break it */
    int index, mutation;
};

/* Adds a case to this executable's table; returns it so generated cases can fill data. */
bi_case *bi_register(const char *function, const char *argument, const char *what, bi_case_fn run);
size_t bi_case_count(void);

#define BI_CONCAT2(a, b) a##b
#define BI_CONCAT(a, b) BI_CONCAT2(a, b)
/* Defines a case: the body sees `f` (the fixture) and `c` (the case). */
#define BAD_INPUT(function, argument, what) BI_DEFINE(BI_CONCAT(bad_input_, __LINE__), #function, argument, what)
#define BI_DEFINE(id, function, argument, what)                                                                        \
    static void id(bi_fixture *f, const bi_case *c);                                                                   \
    __attribute__((constructor)) static void BI_CONCAT(id, _register)(void)                                            \
    {                                                                                                                  \
        bi_register(function, argument, what, id);                                                                     \
    }                                                                                                                  \
    static void id(bi_fixture *f, __attribute__((unused)) const bi_case *c)

/* Snapshots the state just before the call under test (the macros below call it). */
void bi_before(bi_fixture *f);

#define BI_EXPECT_NULL(f, call)                                                                                        \
    do {                                                                                                               \
        bi_before(f);                                                                                                  \
        (f)->returns = BI_RETURNS_NULL;                                                                                \
        (f)->pointer = (call);                                                                                         \
        (f)->called = true;                                                                                            \
    } while (0)
#define BI_EXPECT_STATUS(f, call)                                                                                      \
    do {                                                                                                               \
        bi_before(f);                                                                                                  \
        (f)->returns = BI_RETURNS_STATUS;                                                                              \
        (f)->status = (call);                                                                                          \
        (f)->called = true;                                                                                            \
    } while (0)
#define BI_EXPECT_NAN(f, call)                                                                                         \
    do {                                                                                                               \
        bi_before(f);                                                                                                  \
        (f)->returns = BI_RETURNS_NAN;                                                                                 \
        (f)->real = (call);                                                                                            \
        (f)->called = true;                                                                                            \
    } while (0)
#define BI_EXPECT_VALUE(f, call, value)                                                                                \
    do {                                                                                                               \
        bi_before(f);                                                                                                  \
        (f)->returns = BI_RETURNS_VALUE;                                                                               \
        (f)->error_value = (int64_t)(value);                                                                           \
        (f)->integer = (int64_t)(call);                                                                                \
        (f)->called = true;                                                                                            \
    } while (0)
#define BI_EXPECT_NOTHING(f, call)                                                                                     \
    do {                                                                                                               \
        bi_before(f);                                                                                                  \
        (f)->returns = BI_RETURNS_NOTHING;                                                                             \
        call;                                                                                                          \
        (f)->called = true;                                                                                            \
    } while (0)

/* A fixture from a seed (with_files: its directory and checkpoint too), and its end. */
void bi_fixture_init(bi_fixture *f, uint64_t seed, bool with_files);
void bi_fixture_free(bi_fixture *f);

/* Runs case `index` of this executable's table in a fresh fixture and asserts all of the above. */
void bi_run_case(size_t index);

/* Frees the parameter array BI_TEST_SUITE hands to Criterion. */
void bi_free_params(struct criterion_test_params *params);

/* Defines the Criterion test that runs every case of this executable, one process each. */
#define BI_TEST_SUITE(suite)                                                                                           \
    typedef struct {                                                                                                   \
        size_t index;                                                                                                  \
    } bi_param_##suite;                                                                                                \
    ParameterizedTestParameters(bad_input, suite)                                                                      \
    {                                                                                                                  \
        size_t n = bi_case_count();                                                                                    \
        bi_param_##suite *params = cr_malloc(sizeof *params * (n ? n : 1));                                            \
        for (size_t i = 0; i < n; i++) params[i].index = i;                                                            \
        return cr_make_param_array(bi_param_##suite, params, n, bi_free_params);                                       \
    }                                                                                                                  \
    ParameterizedTest(bi_param_##suite *param, bad_input, suite, .timeout = 60) { bi_run_case(param->index); }

/* ---- inputs for the cases ---------------------------------------------------------------- */

/* A tape tensor of normal values (drawn from data_rng, not from f->rng). */
tg_tensor *bi_randn(bi_fixture *f, tg_dtype dtype, int ndim, const int64_t *shape);
/* The same, as a leaf that requires a gradient. */
tg_tensor *bi_leaf(bi_fixture *f, tg_dtype dtype, int ndim, const int64_t *shape);
/* Random i32 ids in [0, bound). */
tg_tensor *bi_ids(bi_fixture *f, int ndim, const int64_t *shape, int32_t bound);
/* A small Mamba model in a store of its own (made once per fixture). */
tg_mamba *bi_model(bi_fixture *f);
/* Broken copies of a valid tensor: each must be refused by any function that takes it. */
tg_tensor *bi_fake_device(bi_fixture *f, const tg_tensor *t);        /* claims CUDA, data on the host */
tg_tensor *bi_released(bi_fixture *f, tg_tensor *t);                 /* an equal activation, given back */
tg_tensor *bi_no_storage(bi_fixture *f, const tg_tensor *t);         /* storage NULL */
tg_tensor *bi_bad_rank(bi_fixture *f, const tg_tensor *t, int ndim); /* ndim 0 or > TG_MAX_DIMS */
/* A path in the fixture's directory. */
const char *bi_path(bi_fixture *f, const char *name);

#endif
