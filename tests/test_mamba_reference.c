/* The Mamba language model against an independent PyTorch implementation.
 *
 * tests/python/mamba_reference.py (a sequential-loop scan, F.conv1d with padding, PyTorch
 * autograd, all in float64) wrote tests/data/mamba_reference*.bin: a model's configuration,
 * parameters, token ids and targets, and its logits, loss and the gradient of every
 * parameter (a 2-layer model with the default sizes, and a 3-layer one with others). This
 * test loads the parameters by name into a tapegrad model, runs forward and backward on
 * the same ids, and compares. The file format is described in the script. */
#include "test_util.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { VEC_F64 = 0, VEC_I32 = 1 };

typedef struct {
    char name[128];
    int dtype;
    int ndim;
    int64_t shape[TG_MAX_DIMS];
    int64_t numel;
    void *data; /* double or int32_t values */
} vec_entry;

typedef struct {
    vec_entry *entries;
    uint32_t count;
} vec_file;

static void read_exact(FILE *f, void *out, size_t bytes, const char *what)
{
    cr_assert_eq(fread(out, 1, bytes, f), bytes, "test vectors truncated while reading %s", what);
}

/* The file's entries (little-endian, as the script writes them and as this machine reads). */
static vec_file load_vectors(const char *path)
{
    FILE *f = fopen(path, "rb");
    cr_assert(f, "cannot open %s (generate it with tests/python/mamba_reference.py)", path);
    char magic[8];
    read_exact(f, magic, 8, "the magic");
    cr_assert(memcmp(magic, "TGVEC001", 8) == 0, "%s is not a test-vector file", path);
    vec_file file = {0};
    read_exact(f, &file.count, 4, "the entry count");
    cr_assert(file.count > 0 && file.count < 10000);
    file.entries = calloc(file.count, sizeof *file.entries);
    for (uint32_t i = 0; i < file.count; i++) {
        vec_entry *e = &file.entries[i];
        uint32_t length, dtype, ndim;
        read_exact(f, &length, 4, "a name length");
        cr_assert(length < sizeof e->name, "entry %u: name too long", i);
        read_exact(f, e->name, length, "a name");
        read_exact(f, &dtype, 4, "a dtype");
        read_exact(f, &ndim, 4, "a rank");
        cr_assert((dtype == VEC_F64 || dtype == VEC_I32) && ndim >= 1 && ndim <= TG_MAX_DIMS, "%s: bad header",
                  e->name);
        e->dtype = (int)dtype;
        e->ndim = (int)ndim;
        read_exact(f, e->shape, 8 * ndim, "a shape");
        e->numel = 1;
        for (uint32_t d = 0; d < ndim; d++) e->numel *= e->shape[d];
        size_t bytes = (size_t)e->numel * (dtype == VEC_F64 ? 8 : 4);
        e->data = malloc(bytes);
        read_exact(f, e->data, bytes, e->name);
    }
    fclose(f);
    return file;
}

static void free_vectors(vec_file *file)
{
    for (uint32_t i = 0; i < file->count; i++) free(file->entries[i].data);
    free(file->entries);
}

static const vec_entry *find_entry(const vec_file *file, const char *name)
{
    for (uint32_t i = 0; i < file->count; i++)
        if (strcmp(file->entries[i].name, name) == 0) return &file->entries[i];
    cr_assert_fail("the test vectors have no entry '%s'", name);
    return NULL;
}

static bool entry_fits(const vec_entry *e, const tg_tensor *t)
{
    if (e->ndim != t->ndim) return false;
    for (int d = 0; d < e->ndim; d++)
        if (e->shape[d] != t->shape[d]) return false;
    return true;
}

/* ‖got − want‖ / ‖want‖ over doubles. */
static double rel_error(const tg_tensor *got, const double *want)
{
    double diff = 0, norm = 0;
    for (int64_t i = 0; i < tg_numel(got); i++) {
        double g = tg_get_flat(got, i);
        if (isnan(g)) return INFINITY;
        diff += (g - want[i]) * (g - want[i]);
        norm += want[i] * want[i];
    }
    return sqrt(diff / norm);
}

/* Builds the file's model in `dtype` (scan chunks of `chunk` steps), runs it and checks
 * logits, loss and every gradient against the file within rel_tol (relative norms) and
 * loss_tol (absolute). */
