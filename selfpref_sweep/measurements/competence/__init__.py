"""The judge-competence control: can the judge tell this article's summary from another article's? Cell side in
competence_cell.py, its verdict columns in competence_columns.py, report side in competence_report.py. Nothing is
imported here, so that the analysis can load the report side without the cell's model stack."""
