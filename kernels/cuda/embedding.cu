// kernels/cuda/embedding.cu: the id check, the row gather and the table gradient on the
// device.
//
// The gradient is a scatter-add done without atomics, so it is the same on every run:
// the ids are sorted together with their positions (a stable radix sort, so equal ids
// keep their positions in increasing order), and then one thread per (run of equal ids,
// column) adds the dy rows of that run in position order, rounding to the table's dtype
// after every addition as the CPU kernel does, and writes the row once. Rows no id
// points at keep the zeros dtable holds on entry.
#include "kernels/embedding.h"
#include "kernels/cuda/strided.cuh"

#include <cub/device/device_radix_sort.cuh>

#include <limits.h>

// ---- the id check ----------------------------------------------------------------------------

// The smallest position of an id outside [0, vocab). A minimum of integers is the same
// whatever order the threads come in.
__global__ void find_bad_id_kernel(tg_strided<1> ids, int64_t vocab, int64_t n, unsigned long long *first_bad)
{
    const int32_t *values = (const int32_t *)ids.data[0];
    for (int64_t p = tg_global_index(); p < n; p += tg_global_stride()) {
        int64_t at;
        tg_strided_offsets(ids, p, &at);
        int64_t id = values[at];
        if (id < 0 || id >= vocab) atomicMin(first_bad, (unsigned long long)p);
    }
}

static tg_strided<1> ids_plan(const tg_tensor *ids)
{
    const int64_t *strides[1] = {ids->strides};
    tg_strided<1> plan = tg_strided_plan<1>(ids->ndim, ids->shape, strides);
    tg_strided_bind(plan, 0, ids);
    return plan;
}

// ids' element offset of the row-major flat position p (host side).
static int64_t offset_of_position(const tg_tensor *ids, int64_t p)
{
    int64_t offset = 0;
    for (int d = ids->ndim - 1; d >= 0; d--) {
        offset += (p % ids->shape[d]) * ids->strides[d];
        p /= ids->shape[d];
    }
    return offset;
}

extern "C" tg_status tg_cuda_embedding_find_bad_id(const tg_tensor *ids, int64_t vocab, int64_t *bad_position,
                                                   int64_t *bad_id)
{
    *bad_position = -1;
    int64_t n = tg_numel(ids);
    if (n == 0) return TG_OK;
    unsigned long long none = ULLONG_MAX, first = ULLONG_MAX, *device_first = NULL;
    tg_status status = tg_device_alloc(TG_DEVICE_CUDA, sizeof first, (void **)&device_first);
    if (status != TG_OK) return status;
    status = tg_device_memcpy(device_first, &none, sizeof none, TG_COPY_HOST_TO_DEVICE);
    if (status == TG_OK) {
        find_bad_id_kernel<<<tg_blocks_for(n), TG_THREADS>>>(ids_plan(ids), vocab, n, device_first);
        status = tg_cuda_check_launch("tg_embedding");
    }
    if (status == TG_OK) status = tg_device_memcpy(&first, device_first, sizeof first, TG_COPY_DEVICE_TO_HOST);
    tg_device_free(TG_DEVICE_CUDA, device_first, sizeof first);
    if (status != TG_OK || first == none) return status;
    int32_t id = 0;
    const char *at = tg_bytes(ids) + offset_of_position(ids, (int64_t)first) * (int64_t)sizeof id;
    status = tg_device_memcpy(&id, at, sizeof id, TG_COPY_DEVICE_TO_HOST);
    if (status != TG_OK) return status;
    *bad_position = (int64_t)first;
    *bad_id = id;
    return TG_OK;
}

// ---- forward: the gather ------------------------------------------------------------------------

// out[p, d] = table[ids[p], d], one thread per element of out. Plan operands over ids'
// shape: (ids, out's leading dimensions). The rows are copied as raw words W of the
// dtype's size (table and out share a dtype).
template <typename W>
__global__ void gather_rows(tg_strided<2> rows, const W *table, int64_t table_row_step, int64_t table_step,
                            int64_t out_step, int64_t dim, int64_t n)
{
    const int32_t *ids = (const int32_t *)rows.data[0];
    W *out = (W *)rows.data[1];
    for (int64_t e = tg_global_index(); e < n; e += tg_global_stride()) {
        int64_t p = e / dim, d = e - p * dim, at[2];
        tg_strided_offsets(rows, p, at);
        out[at[1] + d * out_step] = table[ids[at[0]] * table_row_step + d * table_step];
    }
}

