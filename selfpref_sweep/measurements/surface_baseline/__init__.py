"""The surface-feature baseline: authorship told from length, punctuation and lexical features, no model asked.
Cell side in surface_cell.py, report side in surface_report.py. Nothing is imported here, so that the analysis
can load the report side without the cell's model stack."""
