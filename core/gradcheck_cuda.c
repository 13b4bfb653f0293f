/* core/gradcheck_cuda.c: an op's CUDA kernels against its CPU twin (tg_gradcheck_cuda). */
#include "core/check_report.h"
#include "internal.h"
#include "tapegrad/gradcheck.h"
#include "tapegrad/rng.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static tg_status check_arguments(tg_gradcheck_fn fn, tg_tensor *const *inputs, int n_inputs,
                                 const tg_gradcheck_options *opt, tg_gradcheck_result *result)
{
    if (!fn || !result || !inputs)
        return tg_set_error(TG_ERR_INVALID, "tg_gradcheck_cuda: %s is NULL",
                            !fn       ? "fn"
                            : !result ? "result"
                                      : "inputs");
    if (n_inputs < 1) return tg_set_error(TG_ERR_INVALID, "tg_gradcheck_cuda: n_inputs must be ≥ 1 (got %d)", n_inputs);
    for (int i = 0; i < n_inputs; i++) {
        char name[32];
        snprintf(name, sizeof name, "inputs[%d]", i);
        if (!tg_check_tensor("tg_gradcheck_cuda", name, inputs[i])) return tg_last_status();
        if (inputs[i]->device != TG_DEVICE_CPU) {
            const char *names[1] = {name};
            const tg_tensor *tensors[1] = {inputs[i]};
            return tg_error_tensors(TG_ERR_DEVICE, 1, names, tensors,
                                    "tg_gradcheck_cuda: the inputs must be on the cpu (the reference run)");
        }
    }
    if (!(opt->atol >= 0) || !isfinite(opt->atol) || !(opt->rtol >= 0) || !isfinite(opt->rtol))
        return tg_set_error(TG_ERR_INVALID, "tg_gradcheck_cuda: options: %s must be finite and ≥ 0",
                            !(opt->atol >= 0) || !isfinite(opt->atol) ? "atol" : "rtol");
    if (!tg_device_available(TG_DEVICE_CUDA))
        return tg_set_error(TG_ERR_DEVICE, "tg_gradcheck_cuda: no CUDA device to check on");
    return TG_OK;
}

/* x's CUDA twin on the tape: x's geometry (shape, strides, offset) over a device buffer, x's
 * values, and a gradient when x requires one. */
static tg_tensor *cuda_twin(tg_tape *tape, tg_tensor *x)
{
    int64_t span = x->offset + 1;
    for (int d = 0; d < x->ndim; d++) span += (x->shape[d] > 0 ? x->shape[d] - 1 : 0) * x->strides[d];
    tg_tensor *buffer = tg_empty(tape, x->dtype, TG_DEVICE_CUDA, 1, &span);
    tg_tensor *twin = buffer ? tg_view(tape, buffer, x->ndim, x->shape, x->strides, x->offset) : NULL;
    if (!twin || tg_copy(twin, x) != TG_OK) return NULL;
    if (x->requires_grad && tg_set_requires_grad(twin, true) != TG_OK) return NULL;
    return twin;
}

/* "tg_gradcheck_cuda: <what>: " in front of the message of the call that failed. */
static tg_status failed(const char *what)
{
    char inner[768];
    snprintf(inner, sizeof inner, "%s", tg_last_error());
    return tg_set_error(TG_ERR_INVALID, "tg_gradcheck_cuda: %s: %s", what, inner);
}

/* The backward from out, seeded with `seed` (out's elements, f64). */
static tg_status backward_from(tg_tape *tape, tg_tensor *out, const double *seed)
{
    tg_tensor *g = tg_empty(tape, out->dtype, out->device, out->ndim, out->shape);
    if (!g || tg_copy_from_host(g, seed, TG_F64) != TG_OK) return failed("the output gradient");
    return tg_backward_with_grad(tape, out, g) == TG_OK ? TG_OK : failed("the backward of fn's output");
}

/* a's and b's values (same shape) as f64, and x's when x is not NULL; compared element by
 * element, `which` naming them in the report. */
