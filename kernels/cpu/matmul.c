/* kernels/cpu/matmul.c: matrix products through OpenBLAS, one GEMM per batch, the batches
 * split over the library's threads (each GEMM is computed whole by one thread, so the
 * split changes no result).
 *
 * BLAS reads a matrix that is row-major with unit column stride and an int leading
 * dimension (its row stride). A strided view already laid out like that, or like the
 * transpose of that, is handed over in place (the GEMM's transpose flag absorbs the
 * second case). Any other layout, and every bf16 or f16 matrix, is first gathered into a
 * contiguous scratch matrix in the compute type: f64 for f64 tensors, f32 for f32, bf16
 * and f16. The output is written in place when BLAS can, else through scratch too.
 *
 * OpenBLAS runs on one thread unless the environment names its thread count
 * (OPENBLAS_NUM_THREADS or OMP_NUM_THREADS): the library's own kernels split over the
 * cores, and OpenBLAS's threads, spinning between a training step's small products, would
 * take cores from them. When the environment names it, the batches run in turn. */
#include "kernels/matmul.h"
#include "kernels/cpu/rows.h"

#include <cblas.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>

static bool blas_on_one_thread; /* set once, by keep_blas_on_one_thread */

static void keep_blas_on_one_thread(void)
{
    blas_on_one_thread = !getenv("OPENBLAS_NUM_THREADS") && !getenv("OMP_NUM_THREADS");
    if (blas_on_one_thread) openblas_set_num_threads(1);
}

static bool fits_int(int64_t v) { return v >= 0 && v <= INT_MAX; }

/* The matrix formed by the last two axes of a tensor, as BLAS will see it. */
typedef struct {
    const tg_tensor *t;
    tg_dtype compute;
    int64_t rows, cols, row_stride, col_stride;
    bool copied;  /* goes through `scratch`, a contiguous rows × cols copy */
    bool flipped; /* in place, but stored as the row-major transpose (ld is the column stride) */
    int64_t ld;
    size_t scratch_bytes;
    void *scratch;       /* each thread's own (matrix_scratch) */
    int64_t gathered_at; /* the offset whose matrix scratch holds; -1: none */
} matrix;

/* Decides how BLAS reaches the matrix. Strides of size-1 axes never matter. The output
 * may not be flipped (BLAS writes C row-major). */
static tg_status matrix_init(matrix *m, const tg_tensor *t, tg_dtype compute, bool may_flip)
{
    int nd = t->ndim;
    *m = (matrix){.t = t,
                  .compute = compute,
                  .rows = t->shape[nd - 2],
                  .cols = t->shape[nd - 1],
                  .row_stride = t->strides[nd - 2],
                  .col_stride = t->strides[nd - 1]};
    int64_t rows = m->rows, cols = m->cols, rs = m->row_stride, cs = m->col_stride;
    m->copied = t->dtype != compute;
    if (m->copied) {
        /* gathered below */
    } else if ((cols == 1 || cs == 1) && (rows == 1 || (rs >= cols && fits_int(rs)))) {
        m->ld = rows == 1 ? cols : rs;
    } else if (may_flip && (rows == 1 || rs == 1) && (cols == 1 || (cs >= rows && fits_int(cs)))) {
        m->ld = cols == 1 ? rows : cs;
        m->flipped = true;
    } else {
        m->copied = true;
    }
    if (!m->copied) return TG_OK;
    m->ld = cols;
    int64_t count, bytes;
    if (tg_mul_overflows(rows, cols, &count) || tg_mul_overflows(count, (int64_t)tg_dtype_size(compute), &bytes))
        return tg_set_error(TG_ERR_OVERFLOW, "tg_matmul: a %lldx%lld scratch matrix is too large", (long long)rows,
                            (long long)cols);
    m->scratch_bytes = (size_t)bytes;
    return TG_OK;
}

