/* core/gradcheck.c: analytic gradients against float64 central differences. */
#include "core/check_report.h"
#include "internal.h"
#include "tapegrad/gradcheck.h"
#include "tapegrad/rng.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

tg_gradcheck_options tg_gradcheck_defaults(void)
{
    return (tg_gradcheck_options){
        .eps = 1e-6, .atol = 1e-6, .rtol = 1e-4, .max_elements_per_input = 256, .n_directions = 4, .seed = 1};
}

typedef struct {
    tg_gradcheck_fn fn;
    tg_tensor *const *inputs;
    int n_inputs;
    void *user_data;
    tg_tape *tape;
} checked_function;

/* "tg_gradcheck: <what>: " in front of the message of the call that failed. */
static tg_status failed(tg_status status, const char *what)
{
    char inner[768];
    snprintf(inner, sizeof inner, "%s", tg_last_error());
    return tg_set_error(status, "tg_gradcheck: %s: %s", what, inner);
}

/* f(inputs) on a fresh tape. */
static tg_tensor *call_fn(checked_function *f)
{
    tg_tape_reset(f->tape);
    tg_tensor *out = f->fn(f->tape, f->inputs, f->n_inputs, f->user_data);
    if (!out) failed(TG_ERR_INVALID, "fn returned NULL");
    return out;
}

/* f(inputs) on a fresh, non-recording tape. */
static tg_status evaluate(checked_function *f, double *value)
{
    tg_tensor *out = call_fn(f);
    if (!out) return tg_last_status();
    if (tg_numel(out) != 1)
        return tg_set_error(TG_ERR_INVALID, "tg_gradcheck: the function must return one element, not %lld",
                            (long long)tg_numel(out));
    *value = tg_item(out);
    return TG_OK;
}

static tg_status check_inputs(tg_gradcheck_fn fn, tg_tensor *const *inputs, int n_inputs, tg_gradcheck_result *result)
{
    if (!fn || !result || !inputs)
        return tg_set_error(TG_ERR_INVALID, "tg_gradcheck: %s is NULL", !fn ? "fn" : !result ? "result" : "inputs");
    if (n_inputs < 1) return tg_set_error(TG_ERR_INVALID, "tg_gradcheck: n_inputs must be ≥ 1 (got %d)", n_inputs);
    int n_checked = 0;
    for (int i = 0; i < n_inputs; i++) {
        char name[32];
        snprintf(name, sizeof name, "inputs[%d]", i);
        if (!tg_check_tensor("tg_gradcheck", name, inputs[i])) return tg_last_status();
        if (!inputs[i]->requires_grad) continue;
        n_checked++;
        if (inputs[i]->dtype != TG_F64 || inputs[i]->device != TG_DEVICE_CPU) {
            const char *names[1] = {name};
            const tg_tensor *tensors[1] = {inputs[i]};
            return tg_error_tensors(TG_ERR_DTYPE, 1, names, tensors,
                                    "tg_gradcheck: inputs that require gradients must be f64 on the cpu");
        }
    }
    if (!n_checked)
        return tg_set_error(TG_ERR_INVALID, "tg_gradcheck: none of the %d inputs requires a gradient", n_inputs);
    return TG_OK;
}

typedef struct {
    tg_check_state report;
    const tg_gradcheck_options *opt;
} check_state;

static tg_status check_elements(checked_function *f, check_state *c, int input, const double *analytic)
{
    const tg_gradcheck_options *opt = c->opt;
    tg_tensor *x = f->inputs[input];
    int64_t n = tg_numel(x);
    for (int64_t e = 0; e < n; e++) {
        double original = tg_get_flat(x, e), plus = 0, minus = 0;
        tg_set_flat(x, e, original + opt->eps);
        tg_status status = evaluate(f, &plus);
        tg_set_flat(x, e, original - opt->eps);
        if (status == TG_OK) status = evaluate(f, &minus);
        tg_set_flat(x, e, original);
        if (status != TG_OK) return status;
        tg_check_compare(&c->report, x, input, e, 0, original, analytic[e], (plus - minus) / (2 * opt->eps));
    }
    return TG_OK;
}

static void shift(tg_tensor *x, const double *original, const double *direction, double step)
{
    int64_t n = tg_numel(x);
    for (int64_t e = 0; e < n; e++) tg_set_flat(x, e, original[e] + step * direction[e]);
}

