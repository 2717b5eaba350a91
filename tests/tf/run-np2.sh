#!/bin/sh
# hvd.tensorflow's pytest suite with 2 processes.
exec "$(dirname "$0")/run-pytest.sh" 2 "$@"
