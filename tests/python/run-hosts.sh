#!/bin/sh
# The Python binding's pytest suite across 2 emulated hosts of 2 ranks each
# (a daemon per host on loopback): the collectives from hvd.torch and
# numpy, outputs, reuse, gradients, training, join, shared tensors and
# Adasum, over the shared memory of a host and TCP between hosts, and
# test_hosts.py (process sets within and across hosts). Left out: the
# process set tests of the other modules, whose sets span hosts (this
# version's CPU data plane refuses them), and the modules that start jobs
# of their own, elastic jobs, torch.compile and CUDA.
exec env HVD_PYTEST_HOSTS=a:2,b:2 "$(dirname "$0")/run-pytest.sh" 4 -k "(test_basics or test_numpy or test_torch_ops \
or test_torch_outputs or test_torch_reuse or test_torch_unnamed or test_torch_errors or test_torch_autograd \
or test_torch_grads or test_torch_compat or test_torch_training or test_torch_join or test_torch_shared \
or test_torch_adasum or test_hosts) and not process_set" "$@"