/* A thread's scratch matrix when m goes through one; false when out of memory. */
static bool matrix_scratch(matrix *m)
{
    m->gathered_at = -1;
    m->scratch = m->copied ? malloc(m->scratch_bytes) : NULL;
    return !m->copied || m->scratch;
}

static char *matrix_base(const matrix *m, int64_t offset)
{
    return tg_bytes(m->t) + offset * (int64_t)tg_dtype_size(m->t->dtype);
}

/* What BLAS reads for the matrix at element `offset` of the tensor (gathered if needed). A
 * thread gathers a matrix shared by every batch once: its offset does not change. */
static const void *matrix_read(matrix *m, int64_t offset)
{
    if (!m->copied) return matrix_base(m, offset);
    if (m->gathered_at == offset) return m->scratch;
    for (int64_t r = 0; r < m->rows; r++) {
        const int64_t at = offset + r * m->row_stride;
        if (m->compute == TG_F64)
            tg_load_row(m->t, at, m->col_stride, m->cols, (double *)m->scratch + r * m->cols);
        else
            tg_load_row_float(m->t, at, m->col_stride, m->cols, (float *)m->scratch + r * m->cols);
    }
    m->gathered_at = offset;
    return m->scratch;
}

/* Where BLAS writes the matrix at element `offset`; matrix_write_back finishes it. */
static void *matrix_target(matrix *m, int64_t offset) { return m->copied ? m->scratch : matrix_base(m, offset); }

static void matrix_write_back(matrix *m, int64_t offset)
{
    if (!m->copied) return;
    tg_tensor *t = (tg_tensor *)m->t; /* the output: the caller's to write */
    for (int64_t r = 0; r < m->rows; r++) {
        const int64_t at = offset + r * m->row_stride;
        if (m->compute == TG_F64)
            tg_store_row(t, at, m->col_stride, m->cols, (const double *)m->scratch + r * m->cols);
        else
            tg_store_row_float(t, at, m->col_stride, m->cols, (const float *)m->scratch + r * m->cols);
    }
}

/* Element offset in t of batch number `index` (row-major over out's batch axes);
 * 0 for a matrix shared by every batch. */
static int64_t batch_offset(const tg_tensor *t, const tg_tensor *out, int64_t index)
{
    if (t->ndim != out->ndim) return 0;
    int64_t offset = 0;
    for (int i = out->ndim - 3; i >= 0; i--) {
        offset += index % out->shape[i] * t->strides[i];
        index /= out->shape[i];
    }
    return offset;
}

/* C = op(A)·op(B), row-major, C overwritten (beta = 0). */
static void gemm(tg_dtype compute, bool transpose_a, bool transpose_b, int64_t m, int64_t n, int64_t k, const void *a,
                 int64_t lda, const void *b, int64_t ldb, void *c, int64_t ldc)
{
    enum CBLAS_TRANSPOSE op_a = transpose_a ? CblasTrans : CblasNoTrans;
    enum CBLAS_TRANSPOSE op_b = transpose_b ? CblasTrans : CblasNoTrans;
    if (compute == TG_F64)
        cblas_dgemm(CblasRowMajor, op_a, op_b, (int)m, (int)n, (int)k, 1.0, a, (int)lda, b, (int)ldb, 0.0, c, (int)ldc);
    else
        cblas_sgemm(CblasRowMajor, op_a, op_b, (int)m, (int)n, (int)k, 1.0f, a, (int)lda, b, (int)ldb, 0.0f, c,
                    (int)ldc);
}

/* A product over an empty inner dimension is a sum of nothing: zeros. */
static void fill_zeros(tg_tensor *out)
{
    tg_iter it;
    tg_iter_init(&it, out->ndim, out->shape, 1, (const int64_t *[]){out->strides});
    if (it.empty) return;
    char *ob = tg_bytes(out);
    do {
        for (int64_t j = 0; j < it.row_length; j++) tg_store(ob, out->dtype, it.offset[0] + j * it.row_stride[0], 0.0);
    } while (tg_iter_next_row(&it));
}

