// kernels/cuda/embedding.cu: the id check, the row gather and the table gradient on the
// device.
//
// The id check waits for its answer, except during a capture (tapegrad/graph.h), where it
// records a bad id on the device instead; the gather then reads zeros for it and the
// gradient leaves its row of dy out, so that no kernel reads or writes outside the table.
//
// The gradient is a scatter-add done without atomics, so it is the same on every run:
// the ids are sorted together with their dy rows (a stable radix sort, so equal ids keep
// their positions in increasing order) and each id's run of rows is summed in double, in
// position order, in chunks (below). Rows no id points at keep the zeros dtable holds on
// entry.
#include "kernels/embedding.h"
#include "kernels/cuda/strided.cuh"

#include <cub/device/device_radix_sort.cuh>
#include <cub/device/device_scan.cuh>

#include <limits.h>
#include <stdint.h>

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

// Every id outside [0, vocab) goes to the record of bad inputs (the first one stays).
__global__ void record_bad_ids_kernel(tg_strided<1> ids, int64_t vocab, int64_t n, tg_bad_input *record)
{
    const int32_t *values = (const int32_t *)ids.data[0];
    for (int64_t p = tg_global_index(); p < n; p += tg_global_stride()) {
        int64_t at;
        tg_strided_offsets(ids, p, &at);
        int32_t id = values[at];
        if (id < 0 || id >= vocab) tg_record_bad_input(record, TG_BAD_EMBEDDING_ID, p, id, vocab);
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
    if (tg_cuda_capturing()) { // no waiting in a capture: the device keeps the answer
        tg_bad_input *record = tg_cuda_bad_input_record();
        if (!record) return TG_ERR_DEVICE;
        record_bad_ids_kernel<<<tg_blocks_for(n), TG_THREADS>>>(ids_plan(ids), vocab, n, record);
        return tg_cuda_check_launch("tg_embedding");
    }
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
// dtype's size (table and out share a dtype); an id outside the table (possible only in a
// captured step, which records it) reads zeros.
template <typename W>
__global__ void gather_rows(tg_strided<2> rows, const W *table, int64_t table_rows, int64_t table_row_step,
                            int64_t table_step, int64_t out_step, int64_t dim, int64_t n)
{
    const int32_t *ids = (const int32_t *)rows.data[0];
    W *out = (W *)rows.data[1];
    for (int64_t e = tg_global_index(); e < n; e += tg_global_stride()) {
        int64_t p = e / dim, d = e - p * dim, at[2];
        tg_strided_offsets(rows, p, at);
        int64_t id = ids[at[0]];
        out[at[1] + d * out_step] = id >= 0 && id < table_rows ? table[id * table_row_step + d * table_step] : W(0);
    }
}

template <typename W>
static void launch_gather(const tg_strided<2> &rows, const tg_tensor *table, const tg_tensor *out, int64_t n)
{
    gather_rows<W><<<tg_blocks_for(n), TG_THREADS>>>(rows, (const W *)tg_bytes(table), table->shape[0],
                                                     table->strides[0], table->strides[1], out->strides[out->ndim - 1],
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
//
// After the sort, each id's dy rows are one contiguous run of the sorted array, in position
// order. A run of at most TG_EMBEDDING_GRAD_CHUNK rows is summed by one thread per column.
// A longer run (the padding or noise token of a batch can own most of it) is cut into
// chunks of TG_EMBEDDING_GRAD_CHUNK rows: one thread per (chunk, column) sums its chunk,
// then one thread per column adds the run's chunk sums in order. Every sum is in double
// and is rounded once into dtable, with the same grouping as the CPU kernel, so both give
// the same bits and two runs give the same bits.

static const int64_t CHUNK = TG_EMBEDDING_GRAD_CHUNK;

// keys[p] = ids[p] and rows[p] = dy's element offset of row p, for the row-major positions
// p. Plan operands over ids' shape: (ids, dy's leading dimensions). An id outside [0, V)
// (the forward checked them, so they changed since) is recorded as a bad input and gets
// the key V, which no run of a table row includes.
__global__ void gather_keys(tg_strided<2> plan, int64_t vocab, uint32_t *keys, int64_t *rows, int64_t n,
                            tg_bad_input *record)
{
    const int32_t *values = (const int32_t *)plan.data[0];
    for (int64_t p = tg_global_index(); p < n; p += tg_global_stride()) {
        int64_t at[2];
        tg_strided_offsets(plan, p, at);
        int32_t id = values[at[0]];
        bool inside = id >= 0 && id < vocab;
        if (!inside) tg_record_bad_input(record, TG_BAD_EMBEDDING_ID, p, id, vocab);
        keys[p] = inside ? (uint32_t)id : (uint32_t)vocab;
        rows[p] = at[1];
    }
}

// The first index of sorted keys[0, n) holding a key >= id.
__device__ inline int64_t lower_bound(const uint32_t *keys, int64_t n, uint32_t id)
{
    int64_t lo = 0, hi = n;
    while (lo < hi) {
        int64_t mid = lo + (hi - lo) / 2;
        if (keys[mid] < id)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

struct grad_runs {
    const uint32_t *keys; // sorted ids
    const int64_t *rows;  // dy's row offsets, in position order within each id's run
    int64_t n, vocab, dim;
    const char *dy;
    int dy_dtype;
    int64_t dy_step;      // dy's stride along D
    int64_t *run_start;   // [vocab]: where id v's run starts in the sorted array
    int64_t *run_length;  // [vocab]
    int64_t *long_chunks; // [vocab]: chunks of a run longer than CHUNK, else 0
    int64_t *chunk_first; // [vocab]: exclusive prefix sum of long_chunks
    double *chunk_sums;   // [chunks][dim]
    char *dtable;
    int dtable_dtype;
    int64_t dtable_row_step, dtable_step;
};

// Sum of dy[rows[j] + at] for j in [begin, end), in order, starting from +0. Typed and
// unrolled, so that the loads of several rows are in flight at once (the adds stay in order).
template <typename T>
__device__ inline double sum_rows_of(const T *dy, const int64_t *rows, int64_t begin, int64_t end, int64_t at)
{
    double sum = 0.0;
#pragma unroll 8
    for (int64_t j = begin; j < end; j++) sum += tg_to_double(dy[rows[j] + at]);
    return sum;
}

// Sum of dy[rows[j], d] for j in [begin, end), in order, starting from +0.
__device__ inline double sum_rows(const grad_runs &g, int64_t begin, int64_t end, int64_t d)
{
    const int64_t at = d * g.dy_step;
    switch (g.dy_dtype) {
    case TG_F32: return sum_rows_of((const float *)g.dy, g.rows, begin, end, at);
    case TG_F64: return sum_rows_of((const double *)g.dy, g.rows, begin, end, at);
    case TG_BF16: return sum_rows_of((const __nv_bfloat16 *)g.dy, g.rows, begin, end, at);
    case TG_F16: return sum_rows_of((const __half *)g.dy, g.rows, begin, end, at);
    default: return (double)NAN; // dy is a float tensor: the op checked it
    }
}

__device__ inline void store_row_value(const grad_runs &g, int64_t id, int64_t d, double total)
{
    tg_store_raw(g.dtable, g.dtable_dtype, id * g.dtable_row_step + d * g.dtable_step, total);
}

// Per id: its run's place in the sorted keys, and how many chunks it needs when long.
__global__ void find_runs(grad_runs g)
{
    for (int64_t v = tg_global_index(); v < g.vocab; v += tg_global_stride()) {
        int64_t start = lower_bound(g.keys, g.n, (uint32_t)v),
                length = lower_bound(g.keys, g.n, (uint32_t)v + 1) - start;
        g.run_start[v] = start;
        g.run_length[v] = length;
        g.long_chunks[v] = length > CHUNK ? (length + CHUNK - 1) / CHUNK : 0;
    }
}

// One thread per (id, column): the whole sum of a short run.
__global__ void sum_short_runs(grad_runs g)
{
    for (int64_t e = tg_global_index(); e < g.vocab * g.dim; e += tg_global_stride()) {
        int64_t v = e / g.dim, d = e - v * g.dim, length = g.run_length[v];
        if (length == 0 || length > CHUNK) continue;
        store_row_value(g, v, d, 0.0 + sum_rows(g, g.run_start[v], g.run_start[v] + length, d));
    }
}

// One thread per (chunk of a long run, column); chunk c of all long runs belongs to the
// last id whose chunk_first is <= c.
__global__ void sum_long_chunks(grad_runs g, int64_t max_chunks)
{
    const int64_t total = g.chunk_first[g.vocab - 1] + g.long_chunks[g.vocab - 1];
    for (int64_t e = tg_global_index(); e < max_chunks * g.dim; e += tg_global_stride()) {
        int64_t c = e / g.dim, d = e - c * g.dim;
        if (c >= total) continue;
        int64_t lo = 0, hi = g.vocab; // the first id with chunk_first > c, less one
        while (lo < hi) {
            int64_t mid = lo + (hi - lo) / 2;
            if (g.chunk_first[mid] <= c)
                lo = mid + 1;
            else
                hi = mid;
        }
        int64_t v = lo - 1, k = c - g.chunk_first[v];
        int64_t begin = g.run_start[v] + k * CHUNK, end = g.run_start[v] + g.run_length[v];
        if (end > begin + CHUNK) end = begin + CHUNK;
        g.chunk_sums[c * g.dim + d] = sum_rows(g, begin, end, d);
    }
}

// One thread per (id, column) of a long run: its chunk sums added in order.
__global__ void sum_long_runs(grad_runs g)
{
    for (int64_t e = tg_global_index(); e < g.vocab * g.dim; e += tg_global_stride()) {
        int64_t v = e / g.dim, d = e - v * g.dim, chunks = g.long_chunks[v];
        if (chunks == 0) continue;
        double total = 0.0;
        const double *sums = g.chunk_sums + g.chunk_first[v] * g.dim + d;
#pragma unroll 8
        for (int64_t k = 0; k < chunks; k++) total += sums[k * g.dim];
        store_row_value(g, v, d, total);
    }
}

static size_t aligned(size_t bytes) { return (bytes + 255) / 256 * 256; }

// Scratch for the sort, the runs and the chunk sums, carved from one device block.
struct grad_scratch {
    void *block;
    size_t bytes, sort_bytes, scan_bytes;
    uint32_t *keys_in, *keys_out;
    int64_t *rows_in, *rows_out;
    void *sort_storage, *scan_storage;
    int64_t *run_start, *run_length, *long_chunks, *chunk_first;
    double *chunk_sums;
};

#define TG_CUB_CHECK(call)                                                                                             \
    do {                                                                                                               \
        cudaError_t cub_error_ = (call);                                                                               \
        if (cub_error_ != cudaSuccess)                                                                                 \
            status = tg_set_error(TG_ERR_DEVICE, "tg_embedding backward: %s", cudaGetErrorString(cub_error_));         \
    } while (0)

// Radix-sorts n (key, row) pairs on the low end_bit bits of the keys (stable: equal keys
// keep their order). With query, only measures the scratch it needs.
static tg_status sort_pairs(grad_scratch &s, int64_t n, int end_bit, bool query)
{
    tg_status status = TG_OK;
    if (query)
        TG_CUB_CHECK(cub::DeviceRadixSort::SortPairs(NULL, s.sort_bytes, (const uint32_t *)NULL, (uint32_t *)NULL,
                                                     (const int64_t *)NULL, (int64_t *)NULL, n, 0, end_bit));
    else
        TG_CUB_CHECK(cub::DeviceRadixSort::SortPairs(s.sort_storage, s.sort_bytes, s.keys_in, s.keys_out, s.rows_in,
                                                     s.rows_out, n, 0, end_bit));
    return status;
}

// chunk_first = the exclusive prefix sum of long_chunks over the vocabulary.
static tg_status scan_chunks(grad_scratch &s, int64_t vocab, bool query)
{
    tg_status status = TG_OK;
    if (query)
        TG_CUB_CHECK(cub::DeviceScan::ExclusiveSum(NULL, s.scan_bytes, (const int64_t *)NULL, (int64_t *)NULL, vocab));
    else
        TG_CUB_CHECK(cub::DeviceScan::ExclusiveSum(s.scan_storage, s.scan_bytes, s.long_chunks, s.chunk_first, vocab));
    return status;
}

// Chunks of long runs: a long run of length l > CHUNK has ceil(l / CHUNK) < 2 l / CHUNK of
// them, so all long runs together have fewer than 2 n / CHUNK.
static int64_t max_long_chunks(int64_t n) { return 2 * ((n + CHUNK - 1) / CHUNK); }

static tg_status alloc_scratch(grad_scratch &s, int64_t n, int64_t vocab, int64_t dim, int end_bit)
{
    s = grad_scratch{};
    tg_status status = sort_pairs(s, n, end_bit, true);
    if (status == TG_OK) status = scan_chunks(s, vocab, true);
    if (status != TG_OK) return status;
    size_t keys = aligned((size_t)n * sizeof(uint32_t)), rows = aligned((size_t)n * sizeof(int64_t));
    size_t per_id = aligned((size_t)vocab * sizeof(int64_t));
    size_t sums = aligned((size_t)max_long_chunks(n) * (size_t)dim * sizeof(double));
    size_t sizes[] = {keys,   keys,   rows,   rows, aligned(s.sort_bytes), aligned(s.scan_bytes), per_id,
                      per_id, per_id, per_id, sums};
    for (size_t size : sizes) s.bytes += size;
    status = tg_device_alloc(TG_DEVICE_CUDA, s.bytes, &s.block);
    if (status != TG_OK) return status;
    void *parts[11];
    char *at = (char *)s.block;
    for (int i = 0; i < 11; i++) parts[i] = at, at += sizes[i];
    s.keys_in = (uint32_t *)parts[0], s.keys_out = (uint32_t *)parts[1];
    s.rows_in = (int64_t *)parts[2], s.rows_out = (int64_t *)parts[3];
    s.sort_storage = parts[4], s.scan_storage = parts[5];
    s.run_start = (int64_t *)parts[6], s.run_length = (int64_t *)parts[7];
    s.long_chunks = (int64_t *)parts[8], s.chunk_first = (int64_t *)parts[9];
    s.chunk_sums = (double *)parts[10];
    return TG_OK;
}

static grad_runs runs_of(const grad_scratch &s, const tg_tensor *dy, tg_tensor *dtable, int64_t n)
{
    grad_runs g = {};
    g.keys = s.keys_out;
    g.rows = s.rows_out;
    g.n = n;
    g.vocab = dtable->shape[0];
    g.dim = dtable->shape[1];
    g.dy = tg_bytes(dy);
    g.dy_dtype = (int)dy->dtype;
    g.dy_step = dy->strides[dy->ndim - 1];
    g.run_start = s.run_start, g.run_length = s.run_length;
    g.long_chunks = s.long_chunks, g.chunk_first = s.chunk_first;
    g.chunk_sums = s.chunk_sums;
    g.dtable = tg_bytes(dtable);
    g.dtable_dtype = (int)dtable->dtype;
    g.dtable_row_step = dtable->strides[0];
    g.dtable_step = dtable->strides[1];
    return g;
}

// Outside a capture the backward may wait, so ids changed since the forward fail it
// before dtable is touched; inside one, gather_keys records them for
// tg_device_check_errors.
static tg_status check_ids_unchanged(const tg_tensor *ids, int64_t vocab)
{
    if (tg_cuda_capturing()) return TG_OK;
    int64_t position = -1, id = 0;
    tg_status status = tg_cuda_embedding_find_bad_id(ids, vocab, &position, &id);
    if (status != TG_OK || position < 0) return status;
    return tg_set_error(TG_ERR_INVALID,
                        "tg_embedding backward: id %lld at flat position %lld is outside [0, V) for "
                        "V = %lld (ids changed after the forward)",
                        (long long)id, (long long)position, (long long)vocab);
}

extern "C" tg_status tg_cuda_embedding_bwd(const tg_tensor *dy, const tg_tensor *ids, tg_tensor *dtable)
{
    const int64_t n = tg_numel(ids), vocab = dtable->shape[0], dim = dtable->shape[1];
    if (n == 0 || dim == 0) return TG_OK;
    if (vocab >= UINT32_MAX)
        return tg_set_error(TG_ERR_INVALID,
                            "tg_embedding backward: %lld rows are too many for "
                            "32-bit sort keys",
                            (long long)vocab);
    tg_status status = check_ids_unchanged(ids, vocab);
    if (status != TG_OK) return status;
    tg_bad_input *record = tg_cuda_bad_input_record();
    if (!record) return TG_ERR_DEVICE;
    int end_bit = 1; // enough key bits for every key up to vocab (the key of a bad id)
    while (end_bit < 32 && ((int64_t)1 << end_bit) <= vocab) end_bit++;
    grad_scratch scratch;
    status = alloc_scratch(scratch, n, vocab, dim, end_bit);
    if (status != TG_OK) return status;
    const int64_t *strides[2] = {ids->strides, dy->strides}; // dy's leading dimensions are ids' shape
    tg_strided<2> plan = tg_strided_plan<2>(ids->ndim, ids->shape, strides);
    tg_strided_bind(plan, 0, ids);
    tg_strided_bind(plan, 1, dy);
    gather_keys<<<tg_blocks_for(n), TG_THREADS>>>(plan, vocab, scratch.keys_in, scratch.rows_in, n, record);
    status = tg_cuda_check_launch("tg_embedding backward");
    if (status == TG_OK) status = sort_pairs(scratch, n, end_bit, false);
    grad_runs g = runs_of(scratch, dy, dtable, n);
    if (status == TG_OK) {
        find_runs<<<tg_blocks_for(vocab), TG_THREADS>>>(g);
        status = tg_cuda_check_launch("tg_embedding backward");
    }
    if (status == TG_OK) status = scan_chunks(scratch, vocab, false);
    if (status == TG_OK) {
        sum_short_runs<<<tg_blocks_for(vocab * dim), TG_THREADS>>>(g);
        sum_long_chunks<<<tg_blocks_for(max_long_chunks(n) * dim), TG_THREADS>>>(g, max_long_chunks(n));
        sum_long_runs<<<tg_blocks_for(vocab * dim), TG_THREADS>>>(g);
        status = tg_cuda_check_launch("tg_embedding backward");
    }
    tg_device_free(TG_DEVICE_CUDA, scratch.block, scratch.bytes); // queued work finishes before reuse
    return status;
}
