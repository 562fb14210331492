# CTest helper: runs CMD (a ;-list) and fails unless it exits with EXIT and its stderr matches
# STDERR_REGEX. Usage:
#   cmake "-DCMD=kvgate;run;--policy;p.toml" -DEXIT=3 "-DSTDERR_REGEX=..." -P expect_exit.cmake
execute_process(COMMAND ${CMD} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc STREQUAL "${EXIT}")
  message(FATAL_ERROR "expected exit ${EXIT}, got ${rc}\nstdout: ${out}\nstderr: ${err}")
endif()
if(NOT err MATCHES "${STDERR_REGEX}")
  message(FATAL_ERROR "stderr does not match '${STDERR_REGEX}':\n${err}")
endif()
message("ok: exit ${rc}: ${err}")
