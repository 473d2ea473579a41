"""The placebo question: does the judge read the question, or answer every question alike? Cell side in
placebo_cell.py, report side in placebo_report.py. Nothing is imported here, so that the analysis can load the
report side without the cell's model stack."""
