"""Schedules: the measured best speculation depth per batch size, and the static best setting for a
declared workload (interactive, throughput, SLO-bound). Each engine writes a schedule in its own format
(`engines.base.ScheduleFormat`, registered by the engine module: SGLang's adaptive `candidate_steps`,
vLLM's `num_speculative_tokens_per_batch_size`)."""
