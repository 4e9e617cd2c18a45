# Read into llama-cpp-python's build by scripts/setup.sh (CMAKE_PROJECT_INCLUDE, after each
# project()): llama.cpp compiled as a unity build, its files in batches that read each header once,
# which takes a first setup's compile from 505 s to 415 s here (each alone). Apart from the batches:
# common/ (its json.cpp specializes templates another of its files has instantiated already) and
# mtmd's helpers (which must not see mtmd's internal headers that their batch would bring).
set(CMAKE_UNITY_BUILD ON)
if(NOT COMMAND anychat_unity_exceptions)
  function(anychat_unity_exceptions)
    if(TARGET llama-common)
      set_property(TARGET llama-common PROPERTY UNITY_BUILD OFF)
    endif()
    if(TARGET mtmd)
      set(mtmd_dir "${CMAKE_SOURCE_DIR}/vendor/llama.cpp/tools/mtmd")
      set_source_files_properties("${mtmd_dir}/mtmd-helper.cpp" "${mtmd_dir}/mtmd-helper-gen.cpp" TARGET_DIRECTORY mtmd
                                  PROPERTIES SKIP_UNITY_BUILD_INCLUSION ON)
    endif()
  endfunction()
  cmake_language(DEFER DIRECTORY "${CMAKE_SOURCE_DIR}" CALL anychat_unity_exceptions)
endif()
