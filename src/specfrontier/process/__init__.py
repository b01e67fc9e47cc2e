"""Processes specfrontier starts and must stop: servers in their own process group (`launch`), the guard
that stops a server's group if the tool dies (`watchdog`), who owns a port (`port_owner`), and the kernel's
stop of a child whose parent died (`parent_death`, used by `launch` and by `load.workers`)."""
