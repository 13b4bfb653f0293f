#!/usr/bin/env bash
# Sourced with a program linked with OpenBLAS: when OpenBLAS does not know this CPU (a
# release older than the CPU falls back to its SSE3 "Prescott" kernels, several times slower
# on the training step's matrix products), exports OPENBLAS_CORETYPE for the newest kernels
# the CPU can run. A core type set by the caller, or one OpenBLAS picked itself, is kept.
#   source scripts/blas-coretype.sh build/train_selective_copy
tg_blas_program=$1
if [ -z "${OPENBLAS_CORETYPE:-}" ] && [ -r /proc/cpuinfo ]; then
    tg_blas_core=$( (OPENBLAS_VERBOSE=2 "$tg_blas_program" --help 2>&1 || true) | sed -n 's/^Core: //p' | head -1 || true)
    case "$tg_blas_core" in
    Prescott | Core2 | Penryn | Dunnington | Nehalem | Atom | Katmai | Coppermine | Northwood)
        tg_flags=$(grep -m1 '^flags' /proc/cpuinfo)
        if [[ $tg_flags == *avx512f* && $tg_flags == *avx512bw* && $tg_flags == *avx512vl* && $tg_flags == *avx512dq* ]]; then
            export OPENBLAS_CORETYPE=SkylakeX
        elif [[ $tg_flags == *avx2* && $tg_flags == *fma* ]]; then
            export OPENBLAS_CORETYPE=Haswell
        fi
        if [ -n "${OPENBLAS_CORETYPE:-}" ]; then
            echo "OpenBLAS took this CPU for $tg_blas_core; using its $OPENBLAS_CORETYPE kernels (OPENBLAS_CORETYPE)" >&2
        fi
        unset tg_flags
        ;;
    esac
    unset tg_blas_core
fi
unset tg_blas_program
