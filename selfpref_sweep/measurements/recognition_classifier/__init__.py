"""Recognition read as a classifier: accuracy per order, AUROC and calibration of the judge's recognition answers.
Cell side in classifier_cell.py, report side in classifier_report.py. Nothing is imported here, so that the
analysis can load the report side without the cell's model stack."""
