# ctest helper: `kvgate bench attention` on a machine without a usable CUDA device must exit 3
# with "no CUDA device: <reason>". On a machine with one it prints SKIP (the test's
# SKIP_REGULAR_EXPRESSION) instead. Usage: cmake -DKVGATE=<path to kvgate> -P no_device_test.cmake
execute_process(COMMAND ${KVGATE} version --json OUTPUT_VARIABLE version_json RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "kvgate version --json failed (${rc})")
endif()
string(JSON devices GET "${version_json}" cuda_devices)
if(devices GREATER 0)
  message("SKIP: a CUDA device is present (${devices})")
  return()
endif()
execute_process(COMMAND ${KVGATE} bench attention --tokens 256 --batch 1 --kv dense,fp8
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 3)
  message(FATAL_ERROR "expected exit status 3, got ${rc}; stderr: ${err}")
endif()
if(NOT err MATCHES "no CUDA device: .+")
  message(FATAL_ERROR "expected 'no CUDA device: <reason>' on stderr, got: ${err}")
endif()
message("ok: exit 3, ${err}")
