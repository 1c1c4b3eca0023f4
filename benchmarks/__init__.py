"""GPU benchmarks and sweeps of the samplers (run on a CUDA machine; results under ``results/``)."""
