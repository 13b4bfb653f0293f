/* examples/custom_op_norm.c: a second op in user code, whose backward mixes elements.
 *
 * The op normalises each row of x to unit root-mean-square and scales it by a gain g (one
 * number, which may be negative):
 *   s_r = 1 / √(mean_j x[r,j]² + eps),   y[r,j] = g · x[r,j] · s_r
 * Unlike GELU (examples/custom_op.c), every output of a row depends on every input of the
 * row, so the backward is not dy times a slope: it needs the row's dot product of dy and the
 * normalised row. The forward saves s per row for it (a tensor in the node's context), and
 * the backward computes only the gradients that are asked for (x's, g's, or both). The
 * program checks the gradient against finite differences for gains of both signs and a
 * strided input, the values against a float64 reference, and bad input. It exits non-zero
 * when any check fails.
 *
 * docs/writing-an-op.md, part 3, walks through this file.
 *
 * Usage: custom_op_norm [seed]
 */
#include <tapegrad.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define EPS 1e-6

/* ---- the kernels: contiguous f64 rows --------------------------------------------------- */

/* y = g · x · s per row, and s itself (rows values). */
static void norm_forward_kernel(const double *x, double g, int64_t rows, int64_t cols, double *y, double *s)
{
    for (int64_t r = 0; r < rows; r++) {
        const double *xr = x + r * cols;
        double sum = 0;
        for (int64_t j = 0; j < cols; j++) sum += xr[j] * xr[j];
        s[r] = 1.0 / sqrt(sum / (double)cols + EPS);
        for (int64_t j = 0; j < cols; j++) y[r * cols + j] = g * xr[j] * s[r];
    }
}

/* dx[r,j] = g·s_r·(dy[r,j] − n[r,j]·c_r),  c_r = mean_j(dy[r,j]·n[r,j]),  n = x·s (when dx is not
 * NULL); dg = Σ dy·n (when dg is not NULL). */
static void norm_backward_kernel(const double *x, const double *s, double g, const double *dy, int64_t rows,
                                 int64_t cols, double *dx, double *dg)
{
    double dg_sum = 0;
    for (int64_t r = 0; r < rows; r++) {
        const double *xr = x + r * cols, *dyr = dy + r * cols;
        double dot = 0;
        for (int64_t j = 0; j < cols; j++) dot += dyr[j] * xr[j] * s[r];
        dg_sum += dot;
        for (int64_t j = 0; dx && j < cols; j++)
            dx[r * cols + j] = g * s[r] * (dyr[j] - xr[j] * s[r] * dot / (double)cols);
    }
    if (dg) *dg = dg_sum;
}

/* ---- the op ------------------------------------------------------------------------------ */

/* What the backward needs besides the inputs: s per row, a tensor on the tape. */
typedef struct {
    tg_tensor *s;
} norm_ctx;

static bool norm_check(const tg_tape *tape, const tg_tensor *x, const tg_tensor *g)
{
    char what[128];
    if (!tape || !x || !g) {
        tg_set_error(TG_ERR_INVALID, "scaled_norm: %s is NULL", !tape ? "tape" : !x ? "x" : "g");
        return false;
    }
    if (x->dtype != TG_F64 || g->dtype != TG_F64 || x->device != TG_DEVICE_CPU || g->device != TG_DEVICE_CPU) {
        tg_set_error(TG_ERR_DTYPE, "scaled_norm: x and g must be f64 cpu tensors (x: %s)",
                     tg_describe(x, what, sizeof what));
        return false;
    }
    if (x->ndim != 2 || tg_numel(g) != 1) {
        tg_set_error(TG_ERR_INVALID, "scaled_norm: x must be (rows, cols) and g one number (x: %s)",
                     tg_describe(x, what, sizeof what));
        return false;
    }
    return true;
}

/* The backward: each gradient only when the node says its input needs one. x is the
 * contiguous copy the forward recorded; dy may be strided, so it is made contiguous. */
