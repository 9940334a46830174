"""OGBench datasets: offline generation, file checks, the device-resident Dataset pytree and GC sampler."""
