"""Training workloads: datasets, models and the Horovod Keras training loop."""
