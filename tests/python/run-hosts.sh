#!/bin/sh
# The Python binding's pytest suite across 2 emulated hosts of 2 ranks each
# (a daemon per host on loopback): the collectives from hvd.torch and
# numpy, outputs, reuse, gradients, training, join, shared tensors, Adasum
# and process sets (within a host and across hosts), over the shared
# memory of a host and TCP between hosts; then test_hosts.py and the
# process sets on 3 hosts of 2. Left out: the modules that start jobs of
# their own, elastic jobs, torch.compile and CUDA.
here=$(dirname "$0")
HVD_PYTEST_HOSTS=a:2,b:2 "$here/run-pytest.sh" 4 -k "test_basics or test_numpy or test_torch_ops \
or test_torch_outputs or test_torch_reuse or test_torch_unnamed or test_torch_errors or test_torch_autograd \
or test_torch_grads or test_torch_compat or test_torch_training or test_torch_join or test_torch_shared \
or test_torch_adasum or test_hosts or test_process_sets" "$@" || exit
exec env HVD_PYTEST_HOSTS=a:2,b:2,c:2 "$here/run-pytest.sh" 6 -k "test_hosts or test_process_sets" "$@"
