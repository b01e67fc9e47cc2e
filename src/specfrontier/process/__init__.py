"""Processes specfrontier starts and must stop: servers in their own process group (`launch`), the guard
that stops a server's group if the tool dies (`watchdog`), and who owns a port (`port_owner`)."""
