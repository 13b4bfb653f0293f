/* examples/custom_op.c: a new op defined in user code, with nothing but <tapegrad.h>.
 *
 * The op is GELU in its tanh form:
 *   gelu(x) = ½·x·(1 + tanh(u)),   u = √(2/π)·(x + 0.044715·x³)
 * It takes f32 or f64 CPU tensors of any shape and layout. The program then uses it in
 * a small loss and runs backward, checks its gradient against finite differences in
 * float64, checks its values, and shows how bad input is reported. It exits non-zero
 * when any check fails, so it also serves as a test.
 *
 * docs/writing-an-op.md walks through this file.
 *
 * Usage: custom_op [seed]
 */
#include <tapegrad.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- the maths ------------------------------------------------------------------ */

#define SQRT_2_OVER_PI 0.79788456080286535588
#define GELU_CUBIC 0.044715

static double gelu_value(double x)
{
    double u = SQRT_2_OVER_PI * (x + GELU_CUBIC * x * x * x);
    return 0.5 * x * (1.0 + tanh(u));
}

/* gelu'(x) = ½·(1 + t) + ½·x·(1 − t²)·u',  t = tanh(u),  u' = √(2/π)·(1 + 3·0.044715·x²) */
static double gelu_derivative(double x)
{
    double u = SQRT_2_OVER_PI * (x + GELU_CUBIC * x * x * x);
    double t = tanh(u);
    double du = SQRT_2_OVER_PI * (1.0 + 3.0 * GELU_CUBIC * x * x);
    return 0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * du;
}

/* ---- the kernels: loops over contiguous f32 or f64 data, computing in double ------- */

static double get(const tg_tensor *t, const void *data, int64_t i)
{
    return t->dtype == TG_F32 ? ((const float *)data)[i] : ((const double *)data)[i];
}

static void put(const tg_tensor *t, void *data, int64_t i, double value)
{
    if (t->dtype == TG_F32)
        ((float *)data)[i] = (float)value;
    else
        ((double *)data)[i] = value;
}

/* y = gelu(x) */
static void gelu_forward_kernel(const tg_tensor *x, tg_tensor *y)
{
    const void *xd = tg_data(x);
    void *yd = tg_data(y);
    for (int64_t i = 0; i < tg_numel(x); i++) put(y, yd, i, gelu_value(get(x, xd, i)));
}

/* dx = dy · gelu'(x) */
static void gelu_backward_kernel(const tg_tensor *x, const tg_tensor *dy, tg_tensor *dx)
{
    const void *xd = tg_data(x), *dyd = tg_data(dy);
    void *dxd = tg_data(dx);
    for (int64_t i = 0; i < tg_numel(x); i++) put(dx, dxd, i, get(dy, dyd, i) * gelu_derivative(get(x, xd, i)));
}

/* ---- the op ------------------------------------------------------------------------ */

/* The argument checks: each failure sets the message tg_last_error() returns, naming
 * the op and describing the tensor ("[2, 3] i32 cpu"). */
static bool gelu_check(const tg_tape *tape, const tg_tensor *x)
{
    char what[128];
    if (!tape || !x) {
        tg_set_error(TG_ERR_INVALID, "gelu: %s is NULL", tape ? "x" : "tape");
        return false;
    }
    if (x->dtype != TG_F32 && x->dtype != TG_F64) {
        tg_set_error(TG_ERR_DTYPE, "gelu: x must be f32 or f64, not %s (x: %s)", tg_dtype_name(x->dtype),
                     tg_describe(x, what, sizeof what));
        return false;
    }
    if (x->device != TG_DEVICE_CPU) {
        tg_set_error(TG_ERR_DEVICE, "gelu: x is on %s, but gelu has only a cpu kernel (x: %s)",
                     tg_device_name(x->device), tg_describe(x, what, sizeof what));
        return false;
    }
    return true;
}

/* Gives back everything allocated since the mark, so that a failed call leaves the tape
 * as it was, and returns NULL. */
static tg_tensor *gelu_fail(tg_tape *tape, tg_tape_mark mark)
{
    tg_tape_rewind(tape, mark);
    return NULL;
}

/* Backward of y = gelu(x):  dx = dy · gelu'(x)  (gelu' above). gelu' is recomputed from
 * x, which the node keeps as its input, so the forward saves nothing else. */
static tg_status gelu_backward(tg_node *node, tg_tensor *const *dy, tg_tensor **dx)
{
    if (!tg_node_needs_grad(node, 0)) return TG_OK;
    tg_tensor *x = node->inputs[0]; /* contiguous: the forward recorded its contiguous copy */
    /* Recording is off during backward, so calling an op here adds no node. dy has x's
     * dtype; tg_contiguous returns it as is when it is already contiguous. */
    tg_tensor *g = tg_contiguous(node->tape, dy[0]);
    if (!g) return TG_ERR_NOMEM;
    dx[0] = tg_empty_like(node->tape, x);
    if (!dx[0]) return TG_ERR_NOMEM;
    gelu_backward_kernel(x, g, dx[0]);
    return TG_OK;
}

