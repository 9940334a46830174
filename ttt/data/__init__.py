"""OGBench datasets: offline generation (and the SAC ant expert it needs), file checks, the device-resident Dataset
pytree and the goal-conditioned sampler."""
