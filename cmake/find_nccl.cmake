# cmake/find_nccl.cmake: finds NCCL's header and library and defines the imported target
# tg_nccl (and NCCL_INCLUDE_DIR, NCCL_LIBRARY). Looks, in order, in NCCL_ROOT (a CMake or
# environment variable), the nvidia-nccl-cu* wheel of the Python on PATH (pip install
# nvidia-nccl-cu13: its lib/ holds only libnccl.so.2), the CUDA toolkit and the system.
set(tg_nccl_hints)
foreach(root "${NCCL_ROOT}" "$ENV{NCCL_ROOT}")
  if(root)
    list(APPEND tg_nccl_hints "${root}")
  endif()
endforeach()
find_package(Python3 COMPONENTS Interpreter QUIET)
if(Python3_Interpreter_FOUND)
  execute_process(
    COMMAND "${Python3_EXECUTABLE}" -c "import nvidia.nccl as n; print(list(n.__path__)[0])"
    OUTPUT_VARIABLE tg_nccl_wheel OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET RESULT_VARIABLE tg_nccl_python)
  if(tg_nccl_python EQUAL 0 AND tg_nccl_wheel)
    list(APPEND tg_nccl_hints "${tg_nccl_wheel}")
  endif()
endif()
list(APPEND tg_nccl_hints "${CUDAToolkit_LIBRARY_ROOT}" "${CUDAToolkit_TARGET_DIR}")

# The header and the library from the same place: the first hint that has both, else the
# system's paths.
foreach(root ${tg_nccl_hints})
  if(NOT NCCL_INCLUDE_DIR AND EXISTS "${root}/include/nccl.h")
    find_library(tg_nccl_candidate NAMES nccl libnccl.so.2 NAMES_PER_DIR PATHS "${root}"
                 PATH_SUFFIXES lib lib64 lib/x86_64-linux-gnu NO_DEFAULT_PATH)
    if(tg_nccl_candidate)
      set(NCCL_INCLUDE_DIR "${root}/include" CACHE PATH "NCCL's include directory")
      set(NCCL_LIBRARY "${tg_nccl_candidate}" CACHE FILEPATH "NCCL's library")
    endif()
    unset(tg_nccl_candidate CACHE)
  endif()
endforeach()
find_path(NCCL_INCLUDE_DIR nccl.h)
find_library(NCCL_LIBRARY NAMES nccl libnccl.so.2 NAMES_PER_DIR)
if(NCCL_INCLUDE_DIR AND NCCL_LIBRARY)
  file(STRINGS "${NCCL_INCLUDE_DIR}/nccl.h" tg_nccl_version REGEX "^#define NCCL_(MAJOR|MINOR|PATCH) ")
  string(REGEX REPLACE "[^0-9;]" "" tg_nccl_version "${tg_nccl_version}")
  string(REPLACE ";" "." tg_nccl_version "${tg_nccl_version}")
  message(STATUS "tapegrad: NCCL ${tg_nccl_version} at ${NCCL_LIBRARY}")
  add_library(tg_nccl UNKNOWN IMPORTED)
  set_target_properties(tg_nccl PROPERTIES IMPORTED_LOCATION "${NCCL_LIBRARY}"
                                           INTERFACE_INCLUDE_DIRECTORIES "${NCCL_INCLUDE_DIR}")
endif()
