"""Training from imageshards output (tf.data input pipeline, Keras, Vertex AI)."""
