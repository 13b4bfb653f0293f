// kernels/cuda/elementwise.cu: the elementwise maths of kernels/cpu/elementwise.c on
// the device. Two paths per kernel: operands that are all dense in one storage type
// (f32, bf16, f16) run a typed loop with float maths; everything else (strides,
// broadcasting, f64, mixed dtypes) runs a generic loop in double over merged dimensions.
#include "kernels/elementwise.h"
#include "kernels/cuda/strided.cuh"
#include "kernels/unary_math.h"

// ---- scalar maths, for float and double (the unary ops: kernels/unary_math.h) ---------------

template <typename C> __device__ inline C binary_value(tg_binary_op op, C a, C b)
{
    switch (op) {
    case TG_BINARY_ADD: return a + b;
    case TG_BINARY_SUB: return a - b;
    case TG_BINARY_MUL: return a * b;
    case TG_BINARY_DIV: return a / b;
    }
    return C(NAN);
}

// ---- kernels -------------------------------------------------------------------------------
// Operand order in the tg_strided plans: unary forward (x, y), unary backward
// (x, y, dy, dx), binary (a, b, out). Dense kernels take plain pointers to element 0.

template <typename T> __global__ void unary_fwd_dense(tg_unary_op op, float param, const T *x, T *y, int64_t n)
{
    for (int64_t i = tg_global_index(); i < n; i += tg_global_stride())
        y[i] = tg_from_float<T>(tg_unary_value(op, param, tg_to_float(x[i])));
}

__global__ void unary_fwd_strided(tg_unary_op op, double param, tg_strided<2> plan, int64_t n)
{
    for (int64_t i = tg_global_index(); i < n; i += tg_global_stride()) {
        int64_t at[2];
        tg_strided_offsets(plan, i, at);
        double x = tg_load_raw(plan.data[0], plan.dtype[0], at[0]);
        tg_store_raw(plan.data[1], plan.dtype[1], at[1], tg_unary_value(op, param, x));
    }
}

template <typename T>
__global__ void unary_bwd_dense(tg_unary_op op, float param, const T *x, const T *y, const T *dy, T *dx, int64_t n)
{
    for (int64_t i = tg_global_index(); i < n; i += tg_global_stride()) {
        float d = tg_unary_derivative(op, param, tg_to_float(x[i]), tg_to_float(y[i]));
        dx[i] = tg_from_float<T>(tg_to_float(dy[i]) * d);
    }
}

__global__ void unary_bwd_strided(tg_unary_op op, double param, tg_strided<4> plan, int64_t n)
{
    for (int64_t i = tg_global_index(); i < n; i += tg_global_stride()) {
        int64_t at[4];
        tg_strided_offsets(plan, i, at);
        double x = tg_load_raw(plan.data[0], plan.dtype[0], at[0]);
        double y = tg_load_raw(plan.data[1], plan.dtype[1], at[1]);
        double g = tg_load_raw(plan.data[2], plan.dtype[2], at[2]);
        tg_store_raw(plan.data[3], plan.dtype[3], at[3], g * tg_unary_derivative(op, param, x, y));
    }
}

template <typename T> __global__ void binary_dense(tg_binary_op op, const T *a, const T *b, T *out, int64_t n)
{
    for (int64_t i = tg_global_index(); i < n; i += tg_global_stride())
        out[i] = tg_from_float<T>(binary_value(op, tg_to_float(a[i]), tg_to_float(b[i])));
}

__global__ void binary_strided(tg_binary_op op, tg_strided<3> plan, int64_t n)
{
    for (int64_t i = tg_global_index(); i < n; i += tg_global_stride()) {
        int64_t at[3];
        tg_strided_offsets(plan, i, at);
        double a = tg_load_raw(plan.data[0], plan.dtype[0], at[0]);
        double b = tg_load_raw(plan.data[1], plan.dtype[1], at[1]);
        tg_store_raw(plan.data[2], plan.dtype[2], at[2], binary_value(op, a, b));
    }
}

// ---- host side ------------------------------------------------------------------------------

// nvcc checks no switch in device code for a missing case. The unary switches live in
// kernels/unary_math.h, which the C build compiles too (-Wswitch); for both families a new
// kind changes the count, and these fail until it has its cases and its name.
static_assert(TG_UNARY_COUNT == 9, "a new tg_unary_op needs its cases in kernels/unary_math.h");
static_assert(TG_BINARY_COUNT == 4, "a new tg_binary_op needs its case in binary_value");

static const char *unary_name(tg_unary_op op)
{
    static const char *const names[TG_UNARY_COUNT] = {"tg_scale",   "tg_neg",  "tg_exp",      "tg_log", "tg_tanh",
                                                      "tg_sigmoid", "tg_silu", "tg_softplus", "tg_relu"};
    return (unsigned)op < sizeof names / sizeof names[0] ? names[op] : "unary op";
}

static const char *binary_name(tg_binary_op op)
{
    static const char *const names[TG_BINARY_COUNT] = {"tg_add", "tg_sub", "tg_mul", "tg_div"};
    return (unsigned)op < sizeof names / sizeof names[0] ? names[op] : "binary op";
}

