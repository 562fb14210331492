# CTest helper for the two binaries (apps/kvgate/serve_binary.h). Usage:
#   cmake -DMODE=links   -DKVGATE=<kvgate> -P binary_split_test.cmake
#     kvgate's dynamic dependencies (ldd, transitive) hold no libtorch, libtorch_cpu, libc10 or
#     libcudart, its ELF NEEDED entries none either, and it defines no symbol of readkv's model,
#     server, engine or CUDA libraries.
#   cmake -DMODE=missing -DKVGATE=<kvgate> -DWORK=<dir> -P binary_split_test.cmake
#     a copy of kvgate alone in WORK: `kvgate serve` exits 3 naming WORK/kvgate-serve and how to
#     build it; `kvgate check failures` likewise; `kvgate version` still works.
#   cmake -DMODE=forward -DKVGATE=<kvgate> -DKVGATE_SERVE=<kvgate-serve> -P binary_split_test.cmake
#     `kvgate serve --help` prints kvgate-serve's help; `kvgate serve --no-such-flag` exits 2 as
#     kvgate-serve does (the status passes through the exec).
set(forbidden "libtorch[._]|libtorch_cpu|libc10[._]|libcudart")

if(MODE STREQUAL "links")
  execute_process(COMMAND ldd ${KVGATE} RESULT_VARIABLE rc OUTPUT_VARIABLE ldd_out
                  ERROR_VARIABLE ldd_err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "ldd ${KVGATE} failed (${rc}): ${ldd_err}")
  endif()
  if(ldd_out MATCHES "(${forbidden})[^\n]*")
    message(FATAL_ERROR "kvgate loads '${CMAKE_MATCH_0}':\n${ldd_out}")
  endif()
  execute_process(COMMAND readelf -d ${KVGATE} RESULT_VARIABLE rc OUTPUT_VARIABLE needed)
  if(NOT rc EQUAL 0 OR NOT needed MATCHES "NEEDED")
    message(FATAL_ERROR "readelf -d ${KVGATE} failed (${rc}) or listed no NEEDED entry")
  endif()
  if(needed MATCHES "(${forbidden})[^\n]*")
    message(FATAL_ERROR "kvgate NEEDS '${CMAKE_MATCH_0}'")
  endif()
  execute_process(COMMAND nm -C --defined-only ${KVGATE} RESULT_VARIABLE rc
                  OUTPUT_VARIABLE symbols ERROR_VARIABLE nm_err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "nm ${KVGATE} failed (${rc}): ${nm_err}")
  endif()
  if(symbols MATCHES "[^\n]*readkv::(model|server|engine|cuda)::[^\n]*")
    message(FATAL_ERROR "kvgate holds code of the reference server: ${CMAKE_MATCH_0}")
  endif()
  if(NOT symbols MATCHES "readkv::codec::")
    message(FATAL_ERROR "nm found no readkv::codec symbol in ${KVGATE}: is it stripped?")
  endif()
  message("ok: no torch, c10 or cudart in ldd or NEEDED; no readkv model/server/engine/cuda code")

elseif(MODE STREQUAL "missing")
  file(REMOVE_RECURSE ${WORK})
  file(MAKE_DIRECTORY ${WORK})
  file(COPY ${KVGATE} DESTINATION ${WORK})
  set(lone ${WORK}/kvgate)
  execute_process(COMMAND ${lone} serve --port 0 RESULT_VARIABLE rc OUTPUT_VARIABLE out
                  ERROR_VARIABLE err)
  if(NOT rc EQUAL 3)
    message(FATAL_ERROR "kvgate serve without kvgate-serve: expected exit 3, got ${rc}: ${err}")
  endif()
  string(FIND "${err}" "kvgate serve needs kvgate-serve" at_what)
  string(FIND "${err}" "not at ${WORK}/kvgate-serve" at_path)
  string(FIND "${err}" "--target kvgate-serve" at_how)
  if(at_what LESS 0 OR at_path LESS 0 OR at_how LESS 0)
    message(FATAL_ERROR "the message must name kvgate-serve, ${WORK}/kvgate-serve and the build "
                        "command; got: ${err}")
  endif()
  execute_process(COMMAND ${lone} check failures --only server_crash --db ${WORK}/k.db
                  RESULT_VARIABLE rc ERROR_VARIABLE err)
  if(NOT rc EQUAL 3 OR NOT err MATCHES "kvgate check failures needs kvgate-serve")
    message(FATAL_ERROR "kvgate check failures without kvgate-serve: expected exit 3 naming it, "
                        "got ${rc}: ${err}")
  endif()
  execute_process(COMMAND ${lone} version RESULT_VARIABLE rc OUTPUT_VARIABLE out)
  if(NOT rc EQUAL 0 OR NOT out MATCHES "kvgate-serve: not built")
    message(FATAL_ERROR "kvgate version without kvgate-serve: got ${rc}: ${out}")
  endif()
  file(REMOVE_RECURSE ${WORK})
  message("ok: exit 3: ${err}")

elseif(MODE STREQUAL "forward")
  execute_process(COMMAND ${KVGATE} serve --help RESULT_VARIABLE rc OUTPUT_VARIABLE via_kvgate)
  execute_process(COMMAND ${KVGATE_SERVE} serve --help OUTPUT_VARIABLE direct)
  if(NOT rc EQUAL 0 OR NOT via_kvgate MATCHES "--kv" OR NOT via_kvgate STREQUAL direct)
    message(FATAL_ERROR "kvgate serve --help (exit ${rc}) is not kvgate-serve's help:\n"
                        "${via_kvgate}\n--- kvgate-serve serve --help:\n${direct}")
  endif()
  execute_process(COMMAND ${KVGATE} serve --no-such-flag RESULT_VARIABLE rc ERROR_VARIABLE err)
  if(NOT rc EQUAL 2 OR NOT err MATCHES "no-such-flag")
    message(FATAL_ERROR "kvgate serve --no-such-flag: expected exit 2 naming it, got ${rc}: ${err}")
  endif()
  message("ok: kvgate serve --help is kvgate-serve's; a bad flag exits 2 through the exec")

else()
  message(FATAL_ERROR "MODE must be links, missing or forward, got '${MODE}'")
endif()
