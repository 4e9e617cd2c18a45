# Read into llama-cpp-python's build by scripts/setup.sh (CMAKE_PROJECT_INCLUDE, after each
# project()): the compile is most of a first setup's time, so it builds only what the wheel ships.
#
# llama.cpp's common/ (with its HTTP client) is left out: llama-cpp-python turns it on, but ships
# and loads only libllama, libggml and libmtmd, none of which links it.
if(PROJECT_NAME STREQUAL "llama.cpp")
  set(LLAMA_BUILD_COMMON OFF CACHE BOOL "llama.cpp's common library: not shipped by llama-cpp-python" FORCE)
endif()
# A unity build: llama.cpp's files in batches that read each header once, which took a first
# setup's compile from 505 s to 415 s (each alone). mtmd's helpers stay apart from the batches:
# they must not see mtmd's internal headers that their batch would bring.
set(CMAKE_UNITY_BUILD ON)
if(NOT COMMAND anychat_unity_exceptions)
  function(anychat_unity_exceptions)
    if(TARGET mtmd)
      set(mtmd_dir "${CMAKE_SOURCE_DIR}/vendor/llama.cpp/tools/mtmd")
      set_source_files_properties("${mtmd_dir}/mtmd-helper.cpp" "${mtmd_dir}/mtmd-helper-gen.cpp" TARGET_DIRECTORY mtmd
                                  PROPERTIES SKIP_UNITY_BUILD_INCLUSION ON)
    endif()
  endfunction()
  cmake_language(DEFER DIRECTORY "${CMAKE_SOURCE_DIR}" CALL anychat_unity_exceptions)
endif()
