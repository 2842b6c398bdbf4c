# Installs halfgrad from HG_BUILD_DIR into a scratch prefix, then configures, builds and runs the
# consumer project against it. Any failing step fails the test.
file(REMOVE_RECURSE ${HG_WORK_DIR})
function(run_step what)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "${what} failed (${rc}):\n${out}\n${err}")
  endif()
  set(step_output "${out}" PARENT_SCOPE)
endfunction()
run_step("install" ${CMAKE_COMMAND} --install ${HG_BUILD_DIR} --prefix ${HG_WORK_DIR}/prefix)
if(NOT EXISTS ${HG_WORK_DIR}/prefix/include/halfgrad/halfgrad.h)
  message(FATAL_ERROR "install: include/halfgrad/halfgrad.h is missing")
endif()
run_step("configure" ${CMAKE_COMMAND} -S ${HG_CONSUMER_SOURCE} -B ${HG_WORK_DIR}/build
         -DCMAKE_PREFIX_PATH=${HG_WORK_DIR}/prefix -DCMAKE_BUILD_TYPE=Release
         -DHG_EXAMPLE_SOURCE=${HG_CONSUMER_SOURCE}/../../examples/13_your_own_data.cpp)
run_step("build" ${CMAKE_COMMAND} --build ${HG_WORK_DIR}/build)
run_step("run" ${HG_WORK_DIR}/build/consumer)
if(NOT step_output MATCHES "consumer ok 12")
  message(FATAL_ERROR "consumer printed: ${step_output}")
endif()
# The lesson trains and checks its own accuracy (exit 1 below 90%).
run_step("examples/13_your_own_data against the install" ${CMAKE_COMMAND} -E chdir ${HG_WORK_DIR}/build
         ${HG_WORK_DIR}/build/your_own_data)
if(NOT step_output MATCHES "epoch 6: .*test accuracy")
  message(FATAL_ERROR "your_own_data printed: ${step_output}")
endif()

# Installed programs start from any prefix with no LD_LIBRARY_PATH (RPATH $ORIGIN/../lib): the
# prefix is moved after installing, then hg-train is run from its new place.
if(EXISTS ${HG_WORK_DIR}/prefix/bin/hg-train)
  file(RENAME ${HG_WORK_DIR}/prefix ${HG_WORK_DIR}/moved-prefix)
  run_step("installed hg-train" ${CMAKE_COMMAND} -E env --unset=LD_LIBRARY_PATH ${HG_WORK_DIR}/moved-prefix/bin/hg-train --help)
  if(NOT step_output MATCHES "--precision")
    message(FATAL_ERROR "installed hg-train --help printed: ${step_output}")
  endif()
endif()
message(STATUS "install tree OK")
