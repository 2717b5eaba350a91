#!/bin/sh
# The Adasum tests of the Python binding with 4 processes (two levels of
# pairs); the whole suite runs with 2 and 3 (run-np2.sh, run-np3.sh).
exec "$(dirname "$0")/run-pytest.sh" 4 -k test_torch_adasum "$@"
