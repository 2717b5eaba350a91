"""What hvd's Keras frontends share: hvd.tensorflow.keras (tf.keras) and
hvd.keras (the keras package) are thin layers over these modules, which
import neither Keras themselves (the Keras version is the optimizer's or
the model's own)."""