// The typed path applies when the plan is dense and every operand has one storage
// dtype that the float kernels take; f64 and mixed dtypes go the generic way.
template <int N> static bool dense_in_one_dtype(const tg_strided<N> &plan, tg_dtype dtype)
{
    if (!tg_strided_is_dense(plan)) return false;
    for (int op = 0; op < N; op++)
        if (plan.dtype[op] != (int)dtype) return false;
    return dtype == TG_F32 || dtype == TG_BF16 || dtype == TG_F16;
}

template <typename T> static void launch_unary_fwd(tg_unary_op op, double param, const tg_strided<2> &p, int64_t n)
{
    unary_fwd_dense<T><<<tg_blocks_for(n), TG_THREADS>>>(op, (float)param, (const T *)p.data[0], (T *)p.data[1], n);
}

extern "C" tg_status tg_cuda_unary_fwd(tg_unary_op op, double param, const tg_tensor *x, tg_tensor *y)
{
    int64_t n = tg_numel(x);
    if (n == 0) return TG_OK;
    const int64_t *strides[2] = {x->strides, y->strides};
    tg_strided<2> plan = tg_strided_plan<2>(x->ndim, x->shape, strides);
    tg_strided_bind(plan, 0, x);
    tg_strided_bind(plan, 1, y);
    if (!dense_in_one_dtype(plan, x->dtype))
        unary_fwd_strided<<<tg_blocks_for(n), TG_THREADS>>>(op, param, plan, n);
    else if (x->dtype == TG_F32)
        launch_unary_fwd<float>(op, param, plan, n);
    else if (x->dtype == TG_BF16)
        launch_unary_fwd<__nv_bfloat16>(op, param, plan, n);
    else
        launch_unary_fwd<__half>(op, param, plan, n);
    return tg_cuda_check_launch(unary_name(op));
}

template <typename T> static void launch_unary_bwd(tg_unary_op op, double param, const tg_strided<4> &p, int64_t n)
{
    unary_bwd_dense<T><<<tg_blocks_for(n), TG_THREADS>>>(op, (float)param, (const T *)p.data[0], (const T *)p.data[1],
                                                         (const T *)p.data[2], (T *)p.data[3], n);
}

extern "C" tg_status tg_cuda_unary_bwd(tg_unary_op op, double param, const tg_tensor *x, const tg_tensor *y,
                                       const tg_tensor *dy, tg_tensor *dx)
{
    int64_t n = tg_numel(x);
    if (n == 0) return TG_OK;
    const int64_t *strides[4] = {x->strides, y->strides, dy->strides, dx->strides};
    tg_strided<4> plan = tg_strided_plan<4>(x->ndim, x->shape, strides);
    tg_strided_bind(plan, 0, x);
    tg_strided_bind(plan, 1, y);
    tg_strided_bind(plan, 2, dy);
    tg_strided_bind(plan, 3, dx);
    if (!dense_in_one_dtype(plan, x->dtype))
        unary_bwd_strided<<<tg_blocks_for(n), TG_THREADS>>>(op, param, plan, n);
    else if (x->dtype == TG_F32)
        launch_unary_bwd<float>(op, param, plan, n);
    else if (x->dtype == TG_BF16)
        launch_unary_bwd<__nv_bfloat16>(op, param, plan, n);
    else
        launch_unary_bwd<__half>(op, param, plan, n);
    return tg_cuda_check_launch(unary_name(op));
}

template <typename T> static void launch_binary(tg_binary_op op, const tg_strided<3> &p, int64_t n)
{
    binary_dense<T>
        <<<tg_blocks_for(n), TG_THREADS>>>(op, (const T *)p.data[0], (const T *)p.data[1], (T *)p.data[2], n);
}

extern "C" tg_status tg_cuda_binary_fwd(tg_binary_op op, const tg_tensor *a, const tg_tensor *b, tg_tensor *out)
{
    int64_t n = tg_numel(out);
    if (n == 0) return TG_OK;
    int64_t sa[TG_MAX_DIMS], sb[TG_MAX_DIMS]; // 0 along the dimensions each operand is stretched over
    tg_broadcast_strides(a, out->ndim, out->shape, sa);
    tg_broadcast_strides(b, out->ndim, out->shape, sb);
    const int64_t *strides[3] = {sa, sb, out->strides};
    tg_strided<3> plan = tg_strided_plan<3>(out->ndim, out->shape, strides);
    tg_strided_bind(plan, 0, a);
    tg_strided_bind(plan, 1, b);
    tg_strided_bind(plan, 2, out);
    if (!dense_in_one_dtype(plan, out->dtype))
        binary_strided<<<tg_blocks_for(n), TG_THREADS>>>(op, plan, n);
    else if (out->dtype == TG_F32)
        launch_binary<float>(op, plan, n);
    else if (out->dtype == TG_BF16)
        launch_binary<__nv_bfloat16>(op, plan, n);
    else
        launch_binary<__half>(op, plan, n);
    return tg_cuda_check_launch(binary_name(op));
}
