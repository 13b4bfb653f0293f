/* core/dtype.c: dtype and device facts, bf16 conversion. */
#include "internal.h"

#include <math.h>
#include <string.h>

#ifdef TG_HAVE_CUDA
int tg_cuda_device_count(void); /* kernels/cuda/runtime.cu */
#endif

static const struct {
    const char *name;
    size_t size;
    bool is_float;
} dtype_info[TG_DTYPE_COUNT] = {
    [TG_F32] = {"f32", 4, true},  [TG_F64] = {"f64", 8, true}, [TG_BF16] = {"bf16", 2, true},
    [TG_I32] = {"i32", 4, false}, [TG_F16] = {"f16", 2, true},
};

static bool dtype_valid(tg_dtype dtype) { return (unsigned)dtype < TG_DTYPE_COUNT; }

const char *tg_dtype_name(tg_dtype dtype) { return dtype_valid(dtype) ? dtype_info[dtype].name : "invalid-dtype"; }

size_t tg_dtype_size(tg_dtype dtype) { return dtype_valid(dtype) ? dtype_info[dtype].size : 0; }

bool tg_dtype_is_float(tg_dtype dtype) { return dtype_valid(dtype) && dtype_info[dtype].is_float; }

const char *tg_device_name(tg_device device)
{
    switch (device) {
    case TG_DEVICE_CPU: return "cpu";
    case TG_DEVICE_CUDA: return "cuda";
    case TG_DEVICE_AUTO: return "auto";
    default: return "invalid-device";
    }
}

bool tg_device_available(tg_device device)
{
    switch (device) {
    case TG_DEVICE_CPU: return true;
    case TG_DEVICE_CUDA:
#ifdef TG_HAVE_CUDA
    {
        static int count = -1; /* asked once: the answer does not change while we run */
        if (count < 0) count = tg_cuda_device_count();
        return count > 0;
    }
#else
        return false;
#endif
    default: return false;
    }
}

tg_device tg_device_resolve(tg_device device)
{
    if (device != TG_DEVICE_AUTO) return device;
    /* CUDA only once this build can also allocate tensors there. */
    bool cuda = tg_device_available(TG_DEVICE_CUDA) && tg_device_has_tensors(TG_DEVICE_CUDA);
    return cuda ? TG_DEVICE_CUDA : TG_DEVICE_CPU;
}

float tg_bf16_to_f32(uint16_t value) { return tg_bf16_bits_to_float(value); }

uint16_t tg_f32_to_bf16(float value) { return tg_float_to_bf16_bits(value); }

/* IEEE binary16: 1 sign bit, 5 exponent bits (bias 15), 10 fraction bits. */
float tg_f16_to_f32(uint16_t value)
{
    uint32_t sign = (uint32_t)(value & 0x8000u) << 16, exponent = (value >> 10) & 0x1fu, fraction = value & 0x3ffu;
    uint32_t bits;
    if (exponent == 0x1f) { /* inf or NaN */
        bits = sign | 0x7f800000u | (fraction << 13);
    } else if (exponent != 0) { /* normal */
        bits = sign | ((exponent + 112u) << 23) | (fraction << 13);
    } else if (fraction == 0) { /* ±0 */
        bits = sign;
    } else { /* subnormal: value = fraction · 2^-24, exact in float */
        float magnitude = (float)fraction * 0x1p-24f;
        memcpy(&bits, &magnitude, sizeof bits);
        bits |= sign;
    }
    float out;
    memcpy(&out, &bits, sizeof out);
    return out;
}

uint16_t tg_f32_to_f16(float value)
{
    uint32_t bits;
    memcpy(&bits, &value, sizeof bits);
    uint16_t sign = (uint16_t)((bits >> 16) & 0x8000u);
    uint32_t magnitude = bits & 0x7fffffffu;
    if (magnitude >= 0x7f800000u) /* inf stays inf, NaN stays a quiet NaN */
        return (uint16_t)(sign | 0x7c00u | (magnitude > 0x7f800000u ? 0x200u : 0));
    if (magnitude >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u); /* rounds past 65504: inf */
    if (magnitude < 0x38800000u) { /* below the smallest normal half, 2^-14: subnormal or 0 */
        float f;
        memcpy(&f, &magnitude, sizeof f);
        /* f · 2^24 is the subnormal's integer fraction; nearbyint rounds to nearest even. */
        return (uint16_t)(sign | (uint16_t)nearbyintf(f * 0x1p24f));
    }
    /* Normal: rebias the exponent and round the 13 dropped fraction bits to nearest even. */
    uint32_t half = magnitude - 0x38000000u; /* exponent − 112, still in float position */
    uint32_t rounding = 0xfffu + ((half >> 13) & 1u);
    return (uint16_t)(sign | ((half + rounding) >> 13));
}
