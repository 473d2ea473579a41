"""Statistics the cell and the analysis share: inference with few clusters (`clustered`: CR2 with
Bell-McCaffrey degrees of freedom, the t interval over articles) and classifier metrics (`classifier_metrics`:
accuracy with its Wilson interval, AUROC, reliability bins)."""