template <typename W>
static void launch_gather(const tg_strided<2> &rows, const tg_tensor *table, const tg_tensor *out, int64_t n)
{
    gather_rows<W><<<tg_blocks_for(n), TG_THREADS>>>(rows, (const W *)tg_bytes(table), table->strides[0],
                                                     table->strides[1], out->strides[out->ndim - 1],
                                                     table->shape[1], n);
}

extern "C" tg_status tg_cuda_embedding_fwd(const tg_tensor *table, const tg_tensor *ids, tg_tensor *out)
{
    int64_t n = tg_numel(out);
    if (n == 0) return TG_OK;
    const int64_t *strides[2] = {ids->strides, out->strides}; // out's leading dimensions are ids' shape
    tg_strided<2> rows = tg_strided_plan<2>(ids->ndim, ids->shape, strides);
    tg_strided_bind(rows, 0, ids);
    tg_strided_bind(rows, 1, out);
    switch (tg_dtype_size(table->dtype)) {
    case 2: launch_gather<uint16_t>(rows, table, out, n); break;
    case 4: launch_gather<uint32_t>(rows, table, out, n); break;
    case 8: launch_gather<uint64_t>(rows, table, out, n); break;
    default: return tg_set_error(TG_ERR_DTYPE, "tg_embedding: no CUDA gather for %s", tg_dtype_name(table->dtype));
    }
    return tg_cuda_check_launch("tg_embedding");
}

// ---- backward: the deterministic scatter-add ---------------------------------------------------------

// keys[p] = ids[p] (checked to lie in [0, V)), positions[p] = p, in row-major order.
__global__ void gather_keys(tg_strided<1> ids, uint32_t *keys, int64_t *positions, int64_t n)
{
    const int32_t *values = (const int32_t *)ids.data[0];
    for (int64_t p = tg_global_index(); p < n; p += tg_global_stride()) {
        int64_t at;
        tg_strided_offsets(ids, p, &at);
        keys[p] = (uint32_t)values[at];
        positions[p] = p;
    }
}

// v rounded to the storage dtype, as storing and loading it again would give.
__device__ inline double round_to(int dtype, double v)
{
    switch (dtype) {
    case TG_F32: return (float)v;
    case TG_BF16: return __bfloat162float(__float2bfloat16((float)v));
    case TG_F16: return __half2float(__float2half((float)v));
    default: return v;
    }
}

struct run_sums {
    const uint32_t *keys;     // sorted ids
    const int64_t *positions; // their positions in ids, increasing within a run
    int64_t n, dim;
    tg_strided<1> dy_rows;    // dy's leading dimensions (ids' shape)
    int64_t dy_step;          // dy's stride along D
    char *dtable;
    int dtable_dtype;
    int64_t dtable_row_step, dtable_step;
};

// One thread per (sorted index i, column d); the thread at the start of a run sums the
// run's dy rows at column d in position order and writes dtable[id, d].
__global__ void sum_runs(run_sums s)
{
    const char *dy = s.dy_rows.data[0];
    const int dy_dtype = s.dy_rows.dtype[0];
    const int64_t n_threads = s.n * s.dim;
    for (int64_t e = tg_global_index(); e < n_threads; e += tg_global_stride()) {
        int64_t i = e / s.dim, d = e - i * s.dim;
        uint32_t id = s.keys[i];
        if (i > 0 && s.keys[i - 1] == id) continue; // inside a run: its first thread adds it
        double sum = 0.0;
        for (int64_t j = i; j < s.n && s.keys[j] == id; j++) {
            int64_t row;
            tg_strided_offsets(s.dy_rows, s.positions[j], &row);
            sum = round_to(s.dtable_dtype, sum + tg_load_raw(dy, dy_dtype, row + d * s.dy_step));
        }
        tg_store_raw(s.dtable, s.dtable_dtype, (int64_t)id * s.dtable_row_step + d * s.dtable_step, sum);
    }
}

static size_t aligned(size_t bytes) { return (bytes + 255) / 256 * 256; }

// Scratch for the sort, carved from one device block.
struct sort_scratch {
    void *block;
    size_t bytes, sort_bytes;
    uint32_t *keys_in, *keys_out;
    int64_t *positions_in, *positions_out;
    void *sort_storage;
};

