# Runs abort_probe under mpirun -np 2 and checks that the job ends non-zero within LIMIT seconds
# with rank 1's message. Invoked as
#   cmake -DMPIEXEC=... -DMPIEXEC_FLAGS=<;-list> -DPROBE=... -DMODE=... -DEXPECT=... -DLIMIT=... -P expect_abort.cmake
string(TIMESTAMP started "%s")
execute_process(
  COMMAND ${MPIEXEC} ${MPIEXEC_FLAGS} -np 2 ${PROBE} ${MODE}
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
string(FIND "${output}" "${EXPECT}" found)
if(found EQUAL -1)
  message(FATAL_ERROR "the output lacks rank 1's message '${EXPECT}'")
endif()