static tg_tensor *gelu(tg_tape *tape, tg_tensor *x)
{
    /* 1. Check everything before allocating anything. */
    if (!gelu_check(tape, x)) return NULL;

    /* 2. Mark the tape; every failure from here on rewinds to the mark. */
    tg_tape_mark mark = tg_tape_get_mark(tape);

    /* 3. A contiguous input (for a strided view, a copy that is itself recorded, so the
     *    gradient flows back into the view), the output, and the kernel. */
    tg_tensor *xc = tg_contiguous(tape, x);
    tg_tensor *y = xc ? tg_empty_like(tape, xc) : NULL;
    if (!y) return gelu_fail(tape, mark);
    gelu_forward_kernel(xc, y);

    /* 4. Record the node (nothing happens when no input requires a gradient or
     *    recording is off). */
    tg_op_record record = {
        .op = "gelu",
        .backward = gelu_backward,
        .inputs = &xc,
        .n_inputs = 1,
        .outputs = &y,
        .n_outputs = 1,
    };
    if (tg_record(tape, &record) != TG_OK) return gelu_fail(tape, mark);
    return y;
}

/* ---- using it ------------------------------------------------------------------------ */

static tg_rng rng;

/* A tape tensor of normal(0, stddev) values; a leaf that requires a gradient if asked. */
static tg_tensor *random_tensor(tg_tape *tape, tg_dtype dtype, int ndim, const int64_t *shape, double stddev,
                                bool requires_grad)
{
    tg_tensor *t = tg_empty(tape, dtype, TG_DEVICE_CPU, ndim, shape);
    if (!t || tg_fill_normal(t, &rng, 0.0, stddev) != TG_OK) return NULL;
    if (requires_grad && tg_set_requires_grad(t, true) != TG_OK) return NULL;
    return t;
}

static bool report(bool ok, const char *what)
{
    printf("  %-54s %s\n", what, ok ? "ok" : "FAILED");
    if (!ok && tg_last_error()[0]) printf("    last error: %s\n", tg_last_error());
    return ok;
}

/* 1. Like any op: loss = mean(gelu(x) · w) with w broadcast over the rows, then
 *    backward. The gradient must be dx[i,j] = gelu'(x[i,j]) · w[j] / n. */
static bool use_in_a_loss(void)
{
    tg_tape *tape = tg_tape_create();
    int64_t shape[2] = {4, 5};
    tg_tensor *x = random_tensor(tape, TG_F32, 2, shape, 2.0, true);
    tg_tensor *w = random_tensor(tape, TG_F32, 1, &shape[1], 1.0, false);
    tg_tensor *loss = tg_mean_all(tape, tg_mul(tape, gelu(tape, x), w));
    bool ok = loss && tg_backward(tape, loss) == TG_OK;
    printf("  loss = mean(gelu(x) * w) = %.6f, %zu nodes on the tape\n", ok ? tg_item(loss) : NAN,
           tg_tape_node_count(tape));

    double worst = ok ? 0.0 : INFINITY;
    for (int64_t i = 0; ok && i < shape[0]; i++)
        for (int64_t j = 0; j < shape[1]; j++) {
            double want = gelu_derivative(tg_get(x, (int64_t[]){i, j})) * tg_get_flat(w, j) / 20.0;
            worst = fmax(worst, fabs(tg_get(x->grad, (int64_t[]){i, j}) - want));
        }
    printf("  largest |x.grad - gelu'(x) * w / n| = %.3g\n", worst);
    ok = report(ok && worst < 1e-6, "backward through gelu (f32)");
    tg_tape_free(tape);
    return ok;
}

/* The function tg_gradcheck differentiates: Σ gelu(x) · w, with a random weight w so
 * that every element of the gradient is different. */
static tg_tensor *gelu_loss(tg_tape *tape, tg_tensor *const *inputs, int n_inputs, void *user_data)
{
    (void)n_inputs;
    (void)user_data;
    return tg_sum_all(tape, tg_mul(tape, gelu(tape, inputs[0]), inputs[1]));
}

/* 2. The gradient against float64 central differences: element by element for a small
 *    input, along random directions for a large one. */