#define TG_CUB_CHECK(call)                                                                                      \
    do {                                                                                                        \
        cudaError_t cub_error_ = (call);                                                                        \
        if (cub_error_ != cudaSuccess)                                                                          \
            status = tg_set_error(TG_ERR_DEVICE, "tg_embedding backward: the id sort failed: %s",               \
                                  cudaGetErrorString(cub_error_));                                              \
    } while (0)

// Radix-sorts n (key, position) pairs on the low end_bit bits of the keys.
static tg_status sort_pairs(sort_scratch &s, int64_t n, int end_bit, bool query)
{
    tg_status status = TG_OK;
    if (query)
        TG_CUB_CHECK(cub::DeviceRadixSort::SortPairs(NULL, s.sort_bytes, (const uint32_t *)NULL, (uint32_t *)NULL,
                                                     (const int64_t *)NULL, (int64_t *)NULL, n, 0, end_bit));
    else
        TG_CUB_CHECK(cub::DeviceRadixSort::SortPairs(s.sort_storage, s.sort_bytes, s.keys_in, s.keys_out,
                                                     s.positions_in, s.positions_out, n, 0, end_bit));
    return status;
}

static tg_status alloc_scratch(sort_scratch &s, int64_t n, int end_bit)
{
    s = sort_scratch{};
    tg_status status = sort_pairs(s, n, end_bit, true);
    if (status != TG_OK) return status;
    size_t keys = aligned((size_t)n * sizeof(uint32_t)), positions = aligned((size_t)n * sizeof(int64_t));
    s.bytes = 2 * keys + 2 * positions + aligned(s.sort_bytes);
    status = tg_device_alloc(TG_DEVICE_CUDA, s.bytes, &s.block);
    if (status != TG_OK) return status;
    char *at = (char *)s.block;
    s.keys_in = (uint32_t *)at;
    s.keys_out = (uint32_t *)(at + keys);
    s.positions_in = (int64_t *)(at + 2 * keys);
    s.positions_out = (int64_t *)(at + 2 * keys + positions);
    s.sort_storage = at + 2 * keys + 2 * positions;
    return TG_OK;
}

extern "C" tg_status tg_cuda_embedding_bwd(const tg_tensor *dy, const tg_tensor *ids, tg_tensor *dtable)
{
    const int64_t n = tg_numel(ids), vocab = dtable->shape[0], dim = dtable->shape[1];
    if (n == 0) return TG_OK;
    int64_t bad_position, bad_id;
    tg_status status = tg_cuda_embedding_find_bad_id(ids, vocab, &bad_position, &bad_id);
    if (status != TG_OK) return status;
    if (bad_position >= 0) // the ids changed after the forward checked them
        return tg_set_error(TG_ERR_INVALID, "tg_embedding backward: id %lld is outside [0, %lld)", (long long)bad_id,
                            (long long)vocab);
    if (dim == 0) return TG_OK;
    int end_bit = 1; // enough key bits for every id below vocab
    while (end_bit < 32 && ((int64_t)1 << end_bit) < vocab) end_bit++;
    sort_scratch scratch;
    status = alloc_scratch(scratch, n, end_bit);
    if (status != TG_OK) return status;
    gather_keys<<<tg_blocks_for(n), TG_THREADS>>>(ids_plan(ids), scratch.keys_in, scratch.positions_in, n);
    status = tg_cuda_check_launch("tg_embedding backward");
    if (status == TG_OK) status = sort_pairs(scratch, n, end_bit, false);
    if (status == TG_OK) {
        const int64_t *dy_strides[1] = {dy->strides}; // dy's leading dimensions are ids' shape
        run_sums s = {};
        s.keys = scratch.keys_out;
        s.positions = scratch.positions_out;
        s.n = n;
        s.dim = dim;
        s.dy_rows = tg_strided_plan<1>(ids->ndim, ids->shape, dy_strides);
        tg_strided_bind(s.dy_rows, 0, dy);
        s.dy_step = dy->strides[dy->ndim - 1];
        s.dtable = tg_bytes(dtable);
        s.dtable_dtype = (int)dtable->dtype;
        s.dtable_row_step = dtable->strides[0];
        s.dtable_step = dtable->strides[1];
        sum_runs<<<tg_blocks_for(n * dim), TG_THREADS>>>(s);
        status = tg_cuda_check_launch("tg_embedding backward");
    }
    tg_device_free(TG_DEVICE_CUDA, scratch.block, scratch.bytes); // queued work finishes before reuse
    return status;
}
