// kernels/cuda/conv1d/tensor_cores.cuh: bf16 on tensor cores for the row kernels: the tile
// products and their operands, z on tensor cores, and where the row kernels take them.
#ifndef TAPEGRAD_KERNELS_CUDA_CONV1D_TENSOR_CORES_CUH
#define TAPEGRAD_KERNELS_CUDA_CONV1D_TENSOR_CORES_CUH

#include "kernels/cuda/conv1d/rows.cuh"

namespace tg_conv1d {

// ---- bf16 on tensor cores --------------------------------------------------------
//
// With 16-bit storage the row backward is bound by instruction issue, and most of its
// instructions are the three convolutions with the channel's taps: z rebuilt from x, dx from
// g, and the per-lag sums of dw (about 3·K multiply-adds per step, plus the K − 1 steps of z
// and g rebuilt past each thread's own). All three are small matrix products in disguise, so
// in bf16 the tensor cores do them where K makes the float maths long (the backward from
// K = 5 on, the staged forward, z alone, from K = 9 on: backward_on_tensor_cores). A warp
// takes a span's steps as tiles of 16 segments (rows j) × 16 steps (columns n), two per pass
// in the forward, four in the backward; for a tile starting at step T0:
//   z[j][n]  = bias + Σ_k X[j][k]·Wc[k][n] + Σ_k Xp[j][k]·Wp[k][n]
//              X[j][k] = x[T0 + 16j + k], Xp the segment before (X one row earlier),
//              Wc[k][n] = wl[n − k], Wp[k][n] = wl[n − k + 16]
//   dx[j][n] = Σ_k G[j][k]·Vc[k][n] + Σ_k Gn[j][k]·Vn[k][n]
//              G[j][k] = g[T0 + 16j + k], Gn the segment after,
//              Vc[k][n] = wl[k − n], Vn[k][n] = wl[k + 16 − n]
//   dwl[i]   = Σ_n P[n][n − i] + Σ_n Pp[n][n − i + 16],   P += Gᵀ·X and Pp += Gᵀ·Xp per tile
//              (P[n][k'] sums g[16j + n]·x[16j + k'] over the segments: its diagonals are the
//              lag sums dw needs, and it is reduced to them once, at the end of the block)
//   dbias    = Σ g, in float32 per lane as g is made (a product with a tile of ones costs
//              four accumulator registers, and at 6 resident blocks the kernel spilled),
// with wl[i] = 0 outside 0 … K − 1. x and the taps are bf16 values, so their products are
// exact and z is summed in float32 as before. g is made in float32 and enters the products
// rounded to bf16, as an unfused bf16 pipeline would store it between SiLU's backward and the
// convolution's: each term of dx and dw then carries up to 2⁻⁹ of its size, rounding errors
// of independent signs that the float32 sums do not grow (dx and dw are stored in bf16, 2⁻⁹
// too). Carrying g as two bf16 parts, hi + lo, kept them within 2⁻¹⁶ of the float32 result but
// doubled the products and their operands' moves, which measured slower at K = 8 and 16
// (docs/benchmarks.md). dbias sums g in float32,
// unrounded. The slope of SiLU stays per element, in float32.
//   The operands come from shared memory by ldmatrix (x and dout are staged there already, a
// segment being 32 contiguous bytes); g goes from the product's result layout to the operand
// layout of the next without leaving registers (the two layouts agree for row-major tiles),
// its transpose for dw by movmatrix, and Gn by shuffles, except for the segment after the
// warp's last, whose first K − 1 steps the warp computes on its own.
//   Fragment layouts (PTX ISA, mma.m16n8k16): lane = 4·gr + q holds, of a 16 × 16 row-major
// operand A, rows gr and gr + 8 at columns 2q, 2q + 1 and 2q + 8, 2q + 9 (four registers of two
// bf16: a0 rows gr, a1 rows gr + 8, a2 and a3 the same 8 columns on); of a 16 × 8 operand B,
// rows 2q, 2q + 1 (b0) and 2q + 8, 2q + 9 (b1) of column gr; of the 16 × 8 float result,
// rows gr (d0, d1) and gr + 8 (d2, d3) at columns 2q, 2q + 1. So result tiles n 0–7 and 8–15 of
// one product are, packed in pairs, the A operand a0 … a3 of the next.

// Four (or two) 8 × 8 matrices of 16-bit values from shared memory, lanes 8m … 8m + 7 giving
// the rows of matrix m; the transposed forms deliver them as B operands.
__device__ inline void load_matrices(unsigned (&r)[4], const void *rows)
{
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(shared_address(rows))
                 : "memory");
}
__device__ inline void load_matrices_transposed(unsigned (&r)[4], const void *rows)
{
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(shared_address(rows))
                 : "memory");
}
__device__ inline void load_matrices(unsigned (&r)[2], const void *rows)
{
    asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0, %1}, [%2];\n"
                 : "=r"(r[0]), "=r"(r[1])
                 : "r"(shared_address(rows))
                 : "memory");
}
__device__ inline void load_matrices_transposed(unsigned (&r)[2], const void *rows)
{
    asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0, %1}, [%2];\n"
                 : "=r"(r[0]), "=r"(r[1])
                 : "r"(shared_address(rows))
                 : "memory");
}