static void compare_with_reference(const char *file_name, tg_dtype dtype, int64_t chunk, double rel_tol,
                                   double loss_tol)
{
    char path[512];
    snprintf(path, sizeof path, "%s/%s", TG_TEST_DATA_DIR, file_name);
    vec_file file = load_vectors(path);
    const int32_t *sizes = find_entry(&file, "config.sizes")->data;
    tg_mamba_config config = {.vocab_size = sizes[0],
                              .d_model = sizes[1],
                              .n_layer = sizes[2],
                              .d_state = sizes[3],
                              .expand = sizes[4],
                              .d_conv = sizes[5],
                              .dt_rank = sizes[6],
                              .dtype = dtype,
                              .eps = *(double *)find_entry(&file, "config.eps")->data,
                              .scan_chunk = chunk};
    const int32_t ignore_index = *(int32_t *)find_entry(&file, "config.ignore_index")->data;

    /* The model's own initial values are all overwritten from the file. */
    tg_params *params = tg_params_create(TG_DEVICE_CPU);
    tg_rng rng;
    tg_rng_seed(&rng, 1);
    tg_mamba *model = tg_mamba_create(&config, params, &rng);
    cr_assert(model, "%s", tg_last_error());
    uint32_t n_params_in_file = 0;
    for (uint32_t i = 0; i < file.count; i++) n_params_in_file += strncmp(file.entries[i].name, "param.", 6) == 0;
    cr_assert_eq(n_params_in_file, tg_params_count(params), "the file and the model have different parameters");
    for (size_t i = 0; i < tg_params_count(params); i++) {
        tg_tensor *p = tg_params_get(params, i);
        char name[160];
        snprintf(name, sizeof name, "param.%s", p->name);
        const vec_entry *e = find_entry(&file, name);
        cr_assert(entry_fits(e, p), "%s: the file's shape differs from the model's", p->name);
        cr_assert_eq(tg_copy_from_host(p, e->data, TG_F64), TG_OK, "%s", tg_last_error());
    }

    tg_tape *tape = tg_tape_create();
    const vec_entry *ids_entry = find_entry(&file, "ids"), *targets_entry = find_entry(&file, "targets");
    tg_tensor *ids = tg_from_data(tape, TG_I32, TG_DEVICE_CPU, 2, ids_entry->shape, ids_entry->data);
    tg_tensor *targets = tg_from_data(tape, TG_I32, TG_DEVICE_CPU, 2, targets_entry->shape, targets_entry->data);
    tg_tensor *logits = tg_mamba_forward(tape, model, ids, NULL, NULL);
    cr_assert(logits, "%s", tg_last_error());
    tg_tensor *loss = tg_cross_entropy(tape, logits, targets, ignore_index);
    cr_assert(loss, "%s", tg_last_error());
    cr_assert_eq(tg_backward(tape, loss), TG_OK, "%s", tg_last_error());

    const vec_entry *want_logits = find_entry(&file, "expected.logits");
    cr_assert(entry_fits(want_logits, logits));
    double error = rel_error(logits, want_logits->data), worst = error;
    cr_assert(error <= rel_tol, "%s logits: relative error %.3g > %.3g", tg_dtype_name(dtype), error, rel_tol);
    double want_loss = *(double *)find_entry(&file, "expected.loss")->data;
    cr_assert(fabs(tg_item(loss) - want_loss) <= loss_tol, "%s loss %.15g, reference %.15g", tg_dtype_name(dtype),
              tg_item(loss), want_loss);
    for (size_t i = 0; i < tg_params_count(params); i++) {
        tg_tensor *p = tg_params_get(params, i);
        char name[160];
        snprintf(name, sizeof name, "grad.%s", p->name);
        const vec_entry *e = find_entry(&file, name);
        cr_assert(entry_fits(e, p->grad));
        error = rel_error(p->grad, e->data);
        worst = fmax(worst, error);
        cr_assert(error <= rel_tol, "%s gradient of %s: relative error %.3g > %.3g", tg_dtype_name(dtype), p->name,
                  error, rel_tol);
    }
    cr_log_info("%s, %s, scan chunk %lld: loss %.15g (reference %.15g), worst relative error %.3g", file_name,
                tg_dtype_name(dtype), (long long)model->config.scan_chunk, tg_item(loss), want_loss, worst);
    tg_tape_free(tape);
    tg_mamba_free(model);
    tg_params_free(params);
    free_vectors(&file);
}

/* float64: only rounding differs (the chunked scan sums in another order than the loop). */
Test(mamba_reference, f64_matches_pytorch) { compare_with_reference("mamba_reference.bin", TG_F64, 0, 1e-11, 1e-12); }

/* Scan chunks of 5 steps over L = 12: the backward recomputes from saved chunk states. */
Test(mamba_reference, f64_matches_pytorch_with_several_scan_chunks)
{
    compare_with_reference("mamba_reference.bin", TG_F64, 5, 1e-11, 1e-12);
}

/* float32 parameters and activations (the CPU kernels compute in double and round each
 * op's result once): every result within 1e-5 relative of the float64 reference. */
Test(mamba_reference, f32_matches_pytorch) { compare_with_reference("mamba_reference.bin", TG_F32, 5, 1e-5, 1e-5); }

/* Sizes away from the defaults: 3 layers, d_state 5, expand 3, d_conv 3, dt_rank 3, eps 1e-3. */
Test(mamba_reference, other_sizes_match_pytorch)
{
    compare_with_reference("mamba_reference_odd.bin", TG_F64, 4, 1e-11, 1e-12);
    compare_with_reference("mamba_reference_odd.bin", TG_F32, 0, 1e-5, 1e-5);
}
