// bench/strided_copy.cu: how fast a plain copy runs when it walks a channel-last tensor the
// way the channel-last conv1d kernels do, against a copy of the whole tensor.
//
// The tensor is `rows` steps of `row_bytes` each (a (B, L, C) tensor: B·L rows of C channels).
// A block takes one piece of `piece` bytes of every row in a segment of `segment` rows, its
// threads reading and writing 16 bytes each. Blocks are numbered piece first (the order of the
// stream kernels' grid: the blocks that run at once cover whole rows) or segment first. The
// last rows take another walk: each warp of a block reads 16 streams of time at once, on a
// narrow piece of its own (copy_streams). The figures say what the memory system gives such
// walks, apart from any kernel's work.
//
//   strided_copy_bench [--rows N] [--row-bytes N] [--runs N]
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

namespace {

void check(cudaError_t status, const char *what)
{
    if (status == cudaSuccess) return;
    std::fprintf(stderr, "strided_copy_bench: %s: %s\n", what, cudaGetErrorString(status));
    std::exit(1);
}

template <int PIECE, bool PIECE_FIRST>
__global__ void copy_pieces(const uint4 *in, uint4 *out, long long rows, int row_vectors, int segment)
{
    constexpr int kLanesPerRow = PIECE / 16;
    const int pieces = row_vectors / kLanesPerRow;
    const long long segments = rows / segment;
    const long long seg = PIECE_FIRST ? blockIdx.x / pieces : blockIdx.x % segments;
    const int piece = PIECE_FIRST ? (int)(blockIdx.x % pieces) : (int)(blockIdx.x / segments);
    const int rows_per_pass = blockDim.x / kLanesPerRow;
    const int column = piece * kLanesPerRow + threadIdx.x % kLanesPerRow;
    const long long end = (seg + 1) * segment;
#pragma unroll 4
    for (long long r = seg * segment + threadIdx.x / kLanesPerRow; r < end; r += rows_per_pass)
        out[r * row_vectors + column] = __ldcs(in + r * row_vectors + column);
}

// The same walk for a kernel whose warps each take a narrow piece of the rows (PIECE bytes,
// the block's warps side by side across them) and read 16 streams of time at once: a warp's
// segment of 16·stream_len rows is 16 streams of stream_len rows, and each pass copies 8
// rows of every stream (the shape of a tensor-core tile whose 16 rows are streams of one
// channel). No block barrier: the warps drift apart as they will.
template <int PIECE> __global__ void copy_streams(const uint4 *in, uint4 *out, int row_vectors, int stream_len)
{
    constexpr int kStreams = 16, kStepsPerPass = 8;
    constexpr int kLanesPerRow = PIECE / 16, kRowsPerLoad = 32 / kLanesPerRow;
    const int warps = blockDim.x / 32, warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int block_pieces = row_vectors / (kLanesPerRow * warps); // blocks across a row
    const long long segment = (long long)kStreams * stream_len;
    const long long first = blockIdx.x / block_pieces * segment;
    const int column = (blockIdx.x % block_pieces * warps + warp) * kLanesPerRow + lane % kLanesPerRow;
    for (int pass = 0; pass < stream_len / kStepsPerPass; pass++)
#pragma unroll
        for (int i = 0; i < kStreams * kStepsPerPass / kRowsPerLoad; i++) {
            const int row = lane / kLanesPerRow + i * kRowsPerLoad; // of the pass's 128
            const long long r =
                first + (long long)(row / kStepsPerPass) * stream_len + pass * kStepsPerPass + row % kStepsPerPass;
            out[r * row_vectors + column] = __ldcs(in + r * row_vectors + column);
        }
}

// Median of `runs` timings (µs) of launch(), after one warm-up.
template <typename Launch> float median_us(int runs, Launch launch)
{
    cudaEvent_t start, stop;
    check(cudaEventCreate(&start), "event");
    check(cudaEventCreate(&stop), "event");
    launch();
    std::vector<float> times;
    for (int i = 0; i < runs; i++) {
        check(cudaEventRecord(start), "record");
        launch();
        check(cudaEventRecord(stop), "record");
        check(cudaEventSynchronize(stop), "synchronize");
        float ms = 0;
        check(cudaEventElapsedTime(&ms, start, stop), "elapsed");
        times.push_back(1000 * ms);
    }
    check(cudaGetLastError(), "launch");
    cudaEventDestroy(start);
    cudaEventDestroy(stop);
    std::sort(times.begin(), times.end());
    return times[times.size() / 2];
}

template <int PIECE, bool PIECE_FIRST>
float time_pieces(const uint4 *in, uint4 *out, long long rows, int row_bytes, int segment, int threads, int runs)
{
    const int row_vectors = row_bytes / 16;
    const long long blocks = rows / segment * (row_bytes / PIECE);
    return median_us(runs, [&] {
        copy_pieces<PIECE, PIECE_FIRST><<<(unsigned)blocks, threads>>>(in, out, rows, row_vectors, segment);
    });
}

template <int PIECE> void report(const uint4 *in, uint4 *out, long long rows, int row_bytes, float copy_us, int runs)
{
    if (row_bytes % PIECE != 0) return;
    for (int segment : {64, 256})
        for (int threads : {128, 256}) {
            const float first = time_pieces<PIECE, true>(in, out, rows, row_bytes, segment, threads, runs);
            const float last = time_pieces<PIECE, false>(in, out, rows, row_bytes, segment, threads, runs);
            std::printf("%6d %8d %8d %10.1f %6.1f%% %10.1f %6.1f%%\n", PIECE, segment, threads, first,
                        100 * copy_us / first, last, 100 * copy_us / last);
        }
}

// 16-stream warps of 32- and 64-byte pieces, 8 warps side by side (256 and 512 bytes of a row
// per block), against blocks of one stream taking the same 256 or 512 bytes.
template <int PIECE>
void report_streams(const uint4 *in, uint4 *out, long long rows, int row_bytes, float copy_us, int runs)
{
    constexpr int kWarps = 8;
    if (row_bytes % (PIECE * kWarps) != 0) return;
    for (int stream_len : {16, 64}) {
        const long long segment = 16LL * stream_len, blocks = rows / segment * (row_bytes / (PIECE * kWarps));
        if (rows % segment != 0) continue;
        const float us = median_us(
            runs, [&] { copy_streams<PIECE><<<(unsigned)blocks, 32 * kWarps>>>(in, out, row_bytes / 16, stream_len); });
        std::printf("%6d %8d %8d %10.1f %6.1f%%   (16 streams of %d rows per warp, %d-byte pieces per warp)\n",
                    PIECE * kWarps, (int)segment, 32 * kWarps, us, 100 * copy_us / us, stream_len, PIECE);
    }
}

} // namespace

