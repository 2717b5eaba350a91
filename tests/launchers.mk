# Jobs started by cluster launchers instead of hvdrun (docs/LAUNCHERS.md):
# Open MPI's mpirun (one host, and a Kubernetes-style MPIJob on two hosts
# in network namespaces), torchrun from a PyPI torch venv, Slurm (a
# one-node cluster the test starts), and the errors of half-set or
# contradictory launcher environments. Each skips (77) when its launcher
# (or, for the MPIJob, namespaces) is missing.
%C%_launcher_tests = %D%/test-launch-mpirun.sh %D%/test-launch-errors.sh %D%/test-launch-torchrun.sh \
	%D%/test-launch-slurm.sh %D%/test-launch-mpijob.sh
TESTS += $(%C%_launcher_tests)
EXTRA_DIST += $(%C%_launcher_tests) %D%/python/launch_torch.py docs/LAUNCHERS.md
