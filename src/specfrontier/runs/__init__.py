"""Running measurements: the server sweep (`sweep`), the simulator's virtual-time run (`virtual`), `bench`
against a running server, one cell measured for either (`cell`), and tables imported as runs (`imported`)."""
