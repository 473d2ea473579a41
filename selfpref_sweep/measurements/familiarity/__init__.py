"""Familiarity, a rival explanation: the judge's log-likelihood of each summary, the likelihood recognizer and the
self-specific familiarity. Cell side in familiarity_cell.py, report side in familiarity_report.py. Nothing is
imported here, so that the analysis can load the report side without the cell's model stack."""