typedef struct {
    const tg_tensor *a, *b, *out;
    bool transpose_a, transpose_b;
    int64_t m, n, k;
    tg_dtype compute;
    matrix ma, mb, mc; /* shared descriptions; each thread copies them and takes its own scratch */
    atomic_bool out_of_memory;
} matmul_job;

/* Batches [begin, end) of the product. */
static void matmul_batches(void *context, int64_t begin, int64_t end)
{
    matmul_job *job = context;
    matrix ma = job->ma, mb = job->mb, mc = job->mc;
    if (!matrix_scratch(&ma) || !matrix_scratch(&mb) || !matrix_scratch(&mc)) {
        atomic_store(&job->out_of_memory, true);
        begin = end;
    }
    for (int64_t i = begin; i < end; i++) {
        const void *pa = matrix_read(&ma, batch_offset(job->a, job->out, i));
        const void *pb = matrix_read(&mb, batch_offset(job->b, job->out, i));
        int64_t oc = batch_offset(job->out, job->out, i);
        gemm(job->compute, job->transpose_a != ma.flipped, job->transpose_b != mb.flipped, job->m, job->n, job->k, pa,
             ma.ld, pb, mb.ld, matrix_target(&mc, oc), mc.ld);
        matrix_write_back(&mc, oc);
    }
    free(ma.scratch), free(mb.scratch), free(mc.scratch);
}

tg_status tg_cpu_matmul(const tg_tensor *a, const tg_tensor *b, bool transpose_a, bool transpose_b, tg_tensor *out)
{
    int nd = out->ndim;
    int64_t m = out->shape[nd - 2], n = out->shape[nd - 1], k = a->shape[a->ndim - (transpose_a ? 2 : 1)];
    int64_t batches = 1;
    for (int i = 0; i < nd - 2; i++) batches *= out->shape[i];
    if (m == 0 || n == 0 || batches == 0) return TG_OK;
    static pthread_once_t blas_threads_set = PTHREAD_ONCE_INIT;
    pthread_once(&blas_threads_set, keep_blas_on_one_thread);
    if (k == 0) {
        fill_zeros(out);
        return TG_OK;
    }
    if (!fits_int(m) || !fits_int(n) || !fits_int(k))
        return tg_set_error(TG_ERR_OVERFLOW, "tg_matmul: M = %lld, N = %lld and K = %lld must each fit in a 32-bit int",
                            (long long)m, (long long)n, (long long)k);
    matmul_job job = {a, b, out, transpose_a, transpose_b, m, n, k, out->dtype == TG_F64 ? TG_F64 : TG_F32};
    tg_status status = matrix_init(&job.ma, a, job.compute, true);
    if (status == TG_OK) status = matrix_init(&job.mb, b, job.compute, true);
    if (status == TG_OK) status = matrix_init(&job.mc, out, job.compute, false);
    if (status != TG_OK) return status;
    /* A thread takes at least about 2^18 multiply-adds (below that, waking one costs more);
     * when OpenBLAS has threads of its own, they take the batches one after another. */
    const double work = (double)m * (double)n * (double)k;
    const int64_t min_batches = !blas_on_one_thread ? batches : work >= 262144.0 ? 1 : (int64_t)(262144.0 / work) + 1;
    tg_parallel_ranges(batches, min_batches, matmul_batches, &job);
    if (atomic_load(&job.out_of_memory))
        return tg_set_error(TG_ERR_NOMEM, "tg_matmul: out of memory for a %lldx%lld scratch matrix",
                            (long long)(job.ma.copied   ? job.ma.rows
                                        : job.mb.copied ? job.mb.rows
                                                        : job.mc.rows),
                            (long long)(job.ma.copied   ? job.ma.cols
                                        : job.mb.copied ? job.mb.cols
                                                        : job.mc.cols));
    return TG_OK;
}
