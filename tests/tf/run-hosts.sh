#!/bin/sh
# hvd.tensorflow's pytest suite across 2 emulated hosts, one rank on a and
# two on b (a daemon per host on loopback): every collective, gradients,
# fusion, Keras and training over TCP between the hosts and shared memory
# on b, and process sets within b and across both hosts. Left out: the
# elastic tests, which start jobs of their own.
exec env HVD_PYTEST_HOSTS=a:1,b:2 "$(dirname "$0")/run-pytest.sh" 3 -k "not test_tf_elastic" "$@"
