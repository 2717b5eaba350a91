#!/bin/sh
# hvd.tensorflow's pytest suite with 3 processes.
exec "$(dirname "$0")/run-pytest.sh" 3 "$@"