// d = a·b + c: a 16 × 16 bf16 tile times a 16 × 8 one, summed in float32 onto c.
__device__ inline void multiply(float (&d)[4], const unsigned (&a)[4], const unsigned (&b)[2], const float (&c)[4])
{
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
                 "{%10, %11, %12, %13};\n"
                 : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]), "f"(c[0]), "f"(c[1]), "f"(c[2]),
                   "f"(c[3]));
}
// d += a·b.
__device__ inline void multiply_add(float (&d)[4], const unsigned (&a)[4], const unsigned (&b)[2])
{
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
                 "{%0, %1, %2, %3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

// The channel's tap at look-back distance d as raw bf16 bits, 0 outside 0 … K − 1.
__device__ inline unsigned tap_bits(const conv_args &a, int64_t c, int d)
{
    const unsigned short *w = (const unsigned short *)a.w + c * a.ws0;
    return d >= 0 && d < a.K ? w[(a.K - 1 - d) * a.ws1] : 0u;
}
// The B operand of n-tile nt whose element (k, n) is the tap at distance sign·(n − k) + offset.
__device__ inline void tap_operand(const conv_args &a, int64_t c, int nt, int sign, int offset, unsigned (&b)[2])
{
    const int lane = threadIdx.x % 32, n = 8 * nt + lane / 4, k = 2 * (lane % 4);
    auto tap = [&](int kk) { return tap_bits(a, c, sign * (n - kk) + offset); };
    b[0] = tap(k) | tap(k + 1) << 16;
    b[1] = tap(k + 8) | tap(k + 9) << 16;
}

// The tap operands of one direction (sign as in tap_operand) are read from shared memory at
// each tile rather than kept in registers: 12 registers fewer let the backward keep 7 blocks
// per SM without spills. Warp 0 writes each lane's operands, offsets
// 0 (both n-tiles) and 16, as two 16-byte words: ops[2·lane], ops[2·lane + 1].
__device__ inline void store_tap_operands(const conv_args &a, int64_t c, int sign, uint4 *ops)
{
    if (threadIdx.x >= 32) return;
    unsigned b[2][2][2]; // [offset][n-tile]
    for (int nt = 0; nt < 2; nt++) {
        tap_operand(a, c, nt, sign, 0, b[0][nt]);
        tap_operand(a, c, nt, sign, 16, b[1][nt]);
    }
    ops[2 * threadIdx.x] = make_uint4(b[0][0][0], b[0][0][1], b[0][1][0], b[0][1][1]);
    ops[2 * threadIdx.x + 1] = make_uint4(b[1][0][0], b[1][0][1], b[1][1][0], b[1][1][1]);
}
// This lane's operands (after the barrier that follows store_tap_operands), per n-tile.
__device__ inline void load_tap_operands(const uint4 *ops, unsigned (&at0)[2][2], unsigned (&at16)[2][2])
{
    const int lane = threadIdx.x % 32;
    const uint4 first = ops[2 * lane], second = ops[2 * lane + 1];
    at0[0][0] = first.x, at0[0][1] = first.y, at0[1][0] = first.z, at0[1][1] = first.w;
    at16[0][0] = second.x, at16[0][1] = second.y, at16[1][0] = second.z, at16[1][1] = second.w;
}

// This lane's row addresses for ldmatrix, in steps from a tile's first: its row of the four
// 8 × 8 matrices of the tile (own), and of the segments before (before: with `wide`, all 16
// columns; else columns 8–15, the only ones taps of K ≤ 9 reach, as the last two matrices).
struct tile_rows {
    int own, before;
    __device__ tile_rows(bool wide)
    {
        const int lane = threadIdx.x % 32, m = lane / 8, row = lane % 8 + 8 * (m & 1);
        own = 16 * row + 8 * (m >> 1);
        before = 16 * row - 16 + (wide ? 8 * (m >> 1) : 8);
    }
};

// z = bias + X·Wc + Xp·Wp on tiles of a channel: the taps as B operands.
template <int KB> struct tensor_core_z {
    // With K ≤ 9 the taps reach back (and, for dx, ahead) at most 8 steps, so only the
    // neighbouring segments' columns 8–15 (and 0–7) take part; K = 16 needs them whole.
    static constexpr bool kWide = KB > 9;
    const uint4 *ops; // 64 words of shared memory: the taps as B operands (store_tap_operands)
    float bias;

    __device__ __forceinline__ void setup(const conv_args &a, int64_t c, uint4 *shared_ops)
    {
        bias = a.bias ? tg_to_float(((const __nv_bfloat16 *)a.bias)[c * a.bs0]) : 0.0f;
        store_tap_operands(a, c, 1, shared_ops);
        ops = shared_ops;
    }
    // The operands X and Xp of the tile from xt (its first step; the 16 steps before it staged):
    // as A operands, or TRANSPOSED, as the B operands of the two n-tiles (registers 0–1, 2–3).
    template <bool TRANSPOSED = false>
    __device__ __forceinline__ static void load_x(const __nv_bfloat16 *xt, const tile_rows &rows, unsigned (&x)[4],
                                                  unsigned (&xp)[4])
    {
        auto load = [](unsigned(&r)[4], const __nv_bfloat16 *p) {
            if constexpr (TRANSPOSED)
                load_matrices_transposed(r, p);
            else
                load_matrices(r, p);
        };
        load(x, xt + rows.own);
        if constexpr (kWide) {
            load(xp, xt + rows.before);
        } else {
            unsigned half[2];
            if constexpr (TRANSPOSED)
                load_matrices_transposed(half, xt + rows.before);
            else
                load_matrices(half, xt + rows.before);
            xp[0] = xp[1] = 0, xp[2] = half[0], xp[3] = half[1];
        }
    }
    // Wc and Wp, per n-tile.
    __device__ __forceinline__ void operands(unsigned (&wc)[2][2], unsigned (&wp)[2][2]) const
    {
        load_tap_operands(ops, wc, wp);
    }
    __device__ __forceinline__ void tile(const unsigned (&x)[4], const unsigned (&xp)[4], const unsigned (&wc)[2][2],
                                         const unsigned (&wp)[2][2], float (&z)[2][4]) const
    {
        const float biases[4] = {bias, bias, bias, bias};
        multiply(z[0], x, wc[0], biases);
        multiply_add(z[0], xp, wp[0]);
        multiply(z[1], x, wc[1], biases);
        if constexpr (kWide) multiply_add(z[1], xp, wp[1]);
    }
};

// Stores a tile's 16 × 16 results (first step t0 of row `out`, the result layout of two
// n-tiles): pairs of steps when `pairs` (the tile inside the row, an aligned row, nothing to
// add); else step by step inside the row, each value passed through finish(step, value).
template <typename Finish>
__device__ inline void store_tile(__nv_bfloat16 *out, int64_t L, bool pairs, int64_t t0, const float (&v)[2][4],
                                  Finish finish)
{
    const int lane = threadIdx.x % 32, gr = lane / 4, q = lane % 4;
    if (pairs) { // uniform across the warp
        unsigned *p = (unsigned *)(out + t0 + 16 * gr + 2 * q);
#pragma unroll
        for (int nt = 0; nt < 2; nt++)
#pragma unroll
            for (int h = 0; h < 2; h++) p[64 * h + 4 * nt] = pack2(v[nt][2 * h], v[nt][2 * h + 1], __nv_bfloat16());
        return;
    }
#pragma unroll
    for (int nt = 0; nt < 2; nt++)
#pragma unroll
        for (int e = 0; e < 4; e++) {
            const int64_t u = t0 + 16 * (gr + 8 * (e / 2)) + 8 * nt + 2 * q + e % 2;
            if (u < L) out[u] = tg_from_float<__nv_bfloat16>(finish(u, v[nt][e]));
        }
}

// Where bf16 runs on tensor cores: where the float maths grows with K, the backward from
// K = 5 on (bucket 8; at K ≤ 4 its float form is faster, docs/benchmarks.md) and the staged
// forward at K > 8. (mma with bf16 operands needs sm_80, as the tile kernels' cp.async does.)
template <typename T, int KB> __host__ __device__ constexpr bool backward_on_tensor_cores()
{
    return std::is_same<T, __nv_bfloat16>::value && KB >= 8;
}
template <typename T, int KB> __host__ __device__ constexpr bool forward_on_tensor_cores()
{
    return std::is_same<T, __nv_bfloat16>::value && KB > 8;
}

// The bf16 backward from K = 5 on: each warp takes 1024 steps of a span (four tiles) per pass
// on tensor cores (tensor_core_backward), twice the float kernel's 512. The work paid once per
// pass (g after the warp's steps, addresses, the wait for the span) and once per span (the
// walk, its barrier, the staging) then serves twice the steps; spans of 4096 steps in two
// stages take 33 KB of shared memory. Registers decide the rest: at 6 resident blocks
// (80 registers) the four tiles spilled and measured slower; 4 (up to 128, no spills)
// measured level with 5 (96) at K = 8 and faster at K = 16 and on short rows
// (docs/benchmarks.md). Three stages at 4 blocks: no change.
constexpr int kTensorCoreTiles = 4, kTensorCoreStages = 2;
constexpr int kTensorCoreStepsPerThread = kTensorCoreTiles * 256 / 32;

} // namespace tg_conv1d

#endif
