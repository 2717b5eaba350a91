# tests/tf.mk: the pytest suite of hvd.tensorflow (tests/tf), run by every
# rank of a 2- and a 3-process job against a private daemon, with the
# Python configure built the op library against (else the environment of
# scripts/venv-tf.sh), and across 2 emulated hosts (run-hosts.sh). Skipped
# (77), saying why, without the op library.
# run-mixed.sh: hvd.torch and hvd.tensorflow in the same processes.
# run-legacy-np2.sh runs the Keras tests again with Keras 2 (tf_keras,
# TF_USE_LEGACY_KERAS=1), skipped without tf_keras.
# test-venv-tf.sh checks scripts/venv-tf.sh without downloading;
# test-tf-examples.sh runs examples/tensorflow/keras_digits.py on 2 ranks,
# test-tf2-examples.sh the TensorFlow 2 examples.
tf_test_files = \
	%D%/tf/conftest.py \
	%D%/tf/test_tf_ops.py \
	%D%/tf/test_tf_unnamed.py \
	%D%/tf/test_tf_grads.py \
	%D%/tf/test_tf_errors.py \
	%D%/tf/test_tf_training.py \
	%D%/tf/test_tf_process_set_ops.py \
	%D%/tf/test_tf_tf1.py \
	%D%/tf/test_tf_partial_tape.py \
	%D%/tf/test_tf_sync_batch_norm.py \
	%D%/tf/test_tf_fusion.py \
	%D%/tf/mixed_torch_tf.py \
	%D%/tf/keras_util.py \
	%D%/tf/test_keras.py \
	%D%/tf/test_keras_callbacks.py \
	%D%/tf/test_tf_elastic.py
tf_test_scripts = %D%/tf/run-np2.sh %D%/tf/run-np3.sh %D%/tf/run-hosts.sh %D%/tf/run-mixed.sh %D%/tf/run-legacy-np2.sh \
	%D%/test-venv-tf.sh %D%/test-tf-examples.sh %D%/test-tf2-examples.sh
EXTRA_DIST += $(tf_test_files) $(tf_test_scripts) %D%/tf/run-pytest.sh scripts/venv-tf.sh scripts/venv-torch.sh \
	examples/tensorflow/README.md examples/tensorflow/keras_digits.py \
	examples/tensorflow/tensorflow2_synthetic_benchmark.py examples/tensorflow/tensorflow2_digits.py
AM_TESTS_ENVIRONMENT += HVD_TF_PYTHON='$(TF_PYTHON)'; export HVD_TF_PYTHON;
if HAVE_PYTHON
TESTS += $(tf_test_scripts)
endif