int main(int argc, char **argv)
{
    long long rows = 16LL * 16384;
    int row_bytes = 3072, runs = 25;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!std::strcmp(argv[i], "--rows"))
            rows = std::atoll(argv[i + 1]);
        else if (!std::strcmp(argv[i], "--row-bytes"))
            row_bytes = std::atoi(argv[i + 1]);
        else if (!std::strcmp(argv[i], "--runs"))
            runs = std::atoi(argv[i + 1]);
        else {
            std::fprintf(stderr, "usage: strided_copy_bench [--rows N] [--row-bytes N] [--runs N]\n");
            return 2;
        }
    }
    rows -= rows % 256; // whole segments of either length
    if (rows <= 0 || row_bytes <= 0 || row_bytes % 64 != 0 || runs <= 0) {
        std::fprintf(stderr, "strided_copy_bench: rows ≥ 256, row bytes a multiple of 64, runs ≥ 1\n");
        return 2;
    }
    const size_t bytes = (size_t)rows * row_bytes;
    uint4 *in = nullptr, *out = nullptr;
    check(cudaMalloc(&in, bytes), "cudaMalloc");
    check(cudaMalloc(&out, bytes), "cudaMalloc");
    check(cudaMemset(in, 1, bytes), "cudaMemset");
    const float copy_us =
        median_us(runs, [&] { check(cudaMemcpy(out, in, bytes, cudaMemcpyDeviceToDevice), "cudaMemcpy"); });
    std::printf("%lld rows of %d bytes; copy of the whole tensor %.1f us (%.1f GB/s, bytes read + written)\n", rows,
                row_bytes, copy_us, 2.0 * bytes / copy_us / 1e3);
    std::printf("%6s %8s %8s %10s %7s %10s %7s\n", "piece", "segment", "threads", "piece-1st", "%copy", "seg-1st",
                "%copy");
    report<64>(in, out, rows, row_bytes, copy_us, runs);
    report<128>(in, out, rows, row_bytes, copy_us, runs);
    report<256>(in, out, rows, row_bytes, copy_us, runs);
    report<512>(in, out, rows, row_bytes, copy_us, runs);
    report<1024>(in, out, rows, row_bytes, copy_us, runs);
    report_streams<32>(in, out, rows, row_bytes, copy_us, runs);
    report_streams<64>(in, out, rows, row_bytes, copy_us, runs);
    cudaFree(in);
    cudaFree(out);
    return 0;
}
