"""What a cell leaves on disk, and how every reader finds it: the record schema shared by the cell, plan
mode, the simulator and the analysis (`schema`), atomic file writes (`atomic`), a sweep's cell
directories (`sweep_dirs`), and the features read from a stored text (`text_features`)."""
