# Exit codes are part of the contract (docs/cli.md): usage errors 2, invalid workloads 3.
foreach(case "2;plan" "2;plan;${JOB};--format;xml" "3;plan;${JOB};--run;no_such_run" "0;plan;${JOB};--run;two_stage_pipeline"
             "2;foo" "2;report;/nonexistent/results.h5;-o;/tmp/pipebench-cli-report" "2;report;${JOB};-o;/proc/no/such/dir"
             "2;trace;/nonexistent.h5;-o;/tmp/x.json")
  list(POP_FRONT case expected)
  execute_process(COMMAND ${CMD} ${case} RESULT_VARIABLE rc OUTPUT_QUIET ERROR_QUIET)
  if(NOT rc EQUAL expected)
    message(FATAL_ERROR "pipebench ${case}: exit ${rc}, expected ${expected}")
  endif()
endforeach()
