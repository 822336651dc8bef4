"""Facts about the machine: the environment a result is measured in, its state (load, other GPU processes),
NVML access and telemetry over the timed region, and the datasheet figures of GPUs."""