static tg_status norm_backward(tg_node *node, tg_tensor *const *dy, tg_tensor **dx)
{
    const norm_ctx *ctx = node->ctx;
    tg_tensor *x = node->inputs[0], *g = node->inputs[1];
    bool want_x = tg_node_needs_grad(node, 0), want_g = tg_node_needs_grad(node, 1);
    tg_tensor *d = tg_contiguous(node->tape, dy[0]);
    if (!d) return TG_ERR_NOMEM;
    if (want_x && !(dx[0] = tg_empty_like(node->tape, x))) return TG_ERR_NOMEM;
    if (want_g && !(dx[1] = tg_empty_like(node->tape, g))) return TG_ERR_NOMEM;
    norm_backward_kernel(tg_data(x), tg_data(ctx->s), tg_item(g), tg_data(d), x->shape[0], x->shape[1],
                         want_x ? tg_data(dx[0]) : NULL, want_g ? tg_data(dx[1]) : NULL);
    return TG_OK;
}

static tg_tensor *scaled_norm(tg_tape *tape, tg_tensor *x, tg_tensor *g)
{
    if (!norm_check(tape, x, g)) return NULL;
    tg_tape_mark mark = tg_tape_get_mark(tape);
    tg_tensor *xc = tg_contiguous(tape, x); /* a strided view gets a recorded copy */
    tg_tensor *y = xc ? tg_empty_like(tape, xc) : NULL;
    tg_tensor *s = y ? tg_empty(tape, TG_F64, TG_DEVICE_CPU, 1, &xc->shape[0]) : NULL;
    if (!s) {
        tg_tape_rewind(tape, mark);
        return NULL;
    }
    norm_forward_kernel(tg_data(xc), tg_item(g), xc->shape[0], xc->shape[1], tg_data(y), tg_data(s));
    /* The context is copied onto the tape; it may hold tensor pointers (s lives until the
     * tape is reset, as long as the node does). */
    norm_ctx ctx = {s};
    tg_tensor *inputs[2] = {xc, g};
    tg_op_record record = {"scaled_norm", norm_backward, inputs, 2, &y, 1, &ctx, sizeof ctx};
    if (tg_record(tape, &record) != TG_OK) {
        tg_tape_rewind(tape, mark);
        return NULL;
    }
    return y;
}

/* ---- using it ---------------------------------------------------------------------------- */

static tg_rng rng;

static bool report(bool ok, const char *what)
{
    printf("  %-58s %s\n", what, ok ? "ok" : "FAILED");
    if (!ok && tg_last_error()[0]) printf("    last error: %s\n", tg_last_error());
    return ok;
}

/* Σ scaled_norm(x, g) · w, with a random w so that every dy differs. */
static tg_tensor *norm_loss(tg_tape *tape, tg_tensor *const *inputs, int n_inputs, void *user_data)
{
    (void)n_inputs, (void)user_data;
    return tg_sum_all(tape, tg_mul(tape, scaled_norm(tape, inputs[0], inputs[1]), inputs[2]));
}

/* tg_gradcheck for both inputs with gain g; x strided (a transposed view) when asked. */
static bool check_gradient(double gain, bool strided, bool gain_needs_grad)
{
    tg_tape *tape = tg_tape_create();
    int64_t shape[2] = {4, 6}, flipped[2] = {6, 4};
    tg_tensor *base = tg_empty(tape, TG_F64, TG_DEVICE_CPU, 2, strided ? flipped : shape);
    tg_tensor *w = tg_empty(tape, TG_F64, TG_DEVICE_CPU, 2, shape);
    tg_tensor *g = tg_full(tape, TG_F64, TG_DEVICE_CPU, 1, (int64_t[]){1}, gain);
    tg_fill_normal(base, &rng, 0.0, 1.5);
    tg_fill_normal(w, &rng, 0.0, 1.0);
    /* A strided leaf: the transposed view, cut off from base so that it is an input of its own. */
    tg_tensor *x = strided ? tg_detach(tape, tg_transpose(tape, base, 0, 1)) : base;
    tg_set_requires_grad(x, true);
    if (gain_needs_grad) tg_set_requires_grad(g, true);
    tg_tensor *inputs[3] = {x, g, w};
    tg_gradcheck_result result;
    tg_status status = tg_gradcheck(norm_loss, inputs, 3, NULL, NULL, &result);
    char what[96];
    snprintf(what, sizeof what, "tg_gradcheck, g = %+.2f%s%s", gain, strided ? ", x strided" : "",
             gain_needs_grad ? "" : ", g constant");
    printf("  %s\n", status == TG_OK ? result.message : tg_last_error());
    tg_tape_free(tape);
    return report(status == TG_OK && result.passed, what);
}