static tg_status compare_tensors(tg_check_state *c, int which, const tg_tensor *got, const tg_tensor *want,
                                 const tg_tensor *x)
{
    const int64_t n = tg_numel(want);
    double *g = malloc(sizeof(double) * (size_t)(n ? n : 1)), *w = malloc(sizeof(double) * (size_t)(n ? n : 1));
    double *v = malloc(sizeof(double) * (size_t)(n ? n : 1));
    tg_status status = g && w && v ? TG_OK : tg_set_error(TG_ERR_NOMEM, "tg_gradcheck_cuda: out of memory");
    if (status == TG_OK) status = tg_copy_to_host(got, g, TG_F64);
    if (status == TG_OK) status = tg_copy_to_host(want, w, TG_F64);
    if (status == TG_OK) status = tg_copy_to_host(x ? x : want, v, TG_F64);
    for (int64_t e = 0; status == TG_OK && e < n; e++) tg_check_compare(c, x ? x : want, which, e, 0, v[e], g[e], w[e]);
    free(g), free(w), free(v);
    return status;
}

tg_status tg_gradcheck_cuda(tg_gradcheck_fn fn, tg_tensor *const *inputs, int n_inputs, void *user_data,
                            const tg_gradcheck_options *options, tg_gradcheck_result *result)
{
    const tg_gradcheck_options opt = options ? *options : tg_gradcheck_defaults();
    tg_status status = check_arguments(fn, inputs, n_inputs, &opt, result);
    if (status != TG_OK) return status;
    memset(result, 0, sizeof *result);
    result->worst_input = -1;
    tg_tape *cpu = tg_tape_create(), *gpu = tg_tape_create();
    tg_tensor **twins = calloc((size_t)n_inputs, sizeof *twins),
              **reported = calloc((size_t)n_inputs + 1, sizeof *reported);
    tg_check_failures *per_tensor = calloc((size_t)n_inputs + 1, sizeof *per_tensor);
    double *seed = NULL;
    if (!cpu || !gpu || !twins || !reported || !per_tensor)
        status = tg_set_error(TG_ERR_NOMEM, "tg_gradcheck_cuda: out of memory");
    /* Every buffer the backwards are given starts as NaN (tg_gradcheck's reason). */
    if (status == TG_OK) tg_tape_set_poison(cpu, true), tg_tape_set_poison(gpu, true);
    for (int i = 0; status == TG_OK && i < n_inputs; i++) {
        if (inputs[i]->requires_grad) tg_zero_grad(inputs[i]);
        if (!(twins[i] = cuda_twin(gpu, inputs[i]))) status = failed("a CUDA copy of the inputs");
    }
    tg_tensor *out_cpu = NULL, *out_gpu = NULL;
    if (status == TG_OK && !(out_cpu = fn(cpu, inputs, n_inputs, user_data))) status = failed("fn returned NULL");
    const int64_t n_out = out_cpu ? tg_numel(out_cpu) : 0;
    if (status == TG_OK && !(seed = malloc(sizeof(double) * (size_t)(n_out ? n_out : 1))))
        status = tg_set_error(TG_ERR_NOMEM, "tg_gradcheck_cuda: out of memory");
    if (status == TG_OK) { /* the output gradient: random, the same on both devices */
        tg_rng rng;
        tg_rng_seed(&rng, opt.seed);
        for (int64_t e = 0; e < n_out; e++) seed[e] = tg_rng_normal(&rng);
        status = backward_from(cpu, out_cpu, seed);
    }
    if (status == TG_OK && !(out_gpu = fn(gpu, twins, n_inputs, user_data)))
        status = failed("fn returned NULL on CUDA");
    if (status == TG_OK && !tg_same_shape(out_cpu, out_gpu))
        status = tg_set_error(TG_ERR_INVALID, "tg_gradcheck_cuda: fn's output has another shape on CUDA");
    if (status == TG_OK) status = backward_from(gpu, out_gpu, seed);
    tg_check_state c = {result, opt.atol, opt.rtol, per_tensor};
    if (status == TG_OK) status = compare_tensors(&c, n_inputs, out_gpu, out_cpu, NULL);
    for (int i = 0; status == TG_OK && i < n_inputs; i++) {
        reported[i] = inputs[i];
        if (inputs[i]->requires_grad) status = compare_tensors(&c, i, twins[i]->grad, inputs[i]->grad, inputs[i]);
    }
    reported[n_inputs] = out_cpu;
    const tg_check_words words = {"gradcheck_cuda", "cuda", "cpu", n_inputs};
    if (status == TG_OK)
        tg_check_summarise(result, per_tensor, (const tg_tensor *const *)reported, n_inputs + 1, &words);
    free(seed), free(twins), free(reported), free(per_tensor);
    tg_tape_free(cpu);
    tg_tape_free(gpu);
    return status;
}
