#!/bin/bash
# Session 27 run 6 (nothing carried; .bundle from run 5): memcheck and racecheck of the rope
# sanitizer case list.
export SUITE_OUT=/tmp/s27-r6
SANITIZER_TESTS=rope SANITIZER_TIMEOUT=250 timeout 270 bash .bundle/suite.sh memcheck > /dev/null
SANITIZER_TESTS=rope SANITIZER_TIMEOUT=250 timeout 270 bash .bundle/suite.sh racecheck > /dev/null
tar czf $OUT/s27-r6.tgz -C $SUITE_OUT .
grep -h "ERROR SUMMARY\|RACECHECK SUMMARY\|Hazard\|test result\|exit" $SUITE_OUT/*.log | sort | uniq -c
