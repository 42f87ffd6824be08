# Runs abort_probe under mpirun -np NP (default 2) and checks that the job ends non-zero within LIMIT
# seconds with the message EXPECT (and EXPECT2 when given). Invoked as
#   cmake -DMPIEXEC=... -DMPIEXEC_FLAGS=<;-list> -DPROBE=... -DMODE=... -DEXPECT=... [-DEXPECT2=...]
#         [-DNP=...] -DLIMIT=... -P expect_abort.cmake
if(NOT NP)
  set(NP 2)
endif()
string(TIMESTAMP started "%s")
execute_process(
  COMMAND ${MPIEXEC} ${MPIEXEC_FLAGS} -np ${NP} ${PROBE} ${MODE}
  RESULT_VARIABLE result OUTPUT_VARIABLE output ERROR_VARIABLE output
  TIMEOUT 120)
string(TIMESTAMP ended "%s")
math(EXPR seconds "${ended} - ${started}")
message("exit: ${result}, ${seconds} s\n${output}")
if(result EQUAL 0)
  message(FATAL_ERROR "the job exited 0 although rank 1 failed")
endif()
if(seconds GREATER LIMIT)
  message(FATAL_ERROR "the job took ${seconds} s to end, more than ${LIMIT} s")
endif()
foreach(expected IN ITEMS "${EXPECT}" "${EXPECT2}")
  string(FIND "${output}" "${expected}" found)
  if(found EQUAL -1)
    message(FATAL_ERROR "the output lacks the message '${expected}'")
  endif()
endforeach()