static bool check_gradient(int64_t rows, int64_t cols)
{
    tg_tape *tape = tg_tape_create();
    int64_t shape[2] = {rows, cols};
    tg_tensor *inputs[2] = {random_tensor(tape, TG_F64, 2, shape, 2.0, true),
                            random_tensor(tape, TG_F64, 2, shape, 1.0, false)};
    tg_gradcheck_result result;
    tg_status status = inputs[0] && inputs[1] ? tg_gradcheck(gelu_loss, inputs, 2, NULL, NULL, &result) : TG_ERR_NOMEM;
    bool ok = status == TG_OK && result.passed;
    printf("  x: [%lld, %lld] f64: %s\n", (long long)rows, (long long)cols,
           status == TG_OK ? result.message : tg_last_error());
    tg_tape_free(tape);
    return report(ok, "tg_gradcheck");
}

/* 3. The values: the tanh form stays within 1e-3 of the exact GELU, x·Φ(x), and the
 *    f32 result matches the f64 one (‖y32 − y64‖ / ‖y64‖). */
static bool check_values(void)
{
    tg_tape *tape = tg_tape_create();
    int64_t n = 97;
    tg_tensor *x = tg_empty(tape, TG_F64, TG_DEVICE_CPU, 1, &n);
    for (int64_t i = 0; x && i < n; i++) tg_set_flat(x, i, -6.0 + 0.125 * (double)i); /* exact in f32 too */
    tg_tensor *y64 = gelu(tape, x);
    tg_tensor *y32 = gelu(tape, tg_to_dtype(tape, x, TG_F32));
    bool ok = y64 && y32;
    double worst_exact = 0, diff = 0, norm = 0;
    for (int64_t i = 0; ok && i < n; i++) {
        double v = tg_get_flat(x, i), exact = 0.5 * v * (1.0 + erf(v / sqrt(2.0)));
        double a = tg_get_flat(y64, i), b = tg_get_flat(y32, i);
        worst_exact = fmax(worst_exact, fabs(a - exact));
        diff += (b - a) * (b - a);
        norm += a * a;
    }
    double f32_error = ok ? sqrt(diff / norm) : INFINITY;
    printf("  on [-6, 6]: largest |gelu - x*Phi(x)| = %.3g, f32 relative error = %.3g\n", worst_exact, f32_error);
    tg_tape_free(tape);
    return report(ok && worst_exact < 1e-3 && f32_error < 1e-6, "values");
}

/* 4. Bad input: NULL, a non-float tensor, no tape. Each call returns NULL, says why in
 *    tg_last_error(), and leaves the tape exactly as it was. */
static bool check_bad_input(void)
{
    tg_tape *tape = tg_tape_create();
    tg_tensor *ids = tg_zeros(tape, TG_I32, TG_DEVICE_CPU, 2, (int64_t[]){2, 3});
    tg_tensor *x = random_tensor(tape, TG_F32, 2, (int64_t[]){2, 3}, 1.0, true);
    size_t nodes = tg_tape_node_count(tape), bytes = tg_tape_bytes_in_use(tape);
    struct {
        const char *call;
        tg_tape *tape;
        tg_tensor *x;
    } cases[] = {{"gelu(tape, NULL)", tape, NULL}, {"gelu(tape, ids)", tape, ids}, {"gelu(NULL, x)", NULL, x}};
    bool ok = ids && x;
    for (size_t k = 0; ok && k < sizeof cases / sizeof cases[0]; k++) {
        tg_clear_error();
        tg_tensor *y = gelu(cases[k].tape, cases[k].x);
        printf("  %-17s -> %s\n", cases[k].call, y ? "(a tensor)" : tg_last_error());
        ok = !y && strstr(tg_last_error(), "gelu:") != NULL;
    }
    ok = ok && tg_tape_node_count(tape) == nodes && tg_tape_bytes_in_use(tape) == bytes;
    tg_tape_free(tape);
    return report(ok, "bad input fails cleanly, tape unchanged");
}

int main(int argc, char **argv)
{
    uint64_t seed = argc > 1 ? strtoull(argv[1], NULL, 10) : 42;
    tg_rng_seed(&rng, seed);
    printf("custom_op: a tanh-form GELU written with the public API (seed %llu)\n", (unsigned long long)seed);
    bool ok = true;
    printf("1. in a loss, with backward\n");
    ok = use_in_a_loss() && ok;
    printf("2. gradient check\n");
    ok = check_gradient(3, 7) && ok;   /* 21 elements: each one checked */
    ok = check_gradient(24, 32) && ok; /* 768 elements: random directions */
    printf("3. values\n");
    ok = check_values() && ok;
    printf("4. errors\n");
    ok = check_bad_input() && ok;
    printf("custom_op: %s\n", ok ? "all checks passed" : "SOME CHECKS FAILED");
    return ok ? EXIT_SUCCESS : EXIT_FAILURE;
}
