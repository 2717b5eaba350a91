# Jobs started by cluster launchers instead of hvdrun (docs/LAUNCHERS.md):
# Open MPI's mpirun, torchrun from a PyPI torch venv, Slurm (a one-node
# cluster the test starts), and the errors of half-set or contradictory
# launcher environments. Each skips (77) when its launcher is missing.
%C%_launcher_tests = %D%/test-launch-mpirun.sh %D%/test-launch-errors.sh %D%/test-launch-torchrun.sh \
	%D%/test-launch-slurm.sh
TESTS += $(%C%_launcher_tests)
EXTRA_DIST += $(%C%_launcher_tests) %D%/python/launch_torch.py docs/LAUNCHERS.md