static tg_status check_directions(checked_function *f, check_state *c, int input, const double *analytic, tg_rng *rng)
{
    const tg_gradcheck_options *opt = c->opt;
    tg_tensor *x = f->inputs[input];
    int64_t n = tg_numel(x);
    double *original = malloc(sizeof(double) * (size_t)n), *direction = malloc(sizeof(double) * (size_t)n);
    tg_status status = TG_OK;
    if (!original || !direction) status = tg_set_error(TG_ERR_NOMEM, "tg_gradcheck: out of memory");
    for (int64_t e = 0; status == TG_OK && e < n; e++) original[e] = tg_get_flat(x, e);
    for (int d = 0; status == TG_OK && d < opt->n_directions; d++) {
        double directional = 0, plus = 0, minus = 0;
        for (int64_t e = 0; e < n; e++) {
            direction[e] = tg_rng_normal(rng);
            directional += analytic[e] * direction[e];
        }
        shift(x, original, direction, opt->eps);
        status = evaluate(f, &plus);
        shift(x, original, direction, -opt->eps);
        if (status == TG_OK) status = evaluate(f, &minus);
        shift(x, original, direction, 0.0);
        if (status == TG_OK)
            tg_check_compare(&c->report, x, input, -1, d, NAN, directional, (plus - minus) / (2 * opt->eps));
    }
    free(original);
    free(direction);
    return status;
}

/* Runs f once with gradients and copies each checked input's gradient out. */
static tg_status analytic_gradients(checked_function *f, double **grads)
{
    for (int i = 0; i < f->n_inputs; i++)
        if (f->inputs[i]->requires_grad) tg_zero_grad(f->inputs[i]);
    tg_tensor *loss = call_fn(f);
    if (!loss) return tg_last_status();
    tg_status status = tg_backward(f->tape, loss);
    if (status != TG_OK) return failed(status, "the backward of fn's result");
    for (int i = 0; i < f->n_inputs; i++) {
        tg_tensor *x = f->inputs[i];
        if (!x->requires_grad) continue;
        int64_t n = tg_numel(x);
        grads[i] = calloc((size_t)(n ? n : 1), sizeof(double));
        if (!grads[i]) return tg_set_error(TG_ERR_NOMEM, "tg_gradcheck: out of memory");
        for (int64_t e = 0; x->grad && e < n; e++) grads[i][e] = tg_get_flat(x->grad, e);
    }
    return TG_OK;
}

tg_status tg_gradcheck(tg_gradcheck_fn fn, tg_tensor *const *inputs, int n_inputs, void *user_data,
                       const tg_gradcheck_options *options, tg_gradcheck_result *result)
{
    tg_status status = check_inputs(fn, inputs, n_inputs, result);
    if (status != TG_OK) return status;
    tg_gradcheck_options opt = options ? *options : tg_gradcheck_defaults();
    const char *wrong = !(opt.eps > 0) || !isfinite(opt.eps)      ? "eps must be finite and > 0"
                        : !(opt.atol >= 0) || !isfinite(opt.atol) ? "atol must be finite and ≥ 0"
                        : !(opt.rtol >= 0) || !isfinite(opt.rtol) ? "rtol must be finite and ≥ 0"
                        : opt.n_directions < 1                    ? "n_directions must be ≥ 1"
                        : opt.max_elements_per_input < 0          ? "max_elements_per_input must be ≥ 0"
                                                                  : NULL;
    if (wrong) return tg_set_error(TG_ERR_INVALID, "tg_gradcheck: options: %s", wrong);
    memset(result, 0, sizeof *result);
    result->worst_input = -1;

    checked_function f = {fn, inputs, n_inputs, user_data, tg_tape_create()};
    double **grads = calloc((size_t)n_inputs, sizeof *grads);
    tg_check_failures *per_input = calloc((size_t)n_inputs, sizeof *per_input);
    if (!f.tape || !grads || !per_input) {
        tg_tape_free(f.tape);
        free(grads), free(per_input);
        return tg_set_error(TG_ERR_NOMEM, "tg_gradcheck: out of memory");
    }
    /* Every buffer the checked backward gets starts as NaN: an element it forgets to write
     * fails loudly instead of holding a plausible stale value. */
    tg_tape_set_poison(f.tape, true);
    status = analytic_gradients(&f, grads);
    tg_tape_set_grad_enabled(f.tape, false);
    tg_rng rng;
    tg_rng_seed(&rng, opt.seed);
    check_state c = {{result, opt.atol, opt.rtol, per_input}, &opt};
    for (int i = 0; status == TG_OK && i < n_inputs; i++) {
        if (!inputs[i]->requires_grad) continue;
        if (tg_numel(inputs[i]) <= opt.max_elements_per_input)
            status = check_elements(&f, &c, i, grads[i]);
        else
            status = check_directions(&f, &c, i, grads[i], &rng);
    }
    const tg_check_words words = {"gradcheck", "analytic", "numeric", -1};
    if (status == TG_OK) tg_check_summarise(result, per_input, (const tg_tensor *const *)inputs, n_inputs, &words);
    for (int i = 0; i < n_inputs; i++) free(grads[i]);
    free(grads), free(per_input);
    tg_tape_free(f.tape);
    return status;
}
