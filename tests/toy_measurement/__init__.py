"""A toy measurement, for the test that adding one takes one folder and one registry line: "which summary is
longer?" on the cell's pairs (toy_cell.py), and its report side (toy_report.py)."""
