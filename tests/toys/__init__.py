"""A toy agent and a toy backend, each one file: what adding an agent or a backend takes."""
