# Read into llama-cpp-python's build by scripts/setup.sh (CMAKE_PROJECT_INCLUDE, after each
# project()), and by tests/test_llamacpp_build.py, which compiles the CPU backend the same way for
# CPUs other than the one it runs on: every choice of the build is here, in one place.
#
# ggml's own thread pool rather than OpenMP: with OMP_WAIT_POLICY=PASSIVE, which torch needs on a
# few cores, OpenMP's llama.cpp decodes three times slower.
set(GGML_OPENMP OFF CACHE BOOL "ggml: use OpenMP" FORCE)
# llama.cpp's common/ (with its HTTP client) is left out: llama-cpp-python turns it on, but ships
# and loads only libllama, libggml and libmtmd, none of which links it.
if(PROJECT_NAME STREQUAL "llama.cpp")
  set(LLAMA_BUILD_COMMON OFF CACHE BOOL "llama.cpp's common library: not shipped by llama-cpp-python" FORCE)
endif()
# A unity build: llama.cpp's files in batches that read each header once, which took a first
# setup's compile from 505 s to 415 s (each alone). Left out of the batches:
# - mtmd's helpers, which must not see mtmd's internal headers that their batch would bring;
# - ggml-cpu's AMX kernels, which declare ggml's quantized blocks apart from the files around them
#   (in one batch, 'block_q4_1 has no member named d' on every CPU with AMX).
set(CMAKE_UNITY_BUILD ON)
if(NOT COMMAND anychat_build_exceptions)
  function(anychat_build_exceptions)
    if(TARGET mtmd)
      set(mtmd_dir "${CMAKE_SOURCE_DIR}/vendor/llama.cpp/tools/mtmd")
      set_source_files_properties("${mtmd_dir}/mtmd-helper.cpp" "${mtmd_dir}/mtmd-helper-gen.cpp" TARGET_DIRECTORY mtmd
                                  PROPERTIES SKIP_UNITY_BUILD_INCLUSION ON)
    endif()
    if(TARGET ggml-cpu)
      set(amx_dir "${CMAKE_SOURCE_DIR}/vendor/llama.cpp/ggml/src/ggml-cpu/amx")
      set_source_files_properties("${amx_dir}/amx.cpp" "${amx_dir}/mmq.cpp" TARGET_DIRECTORY ggml-cpu
                                  PROPERTIES SKIP_UNITY_BUILD_INCLUSION ON)
      # -march=native, but never AMX: some VMs list AMX in /proc/cpuinfo and die with 'Illegal
      # instruction' on its first tile instruction, and llama.cpp uses AMX by default (its extra
      # buffer types), in every process that opens a model, ours or llama-cpp-python's own server.
      # Compiled out, no process can reach it; the other kernels (AVX-512, VNNI, BF16) stay native.
      include(CheckCXXCompilerFlag)
      check_cxx_compiler_flag("-mno-amx-tile -mno-amx-int8 -mno-amx-bf16" anychat_can_refuse_amx)
      if(anychat_can_refuse_amx AND CMAKE_SYSTEM_PROCESSOR MATCHES "^(x86_64|AMD64|amd64)$")
        target_compile_options(ggml-cpu PRIVATE -mno-amx-tile -mno-amx-int8 -mno-amx-bf16)
      endif()
    endif()
  endfunction()
  cmake_language(DEFER DIRECTORY "${CMAKE_SOURCE_DIR}" CALL anychat_build_exceptions)
endif()