/* The values against a float64 reference written out separately: y = g·x/‖x‖_rms per row. */
static bool check_values(void)
{
    tg_tape *tape = tg_tape_create();
    int64_t shape[2] = {3, 5};
    tg_tensor *x = tg_empty(tape, TG_F64, TG_DEVICE_CPU, 2, shape);
    tg_tensor *g = tg_full(tape, TG_F64, TG_DEVICE_CPU, 1, (int64_t[]){1}, -0.75);
    tg_fill_normal(x, &rng, 0.0, 3.0);
    tg_tensor *y = scaled_norm(tape, x, g);
    double worst = y ? 0.0 : INFINITY;
    for (int64_t r = 0; y && r < 3; r++) {
        double squares = 0;
        for (int64_t j = 0; j < 5; j++) squares += pow(tg_get(x, (int64_t[]){r, j}), 2);
        double rms = sqrt(squares / 5 + EPS);
        for (int64_t j = 0; j < 5; j++)
            worst = fmax(worst, fabs(tg_get(y, (int64_t[]){r, j}) + 0.75 * tg_get(x, (int64_t[]){r, j}) / rms));
    }
    printf("  largest |y - g*x/rms(x)| = %.3g\n", worst);
    tg_tape_free(tape);
    return report(worst < 1e-12, "values against the reference");
}

static bool check_bad_input(void)
{
    tg_tape *tape = tg_tape_create();
    tg_tensor *x = tg_zeros(tape, TG_F64, TG_DEVICE_CPU, 2, (int64_t[]){2, 3});
    tg_tensor *vector = tg_zeros(tape, TG_F64, TG_DEVICE_CPU, 1, (int64_t[]){3});
    tg_tensor *g = tg_full(tape, TG_F64, TG_DEVICE_CPU, 1, (int64_t[]){1}, 1.0);
    size_t nodes = tg_tape_node_count(tape), bytes = tg_tape_bytes_in_use(tape);
    bool ok = !scaled_norm(tape, x, NULL) && strstr(tg_last_error(), "scaled_norm: g is NULL");
    printf("  scaled_norm(tape, x, NULL) -> %s\n", tg_last_error());
    ok = ok && !scaled_norm(tape, vector, g) && strstr(tg_last_error(), "(rows, cols)");
    printf("  scaled_norm(tape, vector, g) -> %s\n", tg_last_error());
    ok = ok && tg_tape_node_count(tape) == nodes && tg_tape_bytes_in_use(tape) == bytes;
    tg_tape_free(tape);
    return report(ok, "bad input fails cleanly, tape unchanged");
}

int main(int argc, char **argv)
{
    uint64_t seed = argc > 1 ? strtoull(argv[1], NULL, 10) : 42;
    tg_rng_seed(&rng, seed);
    printf("custom_op_norm: a row norm with a gain, whose backward mixes elements (seed %llu)\n",
           (unsigned long long)seed);
    bool ok = true;
    printf("1. gradient check\n");
    ok = check_gradient(1.3, false, true) && ok;
    ok = check_gradient(-0.8, false, true) && ok; /* a negative gain flips every gradient's sign */
    ok = check_gradient(0.9, true, true) && ok;   /* a transposed view as x */
    ok = check_gradient(1.1, false, false) && ok; /* only x needs a gradient: dg is never made */
    printf("2. values\n");
    ok = check_values() && ok;
    printf("3. errors\n");
    ok = check_bad_input() && ok;
    printf("custom_op_norm: %s\n", ok ? "all checks passed" : "SOME CHECKS FAILED");
    return ok ? EXIT_SUCCESS : EXIT_FAILURE;
}
